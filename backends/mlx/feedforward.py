"""Position-wise feed-forward network (plain and gated), dropout; the sublayer with its
residual connection and LayerNorm is the shared composite."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import ConfigError

from .. import _checks as check
from ..composite.layers import Layers
from ._core import boolean, floating


def relu(h):
    """max(h, 0), with relu'(0) = 0."""
    return mx.where(h > 0, h, 0)


def gelu(h):
    """gelu(h) = h/2 (1 + erf(h / sqrt 2)), exact."""
    return 0.5 * h * (1 + mx.erf(h / math.sqrt(2)))


def gelu_tanh(h):
    """gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))."""
    return 0.5 * h * (1 + mx.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


def silu(h):
    """silu(h) = h sigmoid(h) = h / (1 + exp(-h))  (Swish_1)."""
    return h / (1 + mx.exp(-h))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}
GATES = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def feedforward(x, *, activation="relu", params):
    """y = act(x W1 + b1) W2 + b2,  W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    act = ACTIVATIONS[check.choice("activation", activation, ACTIVATIONS)]
    p = check.params_of(params)
    w1, b1, w2, b2 = check.ffn_params(p.require, D)
    h = x @ w1 + b1                                      # (..., F)
    return act(h) @ w2 + b2                              # (..., D)


def gated_feedforward(x, *, activation="silu", params):
    """y = (act(x W_gate) * (x W_up)) W_down,  W_gate, W_up (D, F), W_down (F, D); no biases."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    act = GATES[check.choice("activation", activation, GATES)]
    p = check.params_of(params)
    w_gate, w_up, w_down = check.glu_params(p.require, D)
    h = act(x @ w_gate) * (x @ w_up)                    # (..., F)
    return h @ w_down                                    # (..., D)


def dropout(x, keep_mask=None, *, p, seed=None):
    """Inverted dropout: y = x / (1 - p) where kept, 0 where dropped; p = 0 is the identity.

    With ``keep_mask`` (bool, True = keep) it is deterministic; without, keep is drawn from
    Bernoulli(1 - p) with ``mx.random.bernoulli`` keyed by ``seed`` (None: 0).
    """
    x = floating("x", x)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) \
            or not 0 <= p < 1:
        raise ConfigError(f"dropout probability p must be in [0, 1), got {p!r}")
    if keep_mask is not None:
        keep_mask = boolean("keep_mask", keep_mask)
        check.broadcastable("keep_mask", keep_mask, x.shape)
    if p == 0:
        return mx.array(x)
    if keep_mask is None:
        key = mx.random.key(0 if seed is None else int(seed))
        keep_mask = mx.random.bernoulli(1 - p, x.shape, key=key)
    return mx.where(keep_mask, x / (1 - float(p)), 0).astype(x.dtype)


(residual,) = Layers.bind(__package__, "residual")  # backends/composite/layers.py
