"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import tensorflow as tf
from attnspec.spec.errors import DTypeError

from .. import _checks as check
from ..composite.moe import MoE
from ._core import boolean, floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return tf.argsort(-s, axis=-1, stable=True)


def _select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    n, e = s.shape
    if n_group > 1:
        grouped = tf.sort(tf.reshape(s, (-1, n_group, e // n_group)), axis=-1)  # (N, G, E/G)
        g = grouped[..., -1]                                                     # (N, G): "max"
        if group_score == "sum_top2":
            g = g + grouped[..., -2]
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = tf.reduce_max(tf.one_hot(chosen, n_group, dtype=s.dtype), axis=1) > 0
        s = tf.where(tf.repeat(allowed, e // n_group, axis=-1), s,
                     tf.fill(tf.shape(s), tf.constant(float("-inf"), s.dtype)))
    return _ranked(s)[:, :top_k]                                                 # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                               # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias)
    if b is not None and b.dtype != x.dtype:
        raise DTypeError(f"correction_bias has dtype {b.dtype.name} but logits has "
                         f"{x.dtype.name}")
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor, group_score)
    p = tf.nn.softmax(x, axis=-1) if scoring == "softmax" else tf.sigmoid(x)   # (N, E)
    s = p if b is None else p + b
    idx = _select(tf.stop_gradient(s), top_k, n_group, topk_group, group_score)              # (N, k)
    w = tf.gather(p, idx, batch_dims=1)
    if renormalize:
        w = w / (tf.reduce_sum(w, axis=-1, keepdims=True) + tf.constant(eps, x.dtype))
    return w * tf.constant(routed_scaling_factor, x.dtype), tf.cast(idx, tf.int64)


# -- the MoE layer (spec/components/moe.md): the shared composite ---------------------------

moe, = MoE.bind(__package__)


# -- the load-balancing loss (spec/components/moe_aux_loss.md) -------------------------------

def moe_aux_loss(router_logits, mask=None, *, top_k):
    """E sum_e f_e P_e: f_e the fraction of the (unmasked) rows of every layer choosing e in
    their top_k (k counts per row), P_e their mean probability of e."""
    z = floating("router_logits", router_logits)                                 # (L, N, E)
    m = None if mask is None else boolean("mask", mask)
    top_k = check.moe_aux_loss(tuple(z.shape), None if m is None else tuple(m.shape), top_k)
    layers, n, e = z.shape
    p = tf.nn.softmax(z, axis=-1)                                                # (L, N, E)
    idx = _ranked(tf.stop_gradient(tf.reshape(p, (-1, e))))[:, :top_k]          # (L N, k)
    chosen = tf.reshape(tf.reduce_sum(tf.one_hot(idx, e, dtype=z.dtype), axis=1), tf.shape(p))
    rows = tf.reshape(tf.ones((n,), z.dtype) if m is None else tf.cast(m, z.dtype), (1, n, 1))
    total = tf.reduce_sum(rows) * layers
    f = tf.reduce_sum(chosen * rows, axis=(0, 1)) / total                        # (E,)
    big_p = tf.reduce_sum(p * rows, axis=(0, 1)) / total                         # (E,)
    return tf.reduce_sum(f * big_p) * e
