"""Planted bugs in the recurrent components that the vectors must catch at every dtype.

A GRU mutant patches one piece of ``backends/numpy/rnn.py`` (the step, the run) for the
duration of a call; an encoder-decoder mutant overrides one method of the shared composite
(the attention call, the decoder step...). Either way the public functions run the real
code around the planted bug.
"""

import contextlib
from unittest import mock

import numpy as np
import pytest
from attnspec.backends.composite import Kernels
from attnspec.backends.composite.rnn import Seq2Seq
from attnspec.backends.numpy import embedding as np_embedding
from attnspec.backends.numpy import rnn
from attnspec.conformance.runner import run_vector
from attnspec.spec.vectors import default_spec

from .mutants import assert_rejected, composite_mutant, mutant, rejections

FUNCTIONS = ("gru_cell", "gru", "seq2seq_attention", "seq2seq_greedy_decode")  # use rnn._step
_real = {name: getattr(rnn, name) for name in ("_step", "_sigmoid", "_run")}


def rnn_mutant(target=rnn, **replacements):
    """The NumPy backend with ``target.<name>`` replaced during every rnn call."""
    def wrap(fn):
        def call(*args, **kwargs):
            with contextlib.ExitStack() as stack:
                for name, new in replacements.items():
                    stack.enter_context(mock.patch.object(target, name, new))
                return fn(*args, **kwargs)
        return call
    return mutant(**{name: wrap(getattr(rnn, name)) for name in FUNCTIONS})


# -- GRU cell ----------------------------------------------------------------------

def _blocks(x, h, w):
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih
    gh = h @ w.w_hh + w.b_hh
    return hid, gi, gh


def gate_order_zrn(x, h, w):
    """Keras' gate order (z, r, n) read from a (r, z, n) layout."""
    hid, gi, gh = _blocks(x, h, w)
    z = rnn._sigmoid(gi[:, :hid] + gh[:, :hid])
    r = rnn._sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    return (1 - z) * n + z * h


def reset_before(x, h, w):
    """Keras reset_after=False / Cho et al.: n = tanh(x W_in + b_in + (r h) W_hn + b_hn)."""
    hid, gi, gh = _blocks(x, h, w)
    r = rnn._sigmoid(gi[:, :hid] + gh[:, :hid])
    z = rnn._sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + (r * h) @ w.w_hh[:, 2 * hid:] + w.b_hh[2 * hid:])
    return (1 - z) * n + z * h


def swapped_interpolation(x, h, w):
    """h' = z n + (1 - z) h (the update gate read the other way round)."""
    hid, gi, gh = _blocks(x, h, w)
    r = rnn._sigmoid(gi[:, :hid] + gh[:, :hid])
    z = rnn._sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    return z * n + (1 - z) * h


def hidden_bias_outside_reset(x, h, w):
    """n = tanh(x W_in + b_in + b_hn + r (h W_hn)): b_hn not multiplied by r."""
    hid, gi, gh = _blocks(x, h, w)
    r = rnn._sigmoid(gi[:, :hid] + gh[:, :hid])
    z = rnn._sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + w.b_hh[2 * hid:] + r * (gh[:, 2 * hid:] - w.b_hh[2 * hid:]))
    return (1 - z) * n + z * h


CELL_MUTANTS = [gate_order_zrn, reset_before, swapped_interpolation, hidden_bias_outside_reset]


@pytest.mark.parametrize("component", ["gru_cell", "gru", "seq2seq_attention"])
@pytest.mark.parametrize("broken", CELL_MUTANTS, ids=lambda f: f.__name__)
def test_gru_step_mutant_is_rejected(broken, component):
    assert_rejected(rnn_mutant(_step=broken), component)


def ignore_h0(x, h, w):
    """The sequence always starts from zeros, whatever h0 says."""
    return _real["_run"](x, np.zeros_like(h), w)


def test_gru_ignoring_h0_is_rejected():
    assert_rejected(rnn_mutant(_run=ignore_h0), "gru")


# -- encoder-decoder ------------------------------------------------------------------
# The encoder-decoder is the shared composite (backends/composite/rnn.py): a mutant
# overrides one of its methods, or one kernel it calls, on the NumPy kernels.

def attend_unmasked(self, m, queries):
    """Source padding not masked: pad positions take part in the attention softmax."""
    return Seq2Seq._attend(self, m._replace(keep=np.ones_like(m.keep)), queries)


def last_state_regardless_of_padding(self, src_ids, attention, pad_id, params):
    """The decoder starts from the encoder's state at position S-1, even when it is a pad."""
    m = Seq2Seq._encode(self, src_ids, attention, pad_id, params)
    return m._replace(h0=m.outputs[:, -1])


