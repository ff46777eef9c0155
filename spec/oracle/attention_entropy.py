"""Entropy of attention weights along an axis, in nats.

    H = - sum_j w_j ln w_j,   with 0 ln 0 = 0

The weights need not sum to 1; negative weights are outside the domain.
"""

import mpmath
import numpy as np

from .core import mp, mpa


def attention_entropy(weights, axis=-1):
    w = np.moveaxis(mpa(weights), axis, -1)
    out = np.empty(w.shape[:-1], dtype=object)
    for idx in np.ndindex(w.shape[:-1]):
        out[idx] = -mp.fdot((x, mpmath.log(x)) for x in w[idx] if x != 0)
    return {"entropy": out}


def attention_entropy_vjp(cot, weights, axis=-1):
    """H = -sum_j w_j ln w_j:  dw_j = -dH (ln w_j + 1) for w_j > 0;  dw_j = 0 for w_j = 0
    (the term is 0 ln 0 = 0 there; its one-sided derivative is +inf, torch's and
    TensorFlow's where-guarded entropy give 0, as a masked softmax entry does)."""
    w = np.moveaxis(mpa(weights), axis, -1)
    dh = mpa(cot["entropy"])
    dw = np.empty(w.shape, dtype=object)
    for idx in np.ndindex(w.shape):
        dw[idx] = -dh[idx[:-1]] * (mpmath.log(w[idx]) + 1) if w[idx] != 0 else mpmath.mpf(0)
    return {"weights": np.moveaxis(dw, -1, axis)}, {}


VJPS = {"attention_entropy": attention_entropy_vjp}
