"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import mlx.core as mx
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
        return mx.zeros_like(x)
    mu = mx.mean(x, axis=-1, keepdims=True)              # (..., 1)
    centred = x - mu                                     # (..., D)
    if variant == "canonical":
        var = mx.mean(centred * centred, axis=-1, keepdims=True)
        z = centred / mx.sqrt(var + eps)
    else:
        std = mx.sqrt(mx.sum(centred * centred, axis=-1, keepdims=True) / (D - 1))
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
        return mx.zeros_like(x)
    if unit_offset:  # Gemma's order: float32 for a half x, (1 + gamma) in it, one cast out
        t = x.astype(mx.float32) if x.dtype.size < 4 else x
        ms = mx.mean(t * t, axis=-1, keepdims=True)      # (..., 1)
        return (t / mx.sqrt(ms + eps) * (1 + gamma.astype(t.dtype))).astype(x.dtype)
    ms = mx.mean(x * x, axis=-1, keepdims=True)          # (..., 1)
    return x / mx.sqrt(ms + eps) * gamma
