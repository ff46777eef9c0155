"""The mixture-of-experts router (spec/components/moe_router.md). The choice of experts is
made on the host in NumPy (integer indices: no gradient flows through them, as in
topk_attention); the weights are gathered and renormalised in MLX, so mx.vjp differentiates
them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import _checks as check
from .._routing import ranked as _ranked
from .._routing import select as _select
from ..composite.moe import MoE
from ._core import boolean, floating


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                         # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias, x)
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor, group_score)
    p = mx.softmax(x, axis=-1, precise=True) if scoring == "softmax" else mx.sigmoid(x)
    s = mx.stop_gradient(p if b is None else p + b).astype(mx.float32)
    idx = mx.array(_select(np.array(s), top_k, n_group, topk_group, group_score).astype(np.int64))  # (N, k)
    w = mx.take_along_axis(p, idx, axis=-1)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + mx.array(eps, dtype=x.dtype))
    return w * mx.array(routed_scaling_factor, dtype=x.dtype), idx


# -- the MoE layer (spec/components/moe.md): the shared composite ---------------------------

moe, = MoE.bind(__package__)


# -- the load-balancing loss (spec/components/moe_aux_loss.md) -------------------------------

def moe_aux_loss(router_logits, mask=None, *, top_k):
    """E sum_e f_e P_e: f_e the fraction of the (unmasked) rows of every layer choosing e in
    their top_k (k counts per row), P_e their mean probability of e. The choice (f) is made
    on the host in NumPy, as in moe_router."""
    z = floating("router_logits", router_logits)                                 # (L, N, E)
    m = None if mask is None else boolean("mask", mask)
    top_k = check.moe_aux_loss(tuple(z.shape), None if m is None else tuple(m.shape), top_k)
    layers, n, e = z.shape
    p = mx.softmax(z, axis=-1, precise=True)                                     # (L, N, E)
    host = np.array(mx.stop_gradient(p).astype(mx.float32)).reshape(-1, e)
    chosen = np.zeros(host.shape, dtype=np.float32)
    np.put_along_axis(chosen, _ranked(host)[:, :top_k], 1.0, axis=-1)
    chosen = mx.array(chosen.reshape(layers, n, e)).astype(z.dtype)              # (L, N, E)
    rows = (mx.ones((n,), dtype=z.dtype) if m is None else m.astype(z.dtype)).reshape(1, n, 1)
    total = rows.sum() * layers
    f = (chosen * rows).sum(axis=(0, 1)) / total                                 # (E,)
    big_p = (p * rows).sum(axis=(0, 1)) / total                                  # (E,)
    return (f * big_p).sum() * e
