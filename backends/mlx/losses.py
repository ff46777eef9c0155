"""Losses: softmax cross-entropy with an ignore index and label smoothing."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import array, dtype_name, floating


def _args(logits, targets, ignore_index, label_smoothing, reduction):
    z = floating("logits", logits)
    t = array("targets", targets)
    kind = np.dtype(dtype_name(t)).kind if dtype_name(t) != "bfloat16" else "f"
    ignore, eps, reduction = check.cross_entropy_args(tuple(z.shape), tuple(t.shape), kind,
                                                      ignore_index, label_smoothing, reduction)
    counted = t != ignore
    bad = counted & ((t < 0) | (t >= z.shape[-1]))
    if mx.any(bad).item():
        first = np.array(t)[np.array(bad)].ravel()[0]
        raise DomainError(f"targets must be class indices in [0, {z.shape[-1]}) or "
                          f"ignore_index={ignore}; got {first} (targets of shape "
                          f"{tuple(t.shape)}, logits of shape {tuple(z.shape)})")
    return z, mx.where(counted, t, 0), counted, eps, reduction


def _smoothed(t, counted, n_classes, eps, dtype):
    """q = (1 - eps) onehot(t) + eps / L  (..., L), zero rows for ignored tokens."""
    onehot = (mx.arange(n_classes) == t[..., None]).astype(dtype)  # (..., L)
    return mx.where(counted[..., None], (1 - eps) * onehot + eps / n_classes, 0).astype(dtype)


def log_softmax(z):
    """z - logsumexp(z) over the last axis, the max subtracted first."""
    m = mx.stop_gradient(mx.max(z, axis=-1, keepdims=True))
    return z - m - mx.log(mx.sum(mx.exp(z - m), axis=-1, keepdims=True))


def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """loss_i = -sum_c q_c log softmax(logits_i)_c over the tokens whose target is not
    ignore_index; mean over those N tokens (NaN for N = 0), sum, or none (per token)."""
    z, t, counted, eps, reduction = _args(logits, targets, ignore_index, label_smoothing,
                                          reduction)
    q = _smoothed(t, counted, z.shape[-1], eps, z.dtype)            # (..., L)
    per = -mx.sum(q * log_softmax(z), axis=-1)                       # (...,)
    if reduction == "none":
        return per
    total = mx.sum(per)
    if reduction == "sum":
        return total
    n = mx.sum(counted).item()
    return (total / n if n else total * math.nan).astype(z.dtype)
