"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
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


def rms_norm(x, *, eps=1e-6, params):
    """y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis (no mean subtraction)."""
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = check.eps(eps)
    gamma = check.params_of(params).require("gamma", (s[-1],))
    if s[-1] == 0:  # nothing to normalise: an empty output, not an error
        return jnp.zeros_like(x)
    return buckets.rowwise(_rms_norm, x, gamma, const(x, eps))
