"""Invariants of decoding with GPT-2's tied head (issue 25): decoder_only_step, greedy_decode
and beam_search with model='decoder_only', tie_embeddings=True (hypothesis). Each test name
is the invariant; the tied model is judged by decoder_only(tie_embeddings=True) only."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from .test_properties_layers import configs, lm

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
V, P, MAX_LEN = 10, 2, 6


def _tied(r, n, d, norm="pre", spread=3.0):
    """decoder_only parameters without lm_head.* (the head is embed.table^T); the table
    scaled by ``spread`` so the logits are spread (few near-ties)."""
    p = {k: v for k, v in lm(r, n, d, V, 8, norm).items() if not k.startswith("lm_head.")}
    p["embed.table"] = p["embed.table"] * spread
    return p


@given(seed=seeds, cfg=configs, t=st.integers(2, 6), data=st.data())
def test_tied_incremental_decoding_with_cache_equals_tied_decoder_only(
        backend, device, attnspec_session, ops, seed, cfg, t, data):
    """decoder_only_step(tie_embeddings=True) over chunks of the ids gives the logits of
    decoder_only(tie_embeddings=True) on all ids (the same head, embed.table^T)."""
    (d, h), norm, n = cfg
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    p = _tied(r, n, d, norm, spread=1.0)
    ids = r.integers(0, V, (2, t))
    ids[:, 0] = 1
    cuts = sorted(set(data.draw(st.lists(st.integers(1, t - 1), max_size=3))))
    init = ops.raw("decoder_only_init_cache", "decoding")
    step = ops.raw("decoder_only_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    kw = dict(pad_id=0, num_layers=n, num_heads=h, norm=norm, tie_embeddings=True)
    cache = init(batch_size=2, num_layers=n, num_heads=h, params=bp)
    chunks = []
    for a, b in zip([0, *cuts], [*cuts, t]):
        logits, cache = step(backend.asarray(ids[:, a:b], dtype=None, device=device), cache,
                             params=bp, **kw)
        chunks.append(backend.to_numpy(logits).astype(np.float64))
    ops.assert_close(np.concatenate(chunks, axis=1), ops.decoder_only(ids=ids, params=p, **kw),
                     scale=8)


ATTRS = dict(model="decoder_only", bos_id=1, eos_id=2, pad_id=0, num_layers=1, num_heads=2,
             norm="pre", activation="gelu_tanh", tie_embeddings=True)


def _model(seed):
    r = np.random.default_rng(seed)
    p = _tied(r, 1, 8)
    prompt = r.integers(3, V, (2, P))
    prompt[:, 0] = 1
    return prompt, p


def _logits(ops, ids, p):
    return np.asarray(ops.decoder_only(ids=ids, pad_id=0, num_layers=1, num_heads=2, norm="pre",
                                       activation="gelu_tanh", tie_embeddings=True, params=p),
                      np.float64)


@given(seed=seeds)
def test_tied_greedy_decode_appends_the_argmax_of_tied_decoder_only_at_each_step(ops, seed):
    """Each generated token (up to a row's EOS) is the arg-max of decoder_only(tie) at the
    position before it; a row holds pad_id after its EOS."""
    prompt, p = _model(seed)
    ids = np.asarray(ops.greedy_decode(prompt=prompt, max_len=MAX_LEN, params=p, **ATTRS))
    assert np.array_equal(ids[:, :P], prompt)
    for b in range(2):
        gen = list(ids[b, P:])
        g = gen.index(2) + 1 if 2 in gen else len(gen)
        assert all(t == 0 for t in gen[g:]), ids[b]
        logits = _logits(ops, ids[b:b + 1, :P + g], p)[0]  # (P + g, V)
        top2 = -np.sort(-logits, axis=-1)[P - 1:P - 1 + g, :2]
        assume(np.all(top2[:, 0] - top2[:, 1] > 0.05 * (1 + np.abs(top2[:, 0]))))
        assert np.array_equal(ids[b, P:P + g], np.argmax(logits[P - 1:P - 1 + g], axis=-1))


@given(seed=seeds, alpha=st.sampled_from([0.0, 1.0]))
def test_tied_beam_search_scores_are_sums_of_tied_decoder_only_log_probs_over_g_alpha(
        ops, seed, alpha):
    """beam_search(tie) through the cached steps: each returned hypothesis's score is its
    sum of log-probs under decoder_only(tie) (the whole prefix) / g**length_penalty."""
    prompt, p = _model(seed)
    ids, scores = ops.beam_search(prompt=prompt, max_len=MAX_LEN, num_beams=3,
                                  num_return_sequences=3, length_penalty=alpha, params=p,
                                  **ATTRS)
    ids, scores = np.asarray(ids), np.asarray(scores, np.float64)
    for b in range(2):
        for h in range(3):
            seq = list(ids[b, h])
            gen = seq[P:]
            g = gen.index(2) + 1 if 2 in gen else len(gen)
            logits = _logits(ops, ids[b, h][None, :P + g], p)[0]
            top = logits.max(axis=-1, keepdims=True)
            lp = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
            total = sum(lp[P - 1 + i, seq[P + i]] for i in range(g))
            ops.assert_close(scores[b, h], total / g ** alpha, scale=8,
                             what=f"row {b} hypothesis {h}")
