"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention) and the GRU over a
sequence; the GRU encoder-decoder with attention is the shared composite."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _checks as check
from ..composite.rnn import Seq2Seq
from . import _core
from ._core import floating


class GRUWeights(NamedTuple):
    w_ih: np.ndarray  # (I, 3H), column blocks r | z | n
    w_hh: np.ndarray  # (H, 3H)
    b_ih: np.ndarray  # (3H,)
    b_hh: np.ndarray  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p`` (checked once for every backend); absent biases
    are zero."""
    w_ih, w_hh, b_ih, b_hh = check.gru_weights(_core, p, in_width, hidden)
    hidden = check.shape(w_hh)[0]
    zero = np.zeros(3 * hidden, dtype=w_hh.dtype)
    return GRUWeights(w_ih, w_hh, zero if b_ih is None else b_ih, zero if b_hh is None else b_hh)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0, -x))  # 1 / (1 + e^-x) without overflow


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih  # (B, 3H)
    gh = h @ w.w_hh + w.b_hh  # (B, 3H)
    r = _sigmoid(gi[:, :hid] + gh[:, :hid])
    z = _sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
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
    outputs = np.empty(x.shape[:2] + (h.shape[-1],), dtype=x.dtype)  # (B, T, H)
    for t in range(x.shape[1]):
        h = _step(x[:, t], h, w)
        outputs[:, t] = h
    return outputs, h


def gru(x, h0=None, *, params):
    """h_0 = h0 (zeros when None), h_t = gru_cell(x_t, h_{t-1});
    returns outputs (B, T, H) = (h_1 .. h_T) and h_last = h_T."""
    x = floating("x", x)
    b, _, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    hid = w.w_hh.shape[0]
    h = np.zeros((b, hid), dtype=x.dtype) if h0 is None else check.gru_state(_core, "h0", h0, b, hid, x)
    return _run(x, h, w)


seq2seq_attention, seq2seq_greedy_decode = Seq2Seq.bind(__package__)  # backends/composite/rnn.py


# == grad2: backward (vector-Jacobian products) =============================================

# One step backward (reset after the hidden matmul), with dh' the gradient of h':
#   dn = dh' (1 - z),  da_n = dn (1 - n^2),  dr = da_n (h W_hn + b_hn),
#   da_r = dr r (1 - r),  da_z = dh' (h - n) z (1 - z)
#   dg_i = [da_r | da_z | da_n],  dg_h = [da_r | da_z | r da_n]
#   dx = dg_i W_ih^T,  dh = dh' z + dg_h W_hh^T,
#   dW_ih = x^T dg_i,  dW_hh = h^T dg_h,  db_ih = sum dg_i,  db_hh = sum dg_h
def _step_vjp(x, h, w: GRUWeights, dh_next):
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih                                           # (B, 3H)
    gh = h @ w.w_hh + w.b_hh                                           # (B, 3H)
    r = _sigmoid(gi[:, :hid] + gh[:, :hid])
    z = _sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    da_n = dh_next * (1 - z) * (1 - n * n)
    da_r = da_n * gh[:, 2 * hid:] * r * (1 - r)
    da_z = dh_next * (h - n) * z * (1 - z)
    dg_i = np.concatenate([da_r, da_z, da_n], axis=-1)                 # (B, 3H)
    dg_h = np.concatenate([da_r, da_z, r * da_n], axis=-1)             # (B, 3H)
    grads = GRUWeights(x.T @ dg_i, h.T @ dg_h, dg_i.sum(axis=0), dg_h.sum(axis=0))
    return dg_i @ w.w_ih.T, dh_next * z + dg_h @ w.w_hh.T, grads


def _present(params, grads: GRUWeights) -> dict:
    """The gradients of the parameters given (an absent bias has none)."""
    return {k: g for k, g in grads._asdict().items() if k in params}


def gru_cell_vjp(cotangents, x, h, *, params):
    h_next = gru_cell(x, h, params=params)                             # the checks, once
    w = _gru_weights(check.params_of(params), np.shape(x)[1])
    dh_next = np.asarray(cotangents["h"], dtype=h_next.dtype)
    dx, dh, grads = _step_vjp(np.asarray(x), np.asarray(h), w, dh_next)
    return {"x": dx, "h": dh}, _present(params, grads)


# Backpropagation through time, from dh_T = dh_last, for t = T..1:
#   dh_t += doutputs[:, t-1];  (dx_t, dh_{t-1}, dW_t) = step backward at (x_t, h_{t-1});
#   dW = sum over t of dW_t,  dh0 = dh_0
def gru_vjp(cotangents, x, h0=None, *, params):
    outputs, h_last = gru(x, h0, params=params)                        # the checks, once
    x = np.asarray(x)
    w = _gru_weights(check.params_of(params), x.shape[-1])
    states = [np.zeros_like(h_last) if h0 is None else np.asarray(h0)]  # h_0 .. h_{T-1}
    states += [outputs[:, t] for t in range(x.shape[1] - 1)]
    zero = np.zeros_like
    dh = np.asarray(cotangents.get("h_last", zero(h_last)), dtype=h_last.dtype)     # (B, H)
    dout = np.asarray(cotangents.get("outputs", zero(outputs)), dtype=outputs.dtype)  # (B, T, H)
    dx = np.empty_like(x)
    total = GRUWeights(*(zero(a) for a in w))
    for t in reversed(range(x.shape[1])):
        dx[:, t], dh, grads = _step_vjp(x[:, t], states[t], w, dh + dout[:, t])
        total = GRUWeights(*(a + g for a, g in zip(total, grads)))
    return ({"x": dx} if h0 is None else {"x": dx, "h0": dh}), _present(params, total)
