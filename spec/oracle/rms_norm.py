"""RMS normalisation over the last axis (Zhang & Sennrich 2019; T5, LLaMA):

    rms = sqrt((1/D) sum_d x_d^2 + eps)
    y_d = x_d / rms * gamma_d          (no mean subtraction, no beta)
"""

import mpmath
import numpy as np

from .core import fsum_axes, mp, mpa, rows, zeros


def rms_norm(x, eps=1e-6, params=None):
    x = mpa(x)
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-1]):
        row = list(x[idx])
        if not row:  # D = 0: nothing to normalise, an empty row
            continue
        rms = mpmath.sqrt(mp.fdot(row, row) / len(row) + eps)
        y[idx] = [row[d] / rms * gamma[d] for d in range(len(row))]
    return {"y": y}


def rms_norm_vjp(cot, x, eps=1e-6, params=None):
    """r = sqrt(mean(x^2) + eps), y = x / r gamma:
        dgamma = sum over rows of dy x / r,  dz = dy gamma,
        dx = dz / r - x sum(dz x) / (D r^3)
    """
    x, dy = mpa(x), mpa(cot["y"])
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    d = x.shape[-1]
    dx, z_all = zeros(x.shape), zeros(x.shape)
    for idx, row in rows(x):
        if d == 0:
            continue
        r = mpmath.sqrt(mp.fdot(row, row) / d + eps)
        dz = [dy[idx][j] * gamma[j] for j in range(d)]
        s = mp.fdot(dz, row)
        dx[idx] = [dz[j] / r - row[j] * s / (d * r ** 3) for j in range(d)]
        z_all[idx] = [v / r for v in row]
    return {"x": dx}, {"gamma": fsum_axes(dy * z_all, tuple(range(x.ndim - 1)))}


VJPS = {"rms_norm": rms_norm_vjp}
