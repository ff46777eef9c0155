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
        out[idx] = -mp.fsum(x * mpmath.log(x) for x in w[idx] if x != 0)
    return {"entropy": out}
