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

from .core import fsum_axes, matmul, mpa, transpose_last, zeros


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


def gru_step_vjp(x, h, params, dh_next):
    """One GRU step backward (reset after the hidden matmul), x (B, I), h (B, H):
        dn = dh' (1 - z),  dz = dh' (h - n),  dh = dh' z + dg_h W_hh^T
        da_n = dn (1 - n^2),  dr = da_n (h W_hn + b_hn),  da_r = dr r (1 - r),
        da_z = dz z (1 - z)
        dg_i = [da_r | da_z | da_n],  dg_h = [da_r | da_z | r da_n]
        dW_ih = x^T dg_i, db_ih = sum dg_i, dW_hh = h^T dg_h, db_hh = sum dg_h,
        dx = dg_i W_ih^T
    Returns dx, dh and the parameter gradients of this step."""

    w_ih, w_hh = mpa(params["w_ih"]), mpa(params["w_hh"])
    hid = w_hh.shape[0]
    b_ih = mpa(params["b_ih"]) if "b_ih" in params else zeros((3 * hid,))
    b_hh = mpa(params["b_hh"]) if "b_hh" in params else zeros((3 * hid,))
    gi = matmul(x, w_ih) + b_ih                                              # (B, 3H)
    gh = matmul(h, w_hh) + b_hh                                              # (B, 3H)
    dgi, dgh = zeros(gi.shape), zeros(gh.shape)
    dh_direct = zeros(h.shape)
    for b in range(h.shape[0]):
        for j in range(hid):
            jr, jz, jn = j, hid + j, 2 * hid + j
            r = sigmoid(gi[b, jr] + gh[b, jr])
            z = sigmoid(gi[b, jz] + gh[b, jz])
            n = mpmath.tanh(gi[b, jn] + r * gh[b, jn])
            g = dh_next[b, j]
            dan = g * (1 - z) * (1 - n * n)
            dar = dan * gh[b, jn] * r * (1 - r)
            daz = g * (h[b, j] - n) * z * (1 - z)
            dgi[b, jr], dgi[b, jz], dgi[b, jn] = dar, daz, dan
            dgh[b, jr], dgh[b, jz], dgh[b, jn] = dar, daz, r * dan
            dh_direct[b, j] = g * z
    grads = {"w_ih": matmul(transpose_last(x), dgi), "w_hh": matmul(transpose_last(h), dgh),
             "b_ih": fsum_axes(dgi, (0,)), "b_hh": fsum_axes(dgh, (0,))}
    dx = matmul(dgi, transpose_last(w_ih))
    dh = dh_direct + matmul(dgh, transpose_last(w_hh))
    return dx, dh, {k: g for k, g in grads.items() if k in params}


def gru_cell_vjp(cot, x, h, params=None):
    x, h = mpa(x), mpa(h)
    dx, dh, grads = gru_step_vjp(x, h, params, mpa(cot["h"]))
    return {"x": dx, "h": dh}, grads


VJPS = {"gru_cell": gru_cell_vjp}
