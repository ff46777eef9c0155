"""Losses: softmax cross-entropy with an ignore index and label smoothing. Gradients come
from tf.GradientTape (the backend's ``vjp``)."""

from __future__ import annotations

import tensorflow as tf

from .. import _checks as check
from ._core import FLOATS, INTS, floating, tensor, value_check


def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """loss_i = -sum_c q_c log softmax(logits_i)_c, q = (1 - eps) onehot(t_i) + eps / L, over
    the tokens whose target is not ignore_index; mean over those N (NaN for N = 0), sum, none."""
    z, t = floating("logits", logits), tensor(targets)
    kind = "i" if t.dtype in INTS else ("f" if t.dtype in FLOATS else "b")
    ignore, eps, reduction = check.cross_entropy_args(tuple(z.shape), tuple(t.shape), kind,
                                                      ignore_index, label_smoothing, reduction)
    L = z.shape[-1]
    t = tf.cast(t, tf.int64)
    counted = tf.not_equal(t, ignore)
    bad = counted & ((t < 0) | (t >= L))
    worst = tf.reduce_max(tf.where(bad, t, tf.reduce_min(t)))  # the largest bad target
    value_check(~tf.reduce_any(bad),
                lambda x: f"targets must be class indices in [0, {L}) or ignore_index={ignore}; "
                          f"got {int(x)} (targets of shape {tuple(t.shape)}, logits of shape "
                          f"{tuple(z.shape)})", worst)
    onehot = tf.one_hot(tf.where(counted, t, 0), L, dtype=z.dtype)       # (..., L)
    mask = tf.cast(counted, z.dtype)[..., None]
    q = ((1 - eps) * onehot + eps / L) * mask                            # (..., L)
    per = -tf.reduce_sum(q * tf.nn.log_softmax(z, axis=-1), axis=-1)     # (...,)
    if reduction == "none":
        return per
    total = tf.reduce_sum(per)
    return total if reduction == "sum" else total / tf.reduce_sum(tf.cast(counted, z.dtype))
