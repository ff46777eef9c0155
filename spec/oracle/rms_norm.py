"""RMS normalisation over the last axis (Zhang & Sennrich 2019; T5, LLaMA):

    rms = sqrt((1/D) sum_d x_d^2 + eps)
    y_d = x_d / rms * gamma_d          (no mean subtraction, no beta)
"""

import mpmath
import numpy as np

from .core import mp, mpa


def rms_norm(x, eps=1e-6, params=None):
    x = mpa(x)
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-1]):
        row = list(x[idx])
        if not row:  # D = 0: nothing to normalise, an empty row
            continue
        rms = mpmath.sqrt(mp.fsum(v * v for v in row) / len(row) + eps)
        y[idx] = [row[d] / rms * gamma[d] for d in range(len(row))]
    return {"y": y}
