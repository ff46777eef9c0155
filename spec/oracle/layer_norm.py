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

from .core import mp, mpa


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