def luong_from_previous_state(self, m, embs):
    """Luong attention from h_{t-1} instead of h_t (teacher-forced and decoding)."""
    if m.attention == "additive":
        return Seq2Seq._teacher_forced(self, m, embs)
    states, _ = rnn.gru(embs, m.h0, params=m.params.scope("decoder.gru"))
    previous = np.concatenate([m.h0[:, None], states[:, :-1]], axis=1)  # (B, T, H)
    context, weights = self._attend(m, previous)
    return states, weights, context, self._combine(m, context, states)


def luong_step_from_previous_state(self, m, emb, h_prev):
    if m.attention == "additive":
        return Seq2Seq._decoder_step(self, m, emb, h_prev)
    h = rnn.gru_cell(emb, h_prev, params=m.params.scope("decoder.gru"))
    context, weights = self._attend(m, h_prev[:, None])
    return h, self._logits(m, self._combine(m, context[:, 0], h)), weights[:, 0], context[:, 0]


def swapped_concat(self, m, context, h):
    """[h_t; c_t] instead of [c_t; h_t]."""
    return np.tanh(np.concatenate([h, context], axis=-1) @ m.combine)


def bahdanau_from_current_state(self, m, emb, h_prev):
    """additive: the attention query is the state after a GRU step without context."""
    if m.attention != "additive":
        return Seq2Seq._decoder_step(self, m, emb, h_prev)
    gru = m.params.scope("decoder.gru")
    guess = rnn.gru_cell(np.concatenate([emb, np.zeros_like(h_prev)], axis=-1), h_prev,
                         params=gru)
    context, weights = self._attend(m, guess[:, None])
    h = rnn.gru_cell(np.concatenate([emb, context[:, 0]], axis=-1), h_prev, params=gru)
    return h, self._logits(m, h), weights[:, 0], context[:, 0]


def scaled_embedding(ids, *, scale=True, params):
    """The Transformer's sqrt(D) embedding scale applied in the RNN model."""
    return np_embedding.embedding(ids, scale=True, params=params)


def no_pad_after_eos(src_ids, *, attention, pad_id, bos_id, eos_id, max_len, params):
    """Decoding goes on after EOS instead of padding the row."""
    s = Seq2Seq(Kernels("attnspec.backends.numpy"))
    m = s._encode(s._ids("src_ids", src_ids), attention, pad_id, params)
    ids = np.full((src_ids.shape[0], max_len), bos_id, dtype=np.int64)
    h = m.h0
    for t in range(1, max_len):
        h, logits = s._decoder_step(m, s._embed(m, ids[:, t - 1]), h)[:2]
        ids[:, t] = np.argmax(logits, axis=-1)
    return ids


S2S_MUTANTS = {
    "padding-not-masked": dict(_attend=attend_unmasked),
    "initial-state-at-last-position": dict(_encode=last_state_regardless_of_padding),
    "luong-attends-from-previous-state": dict(_teacher_forced=luong_from_previous_state,
                                              _decoder_step=luong_step_from_previous_state),
    "luong-concat-order-swapped": dict(_combine=swapped_concat),
    "bahdanau-attends-from-current-state": dict(_decoder_step=bahdanau_from_current_state),
}


@pytest.mark.parametrize("name", list(S2S_MUTANTS))
def test_seq2seq_mutant_is_rejected(name):
    assert_rejected(composite_mutant(Seq2Seq, S2S_MUTANTS[name]), "seq2seq_attention")


def test_seq2seq_scaled_embedding_is_rejected():
    assert_rejected(composite_mutant(Seq2Seq, kernels=dict(embedding=scaled_embedding)),
                    "seq2seq_attention")


def test_decoding_without_padding_after_eos_is_rejected():
    assert_rejected(mutant(seq2seq_greedy_decode=no_pad_after_eos), "seq2seq_attention")


def _greedy_failures(backend) -> int:
    spec = default_spec()
    return sum(run_vector(backend, spec, v, "float64", "cpu").status != "pass"
               for v in spec.vectors
               if v.function == "seq2seq_greedy_decode" and v.expect == "value")


# bahdanau-attends-from-current-state changes the logits (the teacher-forced vectors reject
# it) but not the argmax of the one additive decoding vector, so it is left out here.
@pytest.mark.parametrize("name", [n for n in S2S_MUTANTS if not n.startswith("bahdanau")])
def test_greedy_vectors_alone_catch_decoder_mutants(name):
    """The decoding vectors (exact ids) also reject each decoder mutant on their own."""
    assert _greedy_failures(composite_mutant(Seq2Seq, S2S_MUTANTS[name])) > 0


@pytest.mark.parametrize("component", ["gru_cell", "gru", "seq2seq_attention"])
def test_correct_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}
    assert set(rejections(composite_mutant(Seq2Seq), component).values()) == {0}
