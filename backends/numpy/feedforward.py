"""Position-wise feed-forward network, dropout, and a sublayer with its residual
connection and LayerNorm."""

from __future__ import annotations

import math

import numpy as np
from attnspec.spec.errors import ConfigError

from .. import _checks as check
from ..composite.layers import Layers
from ._core import boolean, floating

_erf = np.frompyfunc(math.erf, 1, 1)


def relu(h):
    return np.maximum(h, 0)


def gelu(h):
    """gelu(h) = h/2 (1 + erf(h / sqrt 2)), exact (NumPy has no erf: math.erf per element)."""
    return 0.5 * h * (1 + _erf(h / math.sqrt(2)).astype(h.dtype))


def gelu_tanh(h):
    """gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))."""
    return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def feedforward(x, *, activation="relu", params):
    """y = act(x W1 + b1) W2 + b2,  W1 (D, F), b1 (F,), W2 (F, D), b2 (D,)."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    act = ACTIVATIONS[check.choice("activation", activation, ACTIVATIONS)]
    p = check.params_of(params)
    w1, b1, w2, b2 = check.ffn_params(p.require, D)
    h = x @ w1 + b1                                      # (..., F)
    return act(h) @ w2 + b2                              # (..., D)


def silu(h):
    """silu(h) = h sigmoid(h) = h / (1 + exp(-h))  (Swish_1)."""
    return h / (1 + np.exp(-h))


GATES = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


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

    With ``keep_mask`` (bool, True = keep) it is deterministic; without, keep is drawn
    from Bernoulli(1 - p) with ``numpy.random.default_rng(seed)``.
    """
    x = floating("x", x)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) \
            or not 0 <= p < 1:
        raise ConfigError(f"dropout probability p must be in [0, 1), got {p!r}")
    if keep_mask is not None:
        keep_mask = boolean("keep_mask", keep_mask)
        check.broadcastable("keep_mask", keep_mask, x.shape)
    if p == 0:
        return x.copy()
    if keep_mask is None:
        keep_mask = np.random.default_rng(seed).random(x.shape) >= p
    return np.where(keep_mask, x / x.dtype.type(1 - p), x.dtype.type(0))


(residual,) = Layers.bind(__package__, "residual")  # backends/composite/layers.py


# -- backward (vector-Jacobian products) ----------------------------------------------------

def relu_grad(h):
    """relu'(h) = 1 for h > 0, else 0 (0 at h = 0, as torch and TensorFlow)."""
    return (h > 0).astype(h.dtype)


def gelu_grad(h):
    """gelu'(h) = Phi(h) + h phi(h) = (1 + erf(h / sqrt 2)) / 2 + h exp(-h^2 / 2) / sqrt(2 pi)."""
    return (0.5 * (1 + _erf(h / math.sqrt(2)).astype(h.dtype))
            + h * np.exp(-0.5 * h * h) / math.sqrt(2 * math.pi))


def gelu_tanh_grad(h):
    """t = tanh(k (h + 0.044715 h^3)), k = sqrt(2/pi):
    gelu_tanh'(h) = (1 + t) / 2 + h/2 (1 - t^2) k (1 + 3 * 0.044715 h^2)."""
    k = math.sqrt(2 / math.pi)
    t = np.tanh(k * (h + 0.044715 * h ** 3))
    return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * k * (1 + 3 * 0.044715 * h * h)


ACTIVATION_GRADS = {"relu": relu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


# h = x W1 + b1, a = act(h), y = a W2 + b2:
#   dW2 = a^T dy,  db2 = sum dy,  dh = (dy W2^T) act'(h),
#   dW1 = x^T dh,  db1 = sum dh,  dx = dh W1^T        (sums over every token)
def feedforward_vjp(cotangents, x, *, activation="relu", params):
    y = feedforward(x, activation=activation, params=params)   # the checks, once
    x = np.asarray(x)
    w1, b1, w2 = (np.asarray(params[n]) for n in ("w1", "b1", "w2"))
    x2 = x.reshape(-1, x.shape[-1])                               # (N, D)
    dy = np.asarray(cotangents["y"], dtype=y.dtype).reshape(-1, w2.shape[1])  # (N, D)
    h = x2 @ w1 + b1                                              # (N, F)
    dh = (dy @ w2.T) * ACTIVATION_GRADS[activation](h)            # (N, F)
    return ({"x": (dh @ w1.T).reshape(x.shape)},
            {"w1": x2.T @ dh, "b1": dh.sum(axis=0),
             "w2": ACTIVATIONS[activation](h).T @ dy, "b2": dy.sum(axis=0)})


# == grad2: gated_feedforward, dropout backward =============================================

def silu_grad(h):
    """s = sigmoid(h):  silu'(h) = s (1 + h (1 - s))."""
    s = 1 / (1 + np.exp(-h))
    return s * (1 + h * (1 - s))


GATE_GRADS = {"silu": silu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


# g = x W_gate, u = x W_up, h = act(g) u, y = h W_down:
#   dW_down = h^T dy,  dh = dy W_down^T,  dg = dh u act'(g),  du = dh act(g),
#   dW_gate = x^T dg,  dW_up = x^T du,  dx = dg W_gate^T + du W_up^T
def gated_feedforward_vjp(cotangents, x, *, activation="silu", params):
    y = gated_feedforward(x, activation=activation, params=params)   # the checks, once
    x = np.asarray(x)
    w_gate, w_up, w_down = (np.asarray(params[n]) for n in ("w_gate", "w_up", "w_down"))
    x2 = x.reshape(-1, x.shape[-1])                                    # (N, D)
    dy = np.asarray(cotangents["y"], dtype=y.dtype).reshape(-1, w_down.shape[1])  # (N, D)
    g, u = x2 @ w_gate, x2 @ w_up                                      # (N, F)
    a = GATES[activation](g)
    dh = dy @ w_down.T                                                 # (N, F)
    dg, du = dh * u * GATE_GRADS[activation](g), dh * a
    return ({"x": (dg @ w_gate.T + du @ w_up.T).reshape(x.shape)},
            {"w_gate": x2.T @ dg, "w_up": x2.T @ du, "w_down": (a * u).T @ dy})


# y = keep x / (1 - p):  dx = keep dy / (1 - p)   (p = 0: dx = dy); the keep mask is needed
def dropout_vjp(cotangents, x, keep_mask=None, *, p, seed=None):
    y = dropout(x, keep_mask, p=p, seed=seed)                         # the checks, once
    dy = np.asarray(cotangents["y"], dtype=y.dtype)
    if p == 0:
        return {"x": dy.copy()}, {}
    if keep_mask is None:
        raise NotImplementedError("dropout_vjp without keep_mask: the drawn mask is not returned")
    return {"x": np.where(keep_mask, dy / y.dtype.type(1 - p), y.dtype.type(0))}, {}
