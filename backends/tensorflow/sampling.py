"""The sampling filters and the deterministic draw (spec/components/sampling.md)."""

from __future__ import annotations

import tensorflow as tf
from attnspec.spec.errors import DTypeError

from .. import _checks as check
from ._core import floating, value_check


def _kth(z, k: int):
    """(N, V) -> (N, 1): the k-th largest value of each row (counted with multiplicity)."""
    return tf.sort(z, axis=-1, direction="DESCENDING")[:, k - 1:k]


def _softmax(z, keep):
    """softmax of z over the kept entries of each row, 0 elsewhere."""
    zero = tf.zeros_like(z)
    top = tf.reduce_max(tf.where(keep, z, tf.fill(tf.shape(z), tf.constant(float("-inf"), z.dtype))),
                        axis=-1, keepdims=True)                                  # (N, 1)
    e = tf.where(keep, tf.exp(tf.where(keep, z - top, zero)), zero)              # (N, V)
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def _top_p(z, keep, top_p, floor):
    """keep the tokens of probability >= the one whose mass above is still < top_p."""
    q = _softmax(z, keep)                                                        # (N, V)
    desc = tf.sort(q, axis=-1, direction="DESCENDING")                           # (N, V)
    above = tf.cumsum(desc, axis=-1, exclusive=True)                             # (N, V)
    r = tf.reduce_sum(tf.cast(above < tf.constant(top_p, z.dtype), tf.int32), axis=-1,
                      keepdims=True)                                             # (N, 1), >= 1
    threshold = tf.gather(desc, r - 1, axis=1, batch_dims=1)                     # (N, 1)
    return keep & ((q >= threshold) | (z >= floor))


def _min_p(z, keep, min_p, floor):
    q = _softmax(z, keep)                                                        # (N, V)
    cut = tf.constant(min_p, z.dtype) * tf.reduce_max(q, axis=-1, keepdims=True)  # (N, 1)
    return keep & ((q >= cut) | (z >= floor))


def _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    x = floating("logits", logits)                                               # (N, V)
    temperature, top_k, top_p, min_p, m = check.sampling(tuple(x.shape), temperature, top_k,
                                                         top_p, min_p, min_tokens_to_keep)
    z = x / tf.constant(temperature, x.dtype)
    floor = _kth(z, m)                                                           # (N, 1)
    keep = tf.ones_like(z, dtype=tf.bool) if top_k is None else z >= _kth(z, top_k)
    if top_p < 1:
        keep = _top_p(z, keep, top_p, floor)
    if min_p > 0:
        keep = _min_p(z, keep, min_p, floor)
    return _softmax(z, keep)


def sampling_filter(logits, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
                    min_tokens_to_keep=1):
    """probs (N, V): softmax(x / T) restricted by top-k, then top-p, then min-p (each on the
    survivors of the previous, renormalised), 0 for the removed tokens."""
    return _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep)


def sample(logits, u, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
           min_tokens_to_keep=1):
    """ids (N,): min { j : F_j > u_n }, F the CDF of the filtered probabilities in id order
    (the last id of nonzero probability when rounding leaves every F_j <= u_n)."""
    q = _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep)  # (N, V)
    u = floating("u", u)
    if u.dtype != q.dtype:
        raise DTypeError(f"u has dtype {u.dtype.name} but logits has {q.dtype.name}")
    check.draws(tuple(u.shape), q.shape[0])
    value_check(tf.reduce_all((u >= 0) & (u < 1)),
                lambda got: f"u must lie in [0, 1), got u = {got} (shape {got.shape})", u)
    v = q.shape[1]
    ids = tf.reduce_sum(tf.cast(tf.cumsum(q, axis=-1) <= u[:, None], tf.int64), axis=-1)  # (N,)
    last = v - 1 - tf.argmax(tf.cast(tf.reverse(q, [-1]) > 0, tf.int32), axis=-1)      # (N,)
    return tf.where(ids < v, ids, last)
