"""Planted bugs in the recurrent components that the vectors must catch at every dtype.

Each mutant patches one piece of ``backends/numpy/rnn.py`` (the GRU step, the attention
call, the decoder step...) for the duration of a call, so the public functions run the
real code around the planted bug.
"""

import contextlib
from unittest import mock

import numpy as np
import pytest
from attnspec.backends.numpy import embedding as np_embedding
from attnspec.backends.numpy import rnn
from attnspec.conformance.runner import run_vector
from attnspec.spec.vectors import default_spec

from .mutants import assert_rejected, mutant, rejections

FUNCTIONS = ("gru_cell", "gru", "seq2seq_attention", "seq2seq_greedy_decode")
_real = {name: getattr(rnn, name) for name in
         ("_step", "_attend", "_decoder_step", "_encode", "_sigmoid", "_run")}


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

def attend_unmasked(m, query):
    """Source padding not masked: pad positions take part in the attention softmax."""
    return _real["_attend"](m._replace(keep=np.ones_like(m.keep)), query)


def last_state_regardless_of_padding(src_ids, attention, pad_id, params):
    """The decoder starts from the encoder's state at position S-1, even when it is a pad."""
    m = _real["_encode"](src_ids, attention, pad_id, params)
    return m._replace(h0=m.outputs[:, -1])


def _luong_step(combine):
    def step(m, y_prev, h_prev):
        if m.attention == "additive":
            return _real["_decoder_step"](m, y_prev, h_prev)
        emb = np_embedding.embedding(y_prev, scale=False, params=m.params.scope("decoder.embed"))
        h = rnn._step(emb, h_prev, m.decoder)
        return combine(m, h, h_prev, emb)
    return step


def _finish(m, h, context, weights, first, second):
    combined = np.tanh(np.concatenate([first, second], axis=-1) @ m.combine)
    logits = np_embedding.lm_head(combined, tied=False, params=m.params.scope("out"))
    return h, logits, weights, context, combined


def _previous_state(m, h, h_prev, emb):
    context, weights = rnn._attend(m, h_prev)  # Luong attention from h_{t-1}
    return _finish(m, h, context, weights, context, h)


def _swapped_concat(m, h, h_prev, emb):
    context, weights = rnn._attend(m, h)
    return _finish(m, h, context, weights, h, context)  # [h_t; c_t] instead of [c_t; h_t]


def bahdanau_from_current_state(m, y_prev, h_prev):
    """additive: the attention query is the state after a GRU step without context."""
    if m.attention != "additive":
        return _real["_decoder_step"](m, y_prev, h_prev)
    emb = np_embedding.embedding(y_prev, scale=False, params=m.params.scope("decoder.embed"))
    zero = np.zeros_like(h_prev)
    guess = rnn._step(np.concatenate([emb, zero], axis=-1), h_prev, m.decoder)
    context, weights = rnn._attend(m, guess)
    h = rnn._step(np.concatenate([emb, context], axis=-1), h_prev, m.decoder)
    logits = np_embedding.lm_head(h, tied=False, params=m.params.scope("out"))
    return h, logits, weights, context, h


def scaled_embedding(ids, *, scale=True, params):
    """The Transformer's sqrt(D) embedding scale applied in the RNN model."""
    return _real_embedding(ids, scale=True, params=params)


_real_embedding = np_embedding.embedding


def no_pad_after_eos(src_ids, *, attention, pad_id, bos_id, eos_id, max_len, params):
    """Decoding goes on after EOS instead of padding the row."""
    m = rnn._encode(rnn._ids("src_ids", src_ids), attention, pad_id, params)
    ids = np.full((src_ids.shape[0], max_len), bos_id, dtype=np.int64)
    h = m.h0
    for t in range(1, max_len):
        h, logits = rnn._decoder_step(m, ids[:, t - 1], h)[:2]
        ids[:, t] = np.argmax(logits, axis=-1)
    return ids


S2S_MUTANTS = {
    "padding-not-masked": dict(_attend=attend_unmasked),
    "initial-state-at-last-position": dict(_encode=last_state_regardless_of_padding),
    "luong-attends-from-previous-state": dict(_decoder_step=_luong_step(_previous_state)),
    "luong-concat-order-swapped": dict(_decoder_step=_luong_step(_swapped_concat)),
    "bahdanau-attends-from-current-state": dict(_decoder_step=bahdanau_from_current_state),
}


@pytest.mark.parametrize("name", list(S2S_MUTANTS))
def test_seq2seq_mutant_is_rejected(name):
    assert_rejected(rnn_mutant(**S2S_MUTANTS[name]), "seq2seq_attention")


def test_seq2seq_scaled_embedding_is_rejected():
    assert_rejected(rnn_mutant(np_embedding, embedding=scaled_embedding), "seq2seq_attention")


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
    assert _greedy_failures(rnn_mutant(**S2S_MUTANTS[name])) > 0


@pytest.mark.parametrize("component", ["gru_cell", "gru", "seq2seq_attention"])
def test_correct_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}
