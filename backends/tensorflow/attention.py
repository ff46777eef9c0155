"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError, DTypeError, ShapeError

from .. import _checks as check
from ._core import boolean, const, floating, integers, size, value_check, zeros


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) get weight 0; a slice with nothing kept is all 0.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        keep = tf.ones(s, dtype=tf.bool)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = tf.broadcast_to(keep, s)
    keep = keep & (x != -np.inf)
    m = tf.reduce_max(tf.where(keep, x, const(-np.inf, x)), axis=axis, keepdims=True)
    m = tf.where(tf.math.is_finite(m), m, zeros(m))
    e = tf.where(keep, tf.exp(tf.where(keep, x - m, zeros(x))), zeros(x))
    total = tf.reduce_sum(e, axis=axis, keepdims=True)
    return e / tf.where(total > 0, total, const(1, total))


def _size(name: str, value) -> int:
    return check.integer(name, value, lo=0)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing.
    """
    t, s = _size("t", t), _size("s", s)
    i = tf.range(t)[:, None]  # (T, 1)
    j = tf.range(s)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != tf.cast(pad_id, ids.dtype))[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = _size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    if not isinstance(causal, (bool, np.bool_)):
        raise ConfigError(f"causal must be True or False, got {causal!r}")
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s)  # (B, 1, T, S)
    return tf.broadcast_to(keep, (b, h, t, s))  # (B, H, T, S)


def _scale(scale, width: int, like) -> tf.Tensor:
    if scale is None:
        return const(1.0 / np.sqrt(width), like)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not math.isfinite(scale):
        raise ConfigError(f"scale must be a finite number or None, got {scale!r}")
    return const(float(scale), like)


def _attention_inputs(q, k, v, mask, bias):
    """Checked q, k, v, mask, bias and the scores shape (*batch, T, S)."""
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise DTypeError(f"{name} has dtype {x.dtype.name} but q has {q.dtype.name}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check.rank(name, x, min_rank=2)
    qs, ks, vs = check.shape(q), check.shape(k), check.shape(v)
    check.same("key width", **{"q.shape[-1]": qs[-1], "k.shape[-1]": ks[-1]})
    check.same("key length", **{"k.shape[-2]": ks[-2], "v.shape[-2]": vs[-2]})
    if qs[-1] < 1:
        raise ShapeError(f"key width must be >= 1, got q of shape {qs}")
    batch = check.batch_broadcast("q, k, v", q=qs[:-2], k=ks[:-2], v=vs[:-2])
    full = batch + (qs[-2], ks[-2])  # (..., T, S)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, full)
    if bias is not None:
        bias = floating("bias", bias)
        if bias.dtype != q.dtype:
            raise DTypeError(f"bias has dtype {bias.dtype.name} but q has {q.dtype.name}")
        check.broadcastable("bias", bias, full)
    return q, k, v, mask, bias, full


def _batched(x, full: tuple):
    """x broadcast over the batch dimensions of ``full`` (keeping its last two)."""
    return tf.broadcast_to(x, full[:-2] + tuple(check.shape(x)[-2:]))


def sdpa(q, k, v, mask=None, bias=None, *, scale=None):
    """weights = softmax(scale * q k^T + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output.
    """
    q, k, v, mask, bias, full = _attention_inputs(q, k, v, mask, bias)
    c = _scale(scale, check.shape(q)[-1], q)
    scores = tf.matmul(_batched(q, full), _batched(k, full), transpose_b=True) * c  # (..., T, S)
    if bias is not None:
        scores = scores + bias
    if mask is None and bias is None and tf.reduce_all(tf.math.is_finite(scores)) \
            if tf.executing_eagerly() else mask is None and bias is None:
        weights = tf.nn.softmax(scores)  # fused kernel: no masked entries to zero
    else:
        weights = softmax(tf.broadcast_to(scores, full), mask)  # (..., T, S)
    return tf.matmul(weights, _batched(v, full)), weights  # (..., T, V), (..., T, S)


def topk_attention(q, k, v, mask=None, *, top_k, scale=None):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; equal scores keep the lower key index first; with
    fewer than top_k unmasked keys all of them are kept.
    """
    q, k, v, mask, _, full = _attention_inputs(q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    c = _scale(scale, check.shape(q)[-1], q)
    scores = tf.matmul(_batched(q, full), _batched(k, full), transpose_b=True) * c  # (..., T, S)
    allowed = tf.ones(full, dtype=tf.bool) if mask is None else tf.broadcast_to(mask, full)
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = tf.argsort(tf.where(allowed, -scores, const(np.inf, scores)), axis=-1, stable=True)
    rank = tf.argsort(order, axis=-1, stable=True)  # the inverse permutation
    weights = softmax(scores, allowed & (rank < top_k))  # (..., T, S)
    return tf.matmul(weights, _batched(v, full)), weights  # (..., T, V), (..., T, S)


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if size(w):
        bad = tf.reshape(~(tf.math.is_finite(w) & (w >= 0)), [-1])
        first = tf.gather(tf.reshape(w, [-1]), tf.argmax(tf.cast(bad, tf.int32)))
        value_check(~tf.reduce_any(bad),
                    lambda x: f"weights must be finite and >= 0, got a value of {x} in shape {s}",
                    first)
    positive = w > 0
    terms = tf.where(positive, w * tf.math.log(tf.where(positive, w, const(1, w))), zeros(w))
    return -tf.reduce_sum(terms, axis=axis)
