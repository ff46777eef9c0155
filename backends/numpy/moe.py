"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DTypeError

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


def _scores(x, scoring):
    if scoring == "softmax":
        z = np.exp(x - x.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)
    return 1 / (1 + np.exp(-x))


def _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group, topk_group, scale):
    x = floating("logits", logits)                                         # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias)
    if b is not None and b.dtype != x.dtype:
        raise DTypeError(f"correction_bias has dtype {b.dtype} but logits has {x.dtype}")
    top_k, n_group, topk_group = check.moe_router(x.shape, None if b is None else b.shape, top_k,
                                                  scoring, renormalize, eps, n_group,
                                                  topk_group, scale)
    p = _scores(x, scoring)                                                # (N, E)
    s = p if b is None else p + b
    return x, p, _select(s, top_k, n_group, topk_group)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x, p, idx = _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group,
                       topk_group, routed_scaling_factor)
    w = np.take_along_axis(p, idx, axis=-1)                                # (N, k)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + x.dtype.type(eps))
    return w * x.dtype.type(routed_scaling_factor), idx.astype(np.int64)


# g = c dw; renormalised: dp_I = g / (S + eps) - (g . p_I) / (S + eps)^2; scattered to the
# kept experts; softmax: dx = p (dp - dp . p); sigmoid: dx = dp p (1 - p); d bias = 0
def moe_router_vjp(cotangents, logits, correction_bias=None, *, top_k, scoring="softmax",
                   renormalize=False, eps=1e-20, n_group=1, topk_group=1,
                   routed_scaling_factor=1.0):
    x, p, idx = _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group,
                       topk_group, routed_scaling_factor)
    g = np.asarray(cotangents["weights"], dtype=x.dtype) * x.dtype.type(routed_scaling_factor)
    if renormalize:
        kept = np.take_along_axis(p, idx, axis=-1)                         # (N, k)
        total = kept.sum(axis=-1, keepdims=True) + x.dtype.type(eps)
        g = g / total - (g * kept).sum(axis=-1, keepdims=True) / (total * total)
    dp = np.zeros_like(p)
    np.put_along_axis(dp, idx, g, axis=-1)
    if scoring == "softmax":
        dx = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    else:
        dx = dp * p * (1 - p)
    grads = {"logits": dx}
    if correction_bias is not None:
        grads["correction_bias"] = np.zeros(np.shape(correction_bias), dtype=x.dtype)
    return grads, {}
