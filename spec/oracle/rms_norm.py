"""RMS normalisation over the last axis (Zhang & Sennrich 2019; T5, LLaMA):

    rms = sqrt((1/D) sum_d x_d^2 + eps)
    y_d = x_d / rms * gamma_d          (no mean subtraction, no beta)

unit_offset (Gemma): y_d = x_d / rms * (1 + gamma_d), exactly (the cast order is the
backends' business: see rms_norm.md).
"""

import mpmath
import numpy as np

from .core import fsum_axes, mp, mpa, rows, zeros


def _scale(params, unit_offset):
    """gamma, or 1 + gamma under unit_offset (Gemma's (1 + w))."""
    gamma = mpa(params["gamma"])
    return np.array([1 + g for g in gamma], dtype=object) if unit_offset else gamma


def rms_norm(x, eps=1e-6, unit_offset=False, params=None):
    x = mpa(x)
    gamma = _scale(params, unit_offset)
    eps = mpmath.mpf(eps)
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-1]):
        row = list(x[idx])
        if not row:  # D = 0: nothing to normalise, an empty row
            continue
        rms = mpmath.sqrt(mp.fdot(row, row) / len(row) + eps)
        y[idx] = [row[d] / rms * gamma[d] for d in range(len(row))]
    return {"y": y}


def rms_norm_vjp(cot, x, eps=1e-6, unit_offset=False, params=None):
    """r = sqrt(mean(x^2) + eps), y = x / r gamma:
        dgamma = sum over rows of dy x / r,  dz = dy gamma,
        dx = dz / r - x sum(dz x) / (D r^3)
    unit_offset: gamma replaced by (1 + gamma) in dz; dgamma unchanged (d(1 + gamma) = dgamma).
    """
    x, dy = mpa(x), mpa(cot["y"])
    gamma = _scale(params, unit_offset)
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
