"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import ShapeError

from .. import _checks as check
from ._core import floating

VARIANTS = ("canonical", "annotated")


def layer_norm(x, *, eps=1e-5, variant="canonical", params):
    """canonical: y = (x - mu) / sqrt(var + eps) * gamma + beta, var biased (divide by D).

    annotated: y = gamma * (x - mu) / (std + eps) + beta, std unbiased (divide by D - 1).
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = check.eps(eps)
    check.choice("variant", variant, VARIANTS)
    D = s[-1]
    p = check.params_of(params)
    gamma, beta = p.require("gamma", (D,)), p.require("beta", (D,))
    if variant == "annotated" and D < 2:
        raise ShapeError(f"variant 'annotated' needs x.shape[-1] >= 2 (the unbiased std "
                         f"divides by D - 1), got x of shape {s}")
    if D == 0:  # nothing to normalise: an empty output, not an error
        return np.zeros_like(x)
    mu = x.mean(axis=-1, keepdims=True)                  # (..., 1)
    centred = x - mu                                     # (..., D)
    if variant == "canonical":
        var = np.mean(centred * centred, axis=-1, keepdims=True)
        z = centred / np.sqrt(var + eps)
    else:
        std = np.sqrt(np.sum(centred * centred, axis=-1, keepdims=True) / (D - 1))
        z = centred / (std + eps)
    return z * gamma + beta


def rms_norm(x, *, eps=1e-6, unit_offset=False, params):
    """y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis (no mean subtraction);
    unit_offset: y = x / sqrt(mean(x^2) + eps) * (1 + gamma) (Gemma), computed in float32 for
    a half-precision x and cast back once, after the multiply."""
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = check.eps(eps)
    unit_offset = check.flag("unit_offset", unit_offset)
    gamma = check.params_of(params).require("gamma", (s[-1],))
    if s[-1] == 0:  # nothing to normalise: an empty output, not an error
        return np.zeros_like(x)
    if unit_offset:
        return _rms_norm_unit_offset(x, eps, gamma)
    ms = np.mean(x * x, axis=-1, keepdims=True)          # (..., 1)
    return x / np.sqrt(ms + eps) * gamma


def _rms_norm_unit_offset(x, eps, gamma):
    """Gemma's order: x and gamma to float32 (a half x), (1 + gamma) in float32, one cast out."""
    wide = np.float32 if x.dtype.itemsize < 4 else x.dtype
    t = x.astype(wide)
    ms = np.mean(t * t, axis=-1, keepdims=True)          # (..., 1)
    return (t / np.sqrt(ms + eps) * (1 + np.asarray(gamma).astype(wide))).astype(x.dtype)


# -- backward (vector-Jacobian products) ----------------------------------------------------

def _rows_sum(a):
    """Sum over every leading axis: (..., D) -> (D,), for dgamma and dbeta."""
    return a.reshape(-1, a.shape[-1]).sum(axis=0)


# c = x - mu, z = c / r, y = z gamma + beta, dz = dy gamma:
#   dgamma = sum_rows dy z,  dbeta = sum_rows dy
#   canonical (r = sqrt(var + eps)):  dx = (dz - mean(dz) - z mean(dz z)) / r
#   annotated (r = std + eps):        dc = dz / r - c sum(dz c) / (r^2 std (D - 1)),
#                                     dx = dc - mean(dc)
def layer_norm_vjp(cotangents, x, *, eps=1e-5, variant="canonical", params):
    y = layer_norm(x, eps=eps, variant=variant, params=params)  # the checks, once
    x = np.asarray(x)
    dy = np.asarray(cotangents["y"], dtype=y.dtype)
    gamma = np.asarray(params["gamma"])
    D = x.shape[-1]
    c = x - x.mean(axis=-1, keepdims=True)                       # (..., D)
    dz = dy * gamma
    if variant == "canonical":
        r = np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)
        z = c / r
        dx = (dz - dz.mean(axis=-1, keepdims=True)
              - z * np.mean(dz * z, axis=-1, keepdims=True)) / r
    else:
        std = np.sqrt(np.sum(c * c, axis=-1, keepdims=True) / (D - 1))
        r = std + eps
        z = c / r
        dc = dz / r - c * np.sum(dz * c, axis=-1, keepdims=True) / (r * r * std * (D - 1))
        dx = dc - dc.mean(axis=-1, keepdims=True)
    return {"x": dx.astype(y.dtype)}, {"gamma": _rows_sum(dy * z), "beta": _rows_sum(dy)}


# r = sqrt(mean(x^2) + eps), y = x / r gamma, dz = dy gamma:
#   dgamma = sum_rows dy x / r,  dx = dz / r - x sum(dz x) / (D r^3)
#   unit_offset: gamma replaced by (1 + gamma) in dz; dgamma unchanged
def rms_norm_vjp(cotangents, x, *, eps=1e-6, unit_offset=False, params):
    y = rms_norm(x, eps=eps, unit_offset=unit_offset, params=params)
    x = np.asarray(x)
    dy = np.asarray(cotangents["y"], dtype=y.dtype)
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)    # (..., 1)
    gamma = np.asarray(params["gamma"])
    dz = dy * (1 + gamma if unit_offset else gamma)
    dx = dz / r - x * np.sum(dz * x, axis=-1, keepdims=True) / (x.shape[-1] * r ** 3)
    return {"x": dx.astype(y.dtype)}, {"gamma": _rows_sum(dy * x / r)}
