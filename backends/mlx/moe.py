"""The mixture-of-experts router (spec/components/moe_router.md). The choice of experts is
made on the host in NumPy (integer indices: no gradient flows through them, as in
topk_attention); the weights are gathered and renormalised in MLX, so mx.vjp differentiates
them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import _checks as check
from ._core import floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return np.argsort(-s, axis=-1, kind="stable")


def _select(s, top_k, n_group, topk_group):
    n, e = s.shape
    if n_group > 1:
        grouped = np.sort(s.reshape(n, n_group, e // n_group), axis=-1)   # (N, G, E/G)
        g = grouped[..., -1] + grouped[..., -2]                            # (N, G)
        chosen = _ranked(g)[:, :topk_group]                                # (N, topk_group)
        allowed = np.zeros((n, n_group), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        s = np.where(np.repeat(allowed, e // n_group, axis=-1), s, -np.inf)
    return _ranked(s)[:, :top_k]                                           # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                         # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias, x)
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor)
    p = mx.softmax(x, axis=-1, precise=True) if scoring == "softmax" else mx.sigmoid(x)
    s = mx.stop_gradient(p if b is None else p + b).astype(mx.float32)
    idx = mx.array(_select(np.array(s), top_k, n_group, topk_group).astype(np.int64))  # (N, k)
    w = mx.take_along_axis(p, idx, axis=-1)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + mx.array(eps, dtype=x.dtype))
    return w * mx.array(routed_scaling_factor, dtype=x.dtype), idx
