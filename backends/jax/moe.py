"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _checks as check
from ._core import floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return jnp.argsort(-s, axis=-1, stable=True)


def _select(s, top_k, n_group, topk_group):
    n, e = s.shape
    if n_group > 1:
        grouped = jnp.sort(s.reshape(n, n_group, e // n_group), axis=-1)        # (N, G, E/G)
        g = grouped[..., -1] + grouped[..., -2]                                  # (N, G)
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = jax.nn.one_hot(chosen, n_group).max(axis=1) > 0                # (N, G)
        s = jnp.where(jnp.repeat(allowed, e // n_group, axis=-1), s, -jnp.inf)
    return _ranked(s)[:, :top_k]                                                 # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                               # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias, x)
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor)
    p = jax.nn.softmax(x, axis=-1) if scoring == "softmax" else jax.nn.sigmoid(x)  # (N, E)
    s = p if b is None else p + b
    idx = _select(jax.lax.stop_gradient(s), top_k, n_group, topk_group)         # (N, k)
    w = jnp.take_along_axis(p, idx, axis=-1)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + jnp.asarray(eps, x.dtype))
    return w * jnp.asarray(routed_scaling_factor, x.dtype), idx.astype(jnp.int64)
