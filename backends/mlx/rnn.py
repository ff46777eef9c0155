"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention) and the GRU over a
sequence; the GRU encoder-decoder with attention is the shared composite."""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx

from .. import _checks as check
from ..composite.rnn import Seq2Seq
from . import _core
from ._core import floating


class GRUWeights(NamedTuple):
    w_ih: mx.array  # (I, 3H), column blocks r | z | n
    w_hh: mx.array  # (H, 3H)
    b_ih: mx.array  # (3H,)
    b_hh: mx.array  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p``; absent biases are zero."""
    w_ih, w_hh, b_ih, b_hh = check.gru_weights(_core, p, in_width, hidden)
    hidden = check.shape(w_hh)[0]
    zero = mx.zeros(3 * hidden, dtype=w_hh.dtype)
    return GRUWeights(w_ih, w_hh, zero if b_ih is None else b_ih, zero if b_hh is None else b_hh)


def _sigmoid(x):
    return mx.exp(-mx.logaddexp(mx.zeros_like(x), -x))  # 1 / (1 + e^-x) without overflow


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih  # (B, 3H)
    gh = h @ w.w_hh + w.b_hh  # (B, 3H)
    r = _sigmoid(gi[:, :hid] + gh[:, :hid])
    z = _sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = mx.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    return (1 - z) * n + z * h


def gru_cell(x, h, *, params):
    """One GRU step (Cho et al. 2014 as in cuDNN/PyTorch, reset after the hidden matmul)."""
    x = floating("x", x)
    b, i = check.rank("x", x, min_rank=2, max_rank=2)
    w = _gru_weights(check.params_of(params), i)
    h = check.gru_state(_core, "h", h, b, w.w_hh.shape[0], x)
    return _step(x, h, w)


def gru(x, h0=None, *, params):
    """h_t = gru_cell(x_t, h_{t-1}), h_0 = h0 (zeros when None); (outputs (B, T, H), h_T)."""
    x = floating("x", x)
    b, t, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    hid = w.w_hh.shape[0]
    h = mx.zeros((b, hid), dtype=x.dtype) if h0 is None else check.gru_state(_core, "h0", h0, b, hid, x)
    states = []
    for s in range(t):
        h = _step(x[:, s], h, w)
        states.append(h)
    outputs = mx.stack(states, axis=1) if states else mx.zeros((b, 0, hid), dtype=x.dtype)
    return outputs, h  # (B, T, H), (B, H)


seq2seq_attention, seq2seq_greedy_decode = Seq2Seq.bind(__package__)  # backends/composite/rnn.py
