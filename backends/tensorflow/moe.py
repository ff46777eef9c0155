"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import tensorflow as tf
from attnspec.spec.errors import DTypeError

from .. import _checks as check
from ._core import floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return tf.argsort(-s, axis=-1, stable=True)


def _select(s, top_k, n_group, topk_group):
    n, e = s.shape
    if n_group > 1:
        grouped = tf.sort(tf.reshape(s, (-1, n_group, e // n_group)), axis=-1)  # (N, G, E/G)
        g = grouped[..., -1] + grouped[..., -2]                                  # (N, G)
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = tf.reduce_max(tf.one_hot(chosen, n_group, dtype=s.dtype), axis=1) > 0
        s = tf.where(tf.repeat(allowed, e // n_group, axis=-1), s,
                     tf.fill(tf.shape(s), tf.constant(float("-inf"), s.dtype)))
    return _ranked(s)[:, :top_k]                                                 # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                               # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias)
    if b is not None and b.dtype != x.dtype:
        raise DTypeError(f"correction_bias has dtype {b.dtype.name} but logits has "
                         f"{x.dtype.name}")
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor)
    p = tf.nn.softmax(x, axis=-1) if scoring == "softmax" else tf.sigmoid(x)   # (N, E)
    s = p if b is None else p + b
    idx = _select(tf.stop_gradient(s), top_k, n_group, topk_group)              # (N, k)
    w = tf.gather(p, idx, batch_dims=1)
    if renormalize:
        w = w / (tf.reduce_sum(w, axis=-1, keepdims=True) + tf.constant(eps, x.dtype))
    return w * tf.constant(routed_scaling_factor, x.dtype), tf.cast(idx, tf.int64)
