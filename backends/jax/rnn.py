"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention) and the GRU over a
sequence (``jax.lax.scan``); the GRU encoder-decoder with attention is the shared composite."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks as check
from ..composite.rnn import Seq2Seq
from . import _core, buckets
from ._core import floating, host
from .host import bind as _bind


class GRUWeights(NamedTuple):
    w_ih: jax.Array  # (I, 3H), column blocks r | z | n
    w_hh: jax.Array  # (H, 3H)
    b_ih: jax.Array  # (3H,)
    b_hh: jax.Array  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p`` (checked once for every backend); absent biases
    are zero."""
    w_ih, w_hh, b_ih, b_hh = check.gru_weights(_core, p, in_width, hidden)
    hidden = check.shape(w_hh)[0]
    zero = host(np.zeros(3 * hidden, dtype=w_hh.dtype))  # on the host: nothing to compile
    return GRUWeights(w_ih, w_hh, zero if b_ih is None else b_ih, zero if b_hh is None else b_hh)


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih  # (B, 3H)
    gh = h @ w.w_hh + w.b_hh  # (B, 3H)
    r = jax.nn.sigmoid(gi[:, :hid] + gh[:, :hid])
    z = jax.nn.sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = jnp.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    return (1 - z) * n + z * h


_jit_step = jax.jit(_step)


def gru_cell(x, h, *, params):
    """One GRU step (Cho et al. 2014 as in cuDNN/PyTorch, reset after the hidden matmul):

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z = sigmoid(x W_iz + b_iz + h W_hz + b_hz),
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    """
    x = floating("x", x)
    b, i = check.rank("x", x, min_rank=2, max_rank=2)
    w = _gru_weights(check.params_of(params), i)
    h = check.gru_state(_core, "h", h, b, w.w_hh.shape[0], x)
    return _jit_step(x, h, w)


@jax.jit
def _run(x, h, w: GRUWeights):
    """outputs[:, t] = h_{t+1} = step(x[:, t], h_t); returns (outputs, h_T)."""
    def step(h, x_t):
        h = _step(x_t, h, w)
        return h, h
    h, outputs = jax.lax.scan(step, h, jnp.swapaxes(x, 0, 1))  # outputs (T, B, H)
    return jnp.swapaxes(outputs, 0, 1), h  # (B, T, H), (B, H)


def gru(x, h0=None, *, params):
    """h_0 = h0 (zeros when None), h_t = gru_cell(x_t, h_{t-1});
    returns outputs (B, T, H) = (h_1 .. h_T) and h_last = h_T."""
    x = floating("x", x)
    b, _, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    hid = w.w_hh.shape[0]
    if h0 is None:
        h = host(np.zeros((b, hid), dtype=x.dtype))  # on the host: nothing to compile
    else:
        h = check.gru_state(_core, "h0", h0, b, hid, x)
    return _run_bucketed(x, h, w)


def _run_bucketed(x, h, w: GRUWeights):
    """_run with the batch rows and the time steps padded to bucket sizes where the arrays
    are concrete (buckets.py): each row is its own recurrence, and a step sees only the
    steps before it, so the padded rows and the padded last steps are cut off; h_last is
    the output of step T (the scan's carry after it, the same value)."""
    b, t, i = x.shape
    shape = (buckets.size(b), buckets.size(t), max(i, h.shape[-1]))
    if t == 0 or not (buckets.applies(x, h, *w) and buckets.small(shape)):
        return _run(x, h, w)
    xp = buckets.pad(np.asarray(x), shape[:2] + (i,))
    out, _ = _run(*buckets.on_device(xp, buckets.pad(np.asarray(h), (shape[0], h.shape[-1]))), w)
    out = np.asarray(out)  # (B', T', H)
    return buckets.cut(out, slice(0, b), slice(0, t)), buckets.cut(out, slice(0, b), t - 1)


seq2seq_attention, seq2seq_greedy_decode = _bind(Seq2Seq, __package__)  # backends/composite/rnn.py
