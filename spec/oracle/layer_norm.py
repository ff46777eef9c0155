"""Layer normalisation over the last axis, two named variants.

canonical (Ba et al. 2016; torch.nn.LayerNorm, keras LayerNormalization):
    mu = (1/D) sum_d x_d,  var = (1/D) sum_d (x_d - mu)^2        (biased variance)
    y_d = (x_d - mu) / sqrt(var + eps) * gamma_d + beta_d          (eps inside the root)
annotated (the Annotated Transformer's LayerNorm):
    std = sqrt((1/(D-1)) sum_d (x_d - mu)^2)                      (unbiased std)
    y_d = gamma_d * (x_d - mu) / (std + eps) + beta_d              (eps added to the std)
"""

import mpmath
import numpy as np

from .core import fsum_axes, mp, mpa, rows, zeros


def _normalise_row(row, eps, variant):
    d = len(row)
    if d == 0:  # D = 0: nothing to normalise, an empty row
        return []
    mu = mp.fsum(row) / d
    ss = mp.fsum((v - mu) ** 2 for v in row)
    if variant == "canonical":
        denom = mpmath.sqrt(ss / d + eps)
    elif variant == "annotated":
        denom = mpmath.sqrt(ss / (d - 1)) + eps
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return [(v - mu) / denom for v in row]


def layer_norm(x, eps=1e-5, variant="canonical", params=None):
    x = mpa(x)
    gamma, beta = mpa(params["gamma"]), mpa(params["beta"])
    eps = mpmath.mpf(eps)
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-1]):
        z = _normalise_row(list(x[idx]), eps, variant)
        y[idx] = [z[d] * gamma[d] + beta[d] for d in range(len(z))]
    return {"y": y}


def layer_norm_vjp(cot, x, eps=1e-5, variant="canonical", params=None):
    """c = x - mu, z = c / r, y = z gamma + beta (r = sqrt(var + eps), or std + eps):
        dgamma = sum over rows of dy z,  dbeta = sum over rows of dy,  dz = dy gamma
        canonical:  dx = (dz - mean(dz) - z mean(dz z)) / r
        annotated:  dc = dz / r - c sum(dz c) / (r^2 std (D - 1)),  dx = dc - mean(dc)
    """
    x, dy = mpa(x), mpa(cot["y"])
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    d = x.shape[-1]
    dx = zeros(x.shape)
    z_all = zeros(x.shape)
    for idx, row in rows(x):
        if d == 0:
            continue
        g = list(dy[idx])
        mu = mp.fsum(row) / d
        c = [xi - mu for xi in row]
        ss = mp.fdot(c, c)
        dz = [gi * gamma[j] for j, gi in enumerate(g)]
        if variant == "canonical":
            r = mpmath.sqrt(ss / d + eps)
            z = [ci / r for ci in c]
            m1 = mp.fsum(dz) / d
            m2 = mp.fdot(dz, z) / d
            dx[idx] = [(dz[j] - m1 - z[j] * m2) / r for j in range(d)]
        else:
            std = mpmath.sqrt(ss / (d - 1))
            r = std + eps
            z = [ci / r for ci in c]
            s = mp.fdot(dz, c)
            dc = [dz[j] / r - c[j] * s / (r * r * std * (d - 1)) for j in range(d)]
            m = mp.fsum(dc) / d
            dx[idx] = [dcj - m for dcj in dc]
        z_all[idx] = z
    lead = tuple(range(x.ndim - 1))
    return {"x": dx}, {"gamma": fsum_axes(dy * z_all, lead), "beta": fsum_axes(dy, lead)}


VJPS = {"layer_norm": layer_norm_vjp}
