"""GRU cell, PyTorch/cuDNN gate convention (gate blocks r, z, n; reset after the hidden matmul).

    g_i = x W_ih + b_ih,  g_h = h W_hh + b_hh            (B, 3H), column blocks r | z | n
    r   = sigmoid(g_i[r] + g_h[r])
    z   = sigmoid(g_i[z] + g_h[z])
    n   = tanh(g_i[n] + r * g_h[n])
    h'  = (1 - z) * n + z * h

Biases are optional; an absent bias is zero.
"""

import mpmath
import numpy as np

from .core import matmul, mpa, zeros


def sigmoid(v):
    return 1 / (1 + mpmath.exp(-v))


def step(x, h, params):
    """One GRU step on object arrays x (B, I), h (B, H) -> h' (B, H)."""
    w_ih, w_hh = mpa(params["w_ih"]), mpa(params["w_hh"])
    hid = w_hh.shape[0]
    b_ih = mpa(params["b_ih"]) if "b_ih" in params else zeros((3 * hid,))
    b_hh = mpa(params["b_hh"]) if "b_hh" in params else zeros((3 * hid,))
    gi = matmul(x, w_ih)  # (B, 3H), bias added below
    gh = matmul(h, w_hh)  # (B, 3H)
    out = np.empty(h.shape, dtype=object)
    for b in range(h.shape[0]):
        for j in range(hid):
            r = sigmoid(gi[b, j] + b_ih[j] + gh[b, j] + b_hh[j])
            z = sigmoid(gi[b, hid + j] + b_ih[hid + j] + gh[b, hid + j] + b_hh[hid + j])
            n = mpmath.tanh(gi[b, 2 * hid + j] + b_ih[2 * hid + j]
                            + r * (gh[b, 2 * hid + j] + b_hh[2 * hid + j]))
            out[b, j] = (1 - z) * n + z * h[b, j]
    return out


def gru_cell(x, h, params=None):
    return {"h": step(mpa(x), mpa(h), params)}
