"""Invariants of beam_search (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend. The shapes
are fixed (a compiling backend compiles once per shape); the values vary.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from .test_properties_layers import lm

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
ATTRS = dict(model="decoder_only", bos_id=1, eos_id=2, pad_id=0, num_layers=1, num_heads=2,
             norm="pre", activation="gelu")
B, P, MAX_LEN, V = 2, 2, 6, 10


def _model(seed, eos_bias):
    r = np.random.default_rng(seed)
    p = lm(r, 1, 8, V, 8)
    p["lm_head.w"] = p["lm_head.w"] * 3  # spread logits: few near-ties
    p["lm_head.b"][2] += eos_bias
    p["lm_head.b"][0] = -8.0  # pad_id is never generated
    prompt = r.integers(3, V, (B, P))
    prompt[:, 0] = 1
    return prompt, p


def _log_probs(ops, ids, p):
    """log_softmax of the model's logits over every prefix of ids (B, T): (B, T, V) float64."""
    logits = np.asarray(ops.decoder_only(ids=ids, pad_id=0, num_layers=1, num_heads=2,
                                         norm="pre", activation="gelu", params=p), np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)), logits


@given(seed=seeds, eos_bias=st.floats(0, 3))
def test_beam_search_with_one_beam_is_greedy_decode(ops, seed, eos_bias):
    """K = 1: the top candidate is the arg-max; a row ends at its first EOS (the stopping
    test then holds at once), so the hypothesis is greedy decoding's row."""
    prompt, p = _model(seed, eos_bias)
    greedy = np.asarray(ops.greedy_decode(prompt=prompt, max_len=MAX_LEN, params=p, **ATTRS))
    _, logits = _log_probs(ops, greedy, p)
    top2 = -np.sort(-logits, axis=-1)[..., :2]
    assume(np.all(top2[:, P - 1:, 0] - top2[:, P - 1:, 1] > 0.05 * (1 + np.abs(top2[:, P - 1:, 0]))))
    ids, _ = ops.beam_search(prompt=prompt, max_len=MAX_LEN, num_beams=1, params=p, **ATTRS)
    assert np.array_equal(np.asarray(ids)[:, 0], greedy)


@given(seed=seeds, eos_bias=st.floats(0, 3), alpha=st.sampled_from([0.0, 1.0, 2.0]))
def test_beam_search_scores_are_non_increasing_sums_of_log_probs_over_g_alpha(ops, seed,
                                                                             eos_bias, alpha):
    """Each returned score is its hypothesis's sum of log-probs under the model divided by
    g**length_penalty (g the generated length, EOS included), best first."""
    prompt, p = _model(seed, eos_bias)
    ids, scores = ops.beam_search(prompt=prompt, max_len=MAX_LEN, num_beams=2,
                                  num_return_sequences=2, length_penalty=alpha, params=p,
                                  **ATTRS)
    ids, scores = np.asarray(ids), np.asarray(scores, np.float64)
    assert np.all(scores[:, 0] >= scores[:, 1])
    for b in range(B):
        for h in range(2):
            seq = list(ids[b, h])
            gen = seq[P:]
            g = gen.index(2) + 1 if 2 in gen else len(gen)
            assert all(t == 0 for t in gen[g:]) and np.array_equal(seq[:P], prompt[b])
            lp, _ = _log_probs(ops, ids[b, h][None, :P + g], p)
            total = sum(lp[0, P - 1 + i, seq[P + i]] for i in range(g))
            ops.assert_close(scores[b, h], total / g ** alpha, scale=8,
                             what=f"row {b} hypothesis {h}")


@given(seed=seeds, eos_bias=st.floats(0, 3))
def test_beam_search_returns_the_first_r_of_its_k_hypotheses(ops, seed, eos_bias):
    """num_return_sequences R gives the first R of what R = K gives (the same search)."""
    prompt, p = _model(seed, eos_bias)
    ids2, s2 = ops.beam_search(prompt=prompt, max_len=MAX_LEN, num_beams=2,
                               num_return_sequences=2, params=p, **ATTRS)
    ids1, s1 = ops.beam_search(prompt=prompt, max_len=MAX_LEN, num_beams=2, params=p, **ATTRS)
    assert np.array_equal(np.asarray(ids1), np.asarray(ids2)[:, :1])
    assert np.array_equal(np.asarray(s1), np.asarray(s2)[:, :1])
