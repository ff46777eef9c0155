"""Planted bugs in beam search (spec/components/beam_search.md) that the vectors must catch at
every dtype, and its rules checked on small cases of their own."""

import math

import numpy as np
import pytest
from attnspec.backends.composite.beam import BeamSearch, beam_attributes
from attnspec.backends.numpy import decoding
from attnspec.spec.errors import ConfigError, ParameterError

from .mutants import assert_rejected, composite_mutant, rejections


def _ties_to_the_highest_index(self, scores, count):
    """Equal candidate scores: the higher flat index first (the higher slot, then the higher
    id), as a sort by (score, id) descending gives."""
    ops = self.ops
    m = scores.shape[1]
    flat = ops.arange(0, m, like=scores)[None, :]
    taken = ops.falses(tuple(scores.shape), like=scores)
    picks = []
    for _ in range(count):
        left = ops.where(taken, -math.inf, scores)
        idx = m - 1 - ops.argmax(ops.reverse(left, axis=1), axis=1)
        idx = ops.where(ops.take_rows(left, idx) == -math.inf,
                        ops.argmax(~taken, axis=1), idx)
        picks.append((idx, ops.take_rows(scores, idx)))
        taken = taken | (flat == idx[:, None])
    return picks


def _finished_still_expanded(self, cands, k):
    """The live beams are the first K candidates, ending ones included (EOS beams go on)."""
    ops = self.ops
    going = ops.stack([val for val, _, _ in cands], axis=1)
    seqs = ops.stack([seq for _, seq, _ in cands], axis=1)
    picks = self._best(going, k)
    return (ops.stack([v for _, v in picks], axis=1),
            [ops.take_rows(seqs, i) for i, _ in picks], [i for i, _ in picks])


def _eos_counted_against_the_live_width(self, cands, k):
    """The live beams are the non-ending ones among the top K only (an EOS in the top K
    leaves a slot empty) instead of the first K non-ending of the 2K."""
    ops = self.ops
    going = ops.stack([ops.where(ends, -math.inf, val) if r < k else val - math.inf
                       for r, (val, _, ends) in enumerate(cands)], axis=1)
    seqs = ops.stack([seq for _, seq, _ in cands], axis=1)
    picks = self._best(going, k)
    return (ops.stack([v for _, v in picks], axis=1),
            [ops.take_rows(seqs, i) for i, _ in picks], [i for i, _ in picks])


def _stop_at_first_finished(self, live, fin, g, longest, alpha, early_stopping, k):
    """A row stops as soon as one hypothesis has finished (OpenNMT-like)."""
    return self.ops.any_(fin[2], axis=1)


def _early_stopping_ignored(self, live, fin, g, longest, alpha, early_stopping, k):
    """early_stopping True treated as False (the heuristic decides)."""
    return BeamSearch._done(self, live, fin, g, longest, alpha,
                            False if early_stopping is True else early_stopping, k)


METHODS = {
    # the length penalty divides by the whole length, prompt (or BOS) included (vLLM's)
    "length_penalty_on_the_total_length": {"_penalty_length": staticmethod(lambda n, p0: n)},
    # ... or by the generated length without the EOS token
    "length_penalty_without_eos": {"_penalty_length": staticmethod(
        lambda n, p0: max(n - p0 - 1, 1))},
    "no_length_penalty": {"_penalised": staticmethod(lambda score, g, alpha: score)},
    "ties_to_the_highest_index": {"_rank": _ties_to_the_highest_index},
    "finished_beams_still_expanded": {"_live": _finished_still_expanded},
    "eos_counted_against_the_live_width": {"_live": _eos_counted_against_the_live_width},
    # every ending candidate of the 2K finishes, not only those within the top K (vLLM's)
    "eos_beyond_the_top_k_finishes": {"_eligible": staticmethod(lambda cands, k: cands)},
    "log_probs_not_normalised": {"_log_probs": lambda self, logits: logits},
    "every_slot_starts_live": {"_initial": lambda self, zero, k: zero},
    "stop_at_the_first_finished": {"_done": _stop_at_first_finished},
    # the cached step (decoder_only, llama_decoder_only): the cache rows kept in slot order,
    # not gathered by the slot each new beam extends (a beam then reads another's keys)
    "cache_rows_not_reordered": {"_reorder": lambda self, cache, parents, b: cache},
    "early_stopping_true_ignored": {"_done": _early_stopping_ignored},
    # early_stopping "never" bounds with the current length, as False does
    "never_bound_at_the_current_length": {"_bound_length": staticmethod(
        lambda g, longest, alpha, early_stopping: g)},
}


@pytest.mark.parametrize("bug", sorted(METHODS))
def test_beam_search_mutant_is_rejected(bug):
    with np.errstate(all="ignore"):
        assert_rejected(composite_mutant(BeamSearch, METHODS[bug]), "beam_search")


