"""Position-wise feed-forward network, dropout, and a sublayer with its residual
connection and LayerNorm."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError

from .. import _checks as check
from ..composite.layers import Layers
from ._core import boolean, const, floating, matmul, zeros


def relu(h):
    """max(h, 0), with relu'(0) = 0 (tf.maximum's gradient at the tie would be 1)."""
    return tf.nn.relu(h)


def gelu(h):
    """gelu(h) = h/2 (1 + erf(h / sqrt 2)), exact."""
    return const(0.5, h) * h * (const(1, h) + tf.math.erf(h / const(math.sqrt(2), h)))


def gelu_tanh(h):
    """gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))."""
    inner = const(math.sqrt(2 / math.pi), h) * (h + const(0.044715, h) * h ** 3)
    return const(0.5, h) * h * (const(1, h) + tf.tanh(inner))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def feedforward(x, *, activation="relu", params):
    """y = act(x W1 + b1) W2 + b2,  W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    act = ACTIVATIONS[check.choice("activation", activation, ACTIVATIONS)]
    p = check.params_of(params)
    w1, b1, w2, b2 = check.ffn_params(p.require, D)
    h = matmul(x, w1) + b1                               # (..., F)
    return matmul(act(h), w2) + b2                       # (..., D)


def silu(h):
    """silu(h) = h sigmoid(h)  (Swish_1)."""
    return h * tf.sigmoid(h)


GATES = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def gated_feedforward(x, *, activation="silu", params):
    """y = (act(x W_gate) * (x W_up)) W_down,  W_gate, W_up (D, F), W_down (F, D); no biases."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    act = GATES[check.choice("activation", activation, GATES)]
    p = check.params_of(params)
    w_gate, w_up, w_down = check.glu_params(p.require, D)
    h = act(matmul(x, w_gate)) * matmul(x, w_up)         # (..., F)
    return matmul(h, w_down)                             # (..., D)


def dropout(x, keep_mask=None, *, p, seed=None):
    """Inverted dropout: y = x / (1 - p) where kept, 0 where dropped; p = 0 is the identity.

    With ``keep_mask`` (bool, True = keep) it is deterministic; without, keep is drawn
    from Bernoulli(1 - p) with ``tf.random.stateless_uniform`` seeded by ``seed``
    (``tf.random.uniform`` when seed is None).
    """
    x = floating("x", x)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) \
            or not 0 <= p < 1:
        raise ConfigError(f"dropout probability p must be in [0, 1), got {p!r}")
    if keep_mask is not None:
        keep_mask = boolean("keep_mask", keep_mask)
        check.broadcastable("keep_mask", keep_mask, check.shape(x))
    if p == 0:
        return tf.identity(x)
    if keep_mask is None:
        s = check.shape(x)
        u = (tf.random.uniform(s, dtype=tf.float32) if seed is None else
             tf.random.stateless_uniform(s, seed=(int(seed), 0), dtype=tf.float32))
        keep_mask = u >= p
    return tf.where(keep_mask, x / const(1 - p, x), zeros(x))


(residual,) = Layers.bind(__package__, "residual")  # backends/composite/layers.py
