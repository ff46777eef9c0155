"""Gated feed-forward network, GLU variants (Shazeer 2020, eqs. 5-6; LLaMA, PaLM, Gemma):

    y = (act(x W_gate) * (x W_up)) W_down,   W_gate (D, F), W_up (D, F), W_down (F, D)

no biases (LLaMA's gate_proj / up_proj / down_proj; Shazeer's W, V, W2), * elementwise.

act:  silu(h)      = h sigmoid(h) = h / (1 + exp(-h))          (Swish_1: SwiGLU)
      gelu(h)      = h/2 (1 + erf(h / sqrt 2))                  (exact: GeGLU)
      gelu_tanh(h) = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))  (Gemma's GeGLU)
"""

import mpmath
import numpy as np

from .core import matmul, mpa
from .feedforward import gelu, gelu_tanh


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
