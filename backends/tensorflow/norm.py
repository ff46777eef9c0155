"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError, ShapeError

from .. import _checks as check
from ._core import const, floating

VARIANTS = ("canonical", "annotated")


def positive(name: str, value) -> float:
    """A finite real attribute > 0 (eps), or ConfigError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def layer_norm(x, *, eps=1e-5, variant="canonical", params):
    """canonical: y = (x - mu) / sqrt(var + eps) * gamma + beta, var biased (divide by D).

    annotated: y = gamma * (x - mu) / (std + eps) + beta, std unbiased (divide by D - 1).
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = positive("eps", eps)
    check.choice("variant", variant, VARIANTS)
    D = s[-1]
    p = check.params_of(params)
    gamma, beta = p.require("gamma", (D,)), p.require("beta", (D,))
    if variant == "annotated" and D < 2:
        raise ShapeError(f"variant 'annotated' needs x.shape[-1] >= 2 (the unbiased std "
                         f"divides by D - 1), got x of shape {s}")
    mu = tf.reduce_mean(x, axis=-1, keepdims=True)       # (..., 1)
    centred = x - mu                                     # (..., D)
    if variant == "canonical":
        var = tf.reduce_mean(centred * centred, axis=-1, keepdims=True)
        z = centred / tf.sqrt(var + const(eps, var))
    else:
        std = tf.sqrt(tf.reduce_sum(centred * centred, axis=-1, keepdims=True) / const(D - 1, x))
        z = centred / (std + const(eps, std))
    return z * gamma + beta


def rms_norm(x, *, eps=1e-6, params):
    """y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis (no mean subtraction)."""
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = positive("eps", eps)
    gamma = check.params_of(params).require("gamma", (s[-1],))
    ms = tf.reduce_mean(x * x, axis=-1, keepdims=True)   # (..., 1)
    return x / tf.sqrt(ms + const(eps, ms)) * gamma
