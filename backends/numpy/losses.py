"""Losses: softmax cross-entropy with an ignore index and label smoothing, and its
hand-written backward pass."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating


def _args(logits, targets, ignore_index, label_smoothing, reduction):
    z = floating("logits", logits)
    t = np.asarray(targets)
    ignore, eps, reduction = check.cross_entropy_args(z.shape, t.shape, t.dtype.kind,
                                                      ignore_index, label_smoothing, reduction)
    counted = t != ignore
    bad = counted & ((t < 0) | (t >= z.shape[-1]))
    if bad.any():
        raise DomainError(f"targets must be class indices in [0, {z.shape[-1]}) or "
                          f"ignore_index={ignore}; got {t[bad].ravel()[0]} (targets of shape "
                          f"{t.shape}, logits of shape {z.shape})")
    return z, np.where(counted, t, 0), counted, eps, reduction


def _smoothed(t, counted, n_classes, eps, dtype):
    """q = (1 - eps) onehot(t) + eps / L  (..., L), zero rows for ignored tokens."""
    onehot = (np.arange(n_classes) == t[..., None]).astype(dtype)  # (..., L)
    return np.where(counted[..., None], (1 - eps) * onehot + eps / n_classes, 0).astype(dtype)


def log_softmax(z):
    """z - logsumexp(z) over the last axis, the max subtracted first."""
    m = np.max(z, axis=-1, keepdims=True)
    return z - m - np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True))


def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """loss_i = -sum_c q_c log softmax(logits_i)_c over the tokens whose target is not
    ignore_index; mean over those N tokens (NaN for N = 0), sum, or none (per token)."""
    z, t, counted, eps, reduction = _args(logits, targets, ignore_index, label_smoothing,
                                          reduction)
    q = _smoothed(t, counted, z.shape[-1], eps, z.dtype)            # (..., L)
    per = -np.sum(q * log_softmax(z), axis=-1)                       # (...,)
    if reduction == "none":
        return per
    total = np.sum(per)
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore"):
        return z.dtype.type(total / np.sum(counted))


# -- backward -------------------------------------------------------------------------------

# dlogits_i = g_i (softmax(logits_i) - q_i) for a counted token, 0 for an ignored one;
# g_i = dloss / N (mean), dloss (sum), dloss_i (none)
def cross_entropy_vjp(cotangents, logits, targets, *, ignore_index=-100, label_smoothing=0.0,
                      reduction="mean"):
    z, t, counted, eps, reduction = _args(logits, targets, ignore_index, label_smoothing,
                                          reduction)
    q = _smoothed(t, counted, z.shape[-1], eps, z.dtype)
    p = np.exp(log_softmax(z))
    dloss = np.asarray(cotangents["loss"], dtype=z.dtype)
    g = dloss if reduction != "mean" else dloss / np.sum(counted)
    g = np.broadcast_to(g, counted.shape) * counted                  # (...,)
    return {"logits": (g[..., None] * (p - q)).astype(z.dtype)}, {}
