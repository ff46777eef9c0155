"""Gated feed-forward network, GLU variants (Shazeer 2020, eqs. 5-6; LLaMA, PaLM, Gemma):

    y = (act(x W_gate) * (x W_up)) W_down,   W_gate (D, F), W_up (D, F), W_down (F, D)

no biases (LLaMA's gate_proj / up_proj / down_proj; Shazeer's W, V, W2), * elementwise.

act:  silu(h)      = h sigmoid(h) = h / (1 + exp(-h))          (Swish_1: SwiGLU)
      gelu(h)      = h/2 (1 + erf(h / sqrt 2))                  (exact: GeGLU)
      gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))  (Gemma's GeGLU)
"""

import mpmath
import numpy as np

from .core import matmul, mpa, transpose_last
from .feedforward import gelu, gelu_grad, gelu_tanh, gelu_tanh_grad


def silu(h):
    return h / (1 + mpmath.exp(-h))


ACTIVATIONS = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


def gated_feedforward(x, activation="silu", params=None):
    x = mpa(x)
    act = ACTIVATIONS[activation]
    g = matmul(x, mpa(params["w_gate"]))                  # (..., F)
    u = matmul(x, mpa(params["w_up"]))                    # (..., F)
    h = np.empty(g.shape, dtype=object)
    for idx in np.ndindex(g.shape):
        h[idx] = act(g[idx]) * u[idx]
    y = matmul(h, mpa(params["w_down"]))                  # (..., D)
    return {"y": y}


def silu_grad(h):
    """s = sigmoid(h): silu'(h) = s (1 + h (1 - s))."""
    s = 1 / (1 + mpmath.exp(-h))
    return s * (1 + h * (1 - s))


GATE_GRADS = {"silu": silu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


def gated_feedforward_vjp(cot, x, activation="silu", params=None):
    """g = x W_gate, u = x W_up, h = act(g) u, y = h W_down:
        dW_down = h^T dy,  dh = dy W_down^T,  dg = dh u act'(g),  du = dh act(g),
        dW_gate = x^T dg,  dW_up = x^T du,  dx = dg W_gate^T + du W_up^T
    """
    x, dy = mpa(x), mpa(cot["y"])
    wg, wu, wd = (mpa(params[n]) for n in ("w_gate", "w_up", "w_down"))
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, wd.shape[1])       # (N, D)
    g, u = matmul(x2, wg), matmul(x2, wu)                                    # (N, F)
    a = np.vectorize(ACTIVATIONS[activation], otypes=[object])(g)
    dh = matmul(dy2, transpose_last(wd))                                     # (N, F)
    dg = dh * u * np.vectorize(GATE_GRADS[activation], otypes=[object])(g)
    du = dh * a
    dx = matmul(dg, transpose_last(wg)) + matmul(du, transpose_last(wu))
    return ({"x": dx.reshape(x.shape)},
            {"w_gate": matmul(transpose_last(x2), dg), "w_up": matmul(transpose_last(x2), du),
             "w_down": matmul(transpose_last(a * u), dy2)})


VJPS = {"gated_feedforward": gated_feedforward_vjp}
