"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention) and the GRU over a
sequence; the GRU encoder-decoder with attention is the shared composite."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from .. import _checks as check
from ..composite.rnn import Seq2Seq
from . import _core
from ._core import floating


class GRUWeights(NamedTuple):
    w_ih: tf.Tensor  # (I, 3H), column blocks r | z | n
    w_hh: tf.Tensor  # (H, 3H)
    b_ih: tf.Tensor  # (3H,)
    b_hh: tf.Tensor  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p`` (checked once for every backend); absent biases
    are zero."""
    w_ih, w_hh, b_ih, b_hh = check.gru_weights(_core, p, in_width, hidden)
    hidden = check.shape(w_hh)[0]
    zero = tf.zeros(3 * hidden, dtype=w_hh.dtype)
    return GRUWeights(w_ih, w_hh, zero if b_ih is None else b_ih, zero if b_hh is None else b_hh)


def _sigmoid(x):
    return tf.sigmoid(x)  # 1 / (1 + e^-x)


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    return _step_gi(x @ w.w_ih + w.b_ih, h, w)


def _step_gi(gi, h, w: GRUWeights):
    """The step given gi = x W_ih + b_ih (B, 3H), so a sequence projects its inputs once."""
    gi_r, gi_z, gi_n = tf.split(gi, 3, axis=-1)  # (B, H) each
    gh_r, gh_z, gh_n = tf.split(h @ w.w_hh + w.b_hh, 3, axis=-1)
    r = _sigmoid(gi_r + gh_r)
    z = _sigmoid(gi_z + gh_z)
    n = tf.tanh(gi_n + r * gh_n)
    return (1 - z) * n + z * h


def gru_cell(x, h, *, params):
    """One GRU step (Cho et al. 2014 as in cuDNN/PyTorch, reset after the hidden matmul):

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z = sigmoid(x W_iz + b_iz + h W_hz + b_hz),
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    """
    x = floating("x", x)
    b, i = check.rank("x", x, min_rank=2, max_rank=2)
    w = _gru_weights(check.params_of(params), i)
    h = check.gru_state(_core, "h", h, b, w.w_hh.shape[0], x)
    return _step(x, h, w)


def _run(x, h, w: GRUWeights):
    """outputs[:, t] = h_{t+1} = step(x[:, t], h_t); returns (outputs, h_T)."""
    if x.shape[1] == 0:
        return tf.zeros((x.shape[0], 0, h.shape[-1]), dtype=x.dtype), h
    outputs = []
    for gi in tf.unstack(x @ w.w_ih + w.b_ih, axis=1):  # (B, 3H) per step
        h = _step_gi(gi, h, w)
        outputs.append(h)
    return tf.stack(outputs, axis=1), h  # (B, T, H)


def gru(x, h0=None, *, params):
    """h_0 = h0 (zeros when None), h_t = gru_cell(x_t, h_{t-1});
    returns outputs (B, T, H) = (h_1 .. h_T) and h_last = h_T."""
    x = floating("x", x)
    b, _, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    hid = w.w_hh.shape[0]
    h = tf.zeros((b, hid), dtype=x.dtype) if h0 is None else check.gru_state(_core, "h0", h0, b, hid, x)
    return _run(x, h, w)


seq2seq_attention, seq2seq_greedy_decode = Seq2Seq.bind(__package__)  # backends/composite/rnn.py
