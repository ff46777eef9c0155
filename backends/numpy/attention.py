"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import ConfigError, DomainError, DTypeError, ShapeError

from .. import _checks as check
from ._core import boolean, floating, integers


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) get weight 0; a slice with nothing kept is all 0.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        keep = np.ones(s, dtype=bool)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = np.broadcast_to(keep, s)
    keep = keep & (x != -np.inf)
    m = np.max(np.where(keep, x, -np.inf), axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(keep, np.exp(np.where(keep, x - m, 0)), 0)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)


def _size(name: str, value) -> int:
    return check.integer(name, value, lo=0)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing.
    """
    t, s = _size("t", t), _size("s", s)
    i = np.arange(t)[:, None]  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


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
    return np.broadcast_to(keep, (b, h, t, s)).copy()  # (B, H, T, S)


def _scale(scale, width: int, dtype) -> np.floating:
    if scale is None:
        return dtype.type(1.0 / np.sqrt(width))
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not np.isfinite(scale):
        raise ConfigError(f"scale must be a finite number or None, got {scale!r}")
    return dtype.type(scale)


def _attention_inputs(q, k, v, mask, bias):
    """Checked q, k, v, mask, bias and the scores shape (*batch, T, S)."""
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise DTypeError(f"{name} has dtype {x.dtype} but q has {q.dtype}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check.rank(name, x, min_rank=2)
    check.same("key width", **{"q.shape[-1]": q.shape[-1], "k.shape[-1]": k.shape[-1]})
    check.same("key length", **{"k.shape[-2]": k.shape[-2], "v.shape[-2]": v.shape[-2]})
    if q.shape[-1] < 1:
        raise ShapeError(f"key width must be >= 1, got q of shape {q.shape}")
    batch = check.batch_broadcast("q, k, v", q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    full = batch + (q.shape[-2], k.shape[-2])  # (..., T, S)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, full)
    if bias is not None:
        bias = floating("bias", bias)
        if bias.dtype != q.dtype:
            raise DTypeError(f"bias has dtype {bias.dtype} but q has {q.dtype}")
        check.broadcastable("bias", bias, full)
    return q, k, v, mask, bias, full


def sdpa(q, k, v, mask=None, bias=None, *, scale=None):
    """weights = softmax(scale * q k^T + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output.
    """
    q, k, v, mask, bias, full = _attention_inputs(q, k, v, mask, bias)
    c = _scale(scale, q.shape[-1], q.dtype)
    scores = (q @ np.swapaxes(k, -1, -2)) * c  # (..., T, S)
    if bias is not None:
        scores = scores + bias
    weights = softmax(np.broadcast_to(scores, full), mask)  # (..., T, S)
    return weights @ v, weights  # (..., T, V), (..., T, S)


def topk_attention(q, k, v, mask=None, *, top_k, scale=None):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; equal scores keep the lower key index first; with
    fewer than top_k unmasked keys all of them are kept.
    """
    q, k, v, mask, _, full = _attention_inputs(q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    c = _scale(scale, q.shape[-1], q.dtype)
    scores = np.broadcast_to((q @ np.swapaxes(k, -1, -2)) * c, full)  # (..., T, S)
    allowed = np.ones(full, dtype=bool) if mask is None else np.broadcast_to(mask, full)
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = np.argsort(np.where(allowed, -scores, np.inf), axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(full[-1]), axis=-1)
    weights = softmax(scores, allowed & (rank < top_k))  # (..., T, S)
    return weights @ v, weights  # (..., T, V), (..., T, S)


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if not np.all(np.isfinite(w) & (w >= 0)):
        raise DomainError(f"weights must be finite and >= 0, got a value of "
                          f"{w[~(np.isfinite(w) & (w >= 0))].flat[0]} in shape {s}")
    positive = w > 0
    terms = np.where(positive, w * np.log(np.where(positive, w, 1)), 0)
    return -np.sum(terms, axis=axis)
