"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import ShapeError

from .. import _checks as check
from . import buckets
from ._core import const, floating

VARIANTS = ("canonical", "annotated")


@functools.partial(jax.jit, static_argnames="variant")
def _layer_norm(x, gamma, beta, eps, variant):
    mu = x.mean(axis=-1, keepdims=True)                  # (..., 1)
    centred = x - mu                                     # (..., D)
    if variant == "canonical":
        var = jnp.mean(centred * centred, axis=-1, keepdims=True)
        z = centred / jnp.sqrt(var + eps)
    else:
        std = jnp.sqrt(jnp.sum(centred * centred, axis=-1, keepdims=True) / (x.shape[-1] - 1))
        z = centred / (std + eps)
    return z * gamma + beta


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
        return jnp.zeros_like(x)
    return buckets.rowwise(_layer_norm, x, gamma, beta, const(x, eps), variant=variant)


@jax.jit
def _rms_norm(x, gamma, eps):
    ms = jnp.mean(x * x, axis=-1, keepdims=True)         # (..., 1)
    return x / jnp.sqrt(ms + eps) * gamma


@jax.jit
def _rms_norm_unit_offset(x, gamma, eps):
    """Gemma's order: float32 for a half x, (1 + gamma) in it, one cast out."""
    t = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
    ms = jnp.mean(t * t, axis=-1, keepdims=True)         # (..., 1)
    return (t / jnp.sqrt(ms + eps) * (1 + gamma.astype(t.dtype))).astype(x.dtype)


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
        return jnp.zeros_like(x)
    if unit_offset:  # eps in float32 for a half x, as the rest of Gemma's order
        wide = np.float32 if x.dtype.itemsize < 4 else x.dtype
        return buckets.rowwise(_rms_norm_unit_offset, x, gamma, np.asarray(eps, dtype=wide)[()])
    return buckets.rowwise(_rms_norm, x, gamma, const(x, eps))