def test_correct_beam_search_backend_is_not_rejected():
    assert set(rejections(composite_mutant(BeamSearch), "beam_search").values()) == {0}


# -- the rules on cases of their own ----------------------------------------------------------


def _bigram(table, d=None):
    """decoder_only params whose logits after token a are exactly table[a] (V = D, one-hot
    embeddings, the layer an identity, LayerNorm undone by the head)."""
    v = table.shape[0]
    d = d or v + 1  # V one-hot rows in V + 1 dims: LN keeps them independent
    e = np.eye(v, d)
    mean = e.mean(axis=1, keepdims=True)
    ln = (e - mean) / np.sqrt(e.var(axis=1, keepdims=True) + 1e-5)  # (V, D)
    w = np.linalg.lstsq(ln, table, rcond=None)[0]  # LN(e_a) @ w = table[a]
    p = {"embed.table": e, "pos.table": np.zeros((16, d)),
         "final_norm.gamma": np.ones(d), "final_norm.beta": np.zeros(d),
         "lm_head.w": w, "lm_head.b": np.zeros(v)}
    z = np.zeros
    p.update({"layers.0.self_attn.w_q": z((d, d)), "layers.0.self_attn.w_k": z((d, d)),
              "layers.0.self_attn.w_v": z((d, d)), "layers.0.self_attn.w_o": z((d, d)),
              "layers.0.norm1.gamma": np.ones(d), "layers.0.norm1.beta": z(d),
              "layers.0.ffn.w1": z((d, 2 * d)), "layers.0.ffn.b1": z(2 * d),
              "layers.0.ffn.w2": z((2 * d, d)), "layers.0.ffn.b2": z(d),
              "layers.0.norm2.gamma": np.ones(d), "layers.0.norm2.beta": z(d)})
    return p


def _search(table, prompt, **attrs):
    a = dict(model="decoder_only", bos_id=1, eos_id=2, pad_id=0, max_len=6, num_beams=2,
             num_layers=1, num_heads=1, norm="pre", activation="gelu")
    a.update(attrs)
    return decoding.beam_search(np.array(prompt), params=_bigram(np.asarray(table, float)), **a)


def _log_probs(rows):
    """A table whose rows are the log-probabilities given (each row's softmax is itself)."""
    return np.log(np.asarray(rows, dtype=float))


def test_an_eos_candidate_ranked_k_or_lower_is_dropped():
    """From token 3, EOS is the third candidate of K = 2: it does not finish then."""
    v = 8
    rows = np.full((v, v), 0.01)
    rows[3, [4, 5, 2]] = [0.5, 0.3, 0.13]   # after 3: 4, 5, then EOS (rank 2 >= K)
    rows[4, [2, 6]] = [0.05, 0.9]           # after 4: 6 mostly
    rows[5, [2, 6]] = [0.05, 0.9]
    rows[6, [2, 7]] = [0.9, 0.05]           # after 6: EOS
    rows = rows / rows.sum(axis=1, keepdims=True)
    ids, scores = _search(_log_probs(rows), [[1, 3]], num_return_sequences=2)
    assert [1, 3, 2] not in [list(h[:3]) for h in ids[0]]
    assert ids[0, 0].tolist()[:5] == [1, 3, 4, 6, 2]


def test_scores_are_the_sum_over_the_generated_length():
    rows = np.full((8, 8), 0.02)
    rows[3, 4], rows[4, 2] = 0.8, 0.8
    rows = rows / rows.sum(axis=1, keepdims=True)
    ids, scores = _search(_log_probs(rows), [[1, 3]], length_penalty=2.0)
    assert ids[0, 0].tolist() == [1, 3, 4, 2, 0, 0]
    want = (np.log(rows[3, 4]) + np.log(rows[4, 2])) / 2 ** 2
    np.testing.assert_allclose(scores[0, 0], want, rtol=1e-9)


def test_attributes_are_checked_with_the_spec_errors():
    for bad, mention in (({"num_beams": 0}, "num_beams"),
                         ({"num_return_sequences": 3}, "num_return_sequences"),
                         ({"length_penalty": "1"}, "length_penalty"),
                         ({"length_penalty": math.inf}, "length_penalty"),
                         ({"early_stopping": "always"}, "early_stopping"),
                         ({"early_stopping": 1}, "early_stopping")):
        kw = {"num_beams": 2, "num_return_sequences": 1, "length_penalty": 1.0,
              "early_stopping": False, **bad}
        with pytest.raises(ConfigError, match=mention):
            beam_attributes(**kw)


def test_tie_embeddings_is_allowed_for_a_decoder_only_model_without_lm_head():
    """GPT-2's tied head (tests/test_greedy_tie.py): refused only where lm_head.* is given."""
    with pytest.raises(ParameterError, match="tie_embeddings"):
        _search(np.zeros((8, 8)), [[1, 3]], tie_embeddings=True)
