"""Position-wise feed-forward network (plain and gated), dropout; the sublayer with its
residual connection and LayerNorm is the shared composite."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import ConfigError

from .. import _checks as check
from ..composite.layers import Layers
from . import buckets
from ._core import boolean, const, floating
from .host import bind as _bind


def relu(h):
    """max(h, 0), with relu'(0) = 0 (jnp.maximum's gradient splits a tie: 1/2)."""
    return jax.nn.relu(h)


def gelu(h):
    """gelu(h) = h/2 (1 + erf(h / sqrt 2)), exact."""
    return 0.5 * h * (1 + jax.scipy.special.erf(h / math.sqrt(2)))


def gelu_tanh(h):
    """gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))."""
    return 0.5 * h * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


def silu(h):
    """silu(h) = h sigmoid(h) = h / (1 + exp(-h))  (Swish_1)."""
    return h / (1 + jnp.exp(-h))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}
GATES = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


@functools.partial(jax.jit, static_argnames="activation")
def _feedforward(x, w1, b1, w2, b2, activation):
    h = x @ w1 + b1                                      # (..., F)
    return ACTIVATIONS[activation](h) @ w2 + b2          # (..., D)


def feedforward(x, *, activation="relu", params):
    """y = act(x W1 + b1) W2 + b2,  W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    activation = check.choice("activation", activation, ACTIVATIONS)
    p = check.params_of(params)
    w1 = p.require("w1", (D, None))
    F = w1.shape[1]
    b1, w2, b2 = p.require("b1", (F,)), p.require("w2", (F, D)), p.require("b2", (D,))
    return buckets.rowwise(_feedforward, x, w1, b1, w2, b2, activation=activation)


@functools.partial(jax.jit, static_argnames="activation")
def _gated(x, w_gate, w_up, w_down, activation):
    h = GATES[activation](x @ w_gate) * (x @ w_up)      # (..., F)
    return h @ w_down                                    # (..., D)


def gated_feedforward(x, *, activation="silu", params):
    """y = (act(x W_gate) * (x W_up)) W_down,  W_gate, W_up (D, F), W_down (F, D); no biases."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    activation = check.choice("activation", activation, GATES)
    p = check.params_of(params)
    w_gate = p.require("w_gate", (D, None))
    F = w_gate.shape[1]
    w_up, w_down = p.require("w_up", (D, F)), p.require("w_down", (F, D))
    return buckets.rowwise(_gated, x, w_gate, w_up, w_down, activation=activation)


def dropout(x, keep_mask=None, *, p, seed=None):
    """Inverted dropout: y = x / (1 - p) where kept, 0 where dropped; p = 0 is the identity.

    With ``keep_mask`` (bool, True = keep) it is deterministic; without, keep is drawn
    from Bernoulli(1 - p) with ``jax.random.key(seed)`` (seed None: 0; JAX has no hidden
    global generator).
    """
    x = floating("x", x)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) \
            or not 0 <= p < 1:
        raise ConfigError(f"dropout probability p must be in [0, 1), got {p!r}")
    if keep_mask is not None:
        keep_mask = boolean("keep_mask", keep_mask)
        check.broadcastable("keep_mask", keep_mask, x.shape)
    if p == 0:
        return x
    if keep_mask is None:
        key = jax.random.key(0 if seed is None else int(seed))
        keep_mask = jax.random.bernoulli(key, 1 - p, x.shape)
    return jnp.where(keep_mask, x / const(x, 1 - p), const(x, 0))


(residual,) = _bind(Layers, __package__, "residual")  # backends/composite/layers.py
