"""Attention core in ``mlx.core``, ported from backends/numpy/attention.py: softmax, masks,
scaled dot-product attention (with grouped kv heads, soft-capping, log-sum-exp), attention
entropy."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import _core
from ._core import boolean, floating, integers

INF, NAN = math.inf, math.nan


def _max(x, axis):
    """max over axis, kept; -inf over an empty axis."""
    if x.shape[axis] == 0:
        shape = list(x.shape)
        shape[axis] = 1
        return mx.full(shape, -INF, dtype=x.dtype)
    return mx.max(x, axis=axis, keepdims=True)


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) and -inf get weight 0; a slice with nothing kept is all 0.
    Kept +inf entries share the slice equally (the limit); a kept NaN makes every kept
    weight of its slice NaN.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        keep = mx.ones(s, dtype=mx.bool_)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = mx.broadcast_to(keep, s)
    kept = keep & (x != -INF)  # entries that compete
    nan = mx.any(kept & mx.isnan(x), axis=axis, keepdims=True)
    top = kept & (x == INF)
    live = mx.where(mx.any(top, axis=axis, keepdims=True), top, kept & ~mx.isnan(x))
    x = mx.where(top, 0, x)  # each +inf entry: exp(0) = 1, an equal share
    m = _max(mx.where(live, x, -INF), axis)
    m = mx.where(mx.isfinite(m), m, 0)
    e = mx.where(live, mx.exp(mx.where(live, x - m, 0)), 0)
    total = mx.sum(e, axis=axis, keepdims=True)
    y = e / mx.where(total > 0, total, 1)
    return mx.where(nan & kept, NAN, y).astype(x.dtype)


def weighted_sum(weights, v):
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :].

    A key of weight 0 (masked) is left out, not multiplied by 0, so a NaN or inf in
    its value cannot reach the output (0 * NaN = NaN).
    """
    if mx.all(mx.isfinite(v)).item():
        return weights @ v  # (..., T, V)
    terms = weights[..., :, :, None] * v[..., None, :, :]  # (..., T, S, V)
    return mx.sum(mx.where((weights != 0)[..., None], terms, 0), axis=-2)  # (..., T, V)


def _positions(t, s):
    return mx.arange(t)[:, None] + (s - t), mx.arange(s)[None, :]  # (T, 1), (1, S)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache."""
    t, s = check.size("t", t), check.size("s", s)
    p, j = _positions(t, s)
    return mx.broadcast_to(j <= p, (t, s))  # (T, S)


def sliding_window_mask(*, t, s, window):
    """mask[i, j] = p - W < j <= p with p = i + (S - T)."""
    t, s, w = check.window_mask_args(t, s, window)
    p, j = _positions(t, s)
    return mx.broadcast_to((j <= p) & (j > p - w), (t, s))  # (T, S)


def local_window_mask(*, t, s, left, right):
    """mask[i, j] = p - left <= j <= p + right with p = i + (S - T); None: unbounded."""
    t, s, left, right = check.local_window_args(t, s, left, right)
    p, j = _positions(t, s)
    keep = mx.ones((t, s), dtype=mx.bool_)  # (T, S)
    if left is not None:
        keep = keep & (j >= p - left)
    if right is not None:
        keep = keep & (j <= p + right)
    return keep


def chunked_mask(*, t, s, chunk, causal=True):
    """mask[i, j] = (j // C == p // C) and (j <= p if causal), p = i + (S - T)."""
    t, s, c, causal = check.chunked_mask_args(t, s, chunk, causal)
    p, j = _positions(t, s)
    keep = mx.floor_divide(j, c) == mx.floor_divide(p, c)  # (T, S)
    return keep & (j <= p) if causal else keep


def softcap(x, *, cap):
    """y = cap tanh(x / cap), elementwise; cap > 0."""
    x = floating("x", x)
    return _softcap(x, check.eps(cap, "cap"))


def _softcap(x, cap: float):
    return cap * mx.tanh(x / cap)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j]."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = check.size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    causal = check.flag("causal", causal)
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s)  # (B, 1, T, S)
    return mx.broadcast_to(keep, (b, h, t, s))  # (B, H, T, S)


def repeat_kv(q, k, v, num_kv_heads):
    """k, v (..., H_kv, S, .) -> (..., H, S, .), each kv head repeated H / H_kv times."""
    group = check.kv_group(num_kv_heads, q, k, v)
    return mx.repeat(k, group, axis=-3), mx.repeat(v, group, axis=-3)


def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """weights = softmax(cap(scale * q k^T) + bias, masked), output = weights v."""
    v, scores, mask, _ = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    weights = softmax(scores, mask)  # (..., T, S)
    return weighted_sum(weights, v), weights  # (..., T, V), (..., T, S)


def _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """(v, scores (..., T, S), mask, the broadcast batch shape (..., T, S))."""
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    c = check.scale(scale, q.shape[-1])
    cap = check.softcap(softcap)
    scores = (q @ mx.swapaxes(k, -1, -2)) * c  # (..., T, S)
    if cap is not None:
        scores = _softcap(scores, cap)
    if bias is not None:
        scores = scores + bias
    return v, mx.broadcast_to(scores, full), mask, full


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    ok = mx.isfinite(w) & (w >= 0)
    if not mx.all(ok).item():
        bad = np.array(w.astype(mx.float32))[~np.array(ok)].flat[0]
        raise DomainError(f"weights must be finite and >= 0, got a value of {bad} in shape {s}")
    positive = w > 0
    terms = mx.where(positive, w * mx.log(mx.where(positive, w, 1)), 0)
    return -mx.sum(terms, axis=axis)


def logsumexp(x, keep, axis: int = -1):
    """ln sum_j exp(x_j) over the kept entries; none kept -> -inf, a kept +inf -> +inf, a kept
    NaN -> NaN; the maximum m of the finite kept entries subtracted first."""
    kept = keep & (x != -INF)
    nan = mx.any(kept & mx.isnan(x), axis=axis)
    top = mx.any(kept & (x == INF), axis=axis)
    live = kept & mx.isfinite(x)
    m = _max(mx.where(live, x, -INF), axis)
    m = mx.where(mx.isfinite(m), m, 0)
    total = mx.sum(mx.where(live, mx.exp(mx.where(live, x - m, 0)), 0), axis=axis)
    some = total > 0  # log 0 = -inf where nothing is kept (guarded: its gradient is 0, not NaN)
    lse = mx.where(some, mx.squeeze(m, axis=axis) + mx.log(mx.where(some, total, 1)), -INF)
    lse = mx.where(top, INF, lse)
    return mx.where(nan, NAN, lse).astype(x.dtype)


def sdpa_lse(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and lse[..., i] = ln sum_j exp(scores[..., i, j]) over the kept keys."""
    v, scores, mask, full = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    keep = mx.ones(full, dtype=mx.bool_) if mask is None else mx.broadcast_to(mask, full)
    weights = softmax(scores, keep)  # (..., T, S)
    return weighted_sum(weights, v), logsumexp(scores, keep)  # (..., T, V), (..., T)


# == top-k attention ========================================================================

TIES = ("lower_index", "keep_all")


def topk_attention(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere; only
    unmasked keys compete; ties "lower_index" (exactly top_k kept) or "keep_all"; a NaN among
    a row's unmasked scores makes its unmasked weights NaN."""
    q, k, v, mask, _, full = check.attention_inputs(_core, q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    ties = check.choice("ties", ties, TIES)
    c = check.scale(scale, q.shape[-1])
    scores = mx.broadcast_to((q @ mx.swapaxes(k, -1, -2)) * c, full)  # (..., T, S)
    allowed = mx.ones(full, dtype=mx.bool_) if mask is None else mx.broadcast_to(mask, full)
    chosen = mx.array(_chosen(np.array(mx.stop_gradient(scores).astype(mx.float32)),
                              np.array(allowed), top_k, ties))
    weights = softmax(scores, chosen)  # (..., T, S)
    nan = mx.any(allowed & mx.isnan(scores), axis=-1, keepdims=True)
    weights = mx.where(nan & allowed, NAN, weights).astype(q.dtype)
    return weighted_sum(weights, v), weights  # (..., T, V), (..., T, S)


def _chosen(scores, allowed, top_k: int, ties: str):
    """The kept keys (a selection, not differentiated: ranked on the host, as NumPy does)."""
    order = np.argsort(np.where(allowed, -scores, np.inf), axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(scores.shape[-1]), axis=-1)
    chosen = allowed & (rank < top_k)  # (..., T, S)
    if ties == "keep_all":
        kth = np.min(np.where(chosen, scores, np.inf), axis=-1, keepdims=True)  # (..., T, 1)
        chosen = allowed & (scores >= kth)
    return chosen


# == merging attention states, attention sinks ==============================================

def merge_attention_states(outputs, lses):
    """w = softmax over the parts (axis 0) of lses, output = sum_n w_n outputs_n over the parts
    with w_n != 0, lse = ln sum_n exp(lses_n)."""
    o, s = check.attention_states(_core, outputs, lses)  # (N, ..., V), (N, ...)
    w = softmax(s, axis=0)[..., None]  # (N, ..., 1)
    terms = mx.where(w != 0, w * o, 0)
    return mx.sum(terms, axis=0).astype(o.dtype), logsumexp(s, mx.array(True), axis=0)


def _sink_weights(scores, keep, sinks):
    """softmax over [kept scores..., sink_h] with the sink column: (..., H, T, S + 1)."""
    column = mx.broadcast_to(sinks[:, None, None], tuple(scores.shape[:-1]) + (1,))  # (..., H, T, 1)
    x = mx.concatenate([scores, column.astype(scores.dtype)], axis=-1)  # (..., H, T, S + 1)
    kept = mx.concatenate([keep, mx.ones(column.shape, dtype=mx.bool_)], axis=-1)
    return softmax(x, kept)


def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
    """W = exp(S) / (exp(sinks[h]) + sum_kept exp(S)) per head h (axis -3), output = W v."""
    v, scores, mask, full = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    keep = mx.ones(full, dtype=mx.bool_) if mask is None else mx.broadcast_to(mask, full)
    sinks = check.sinks_of(_core, sinks, tuple(scores.shape), q)
    weights = _sink_weights(scores, keep, sinks)[..., :-1]  # (..., H, T, S)
    return weighted_sum(weights, v), weights  # (..., H, T, V), (..., H, T, S)


# == paged KV cache =========================================================================

def _paged_kv(cache, index):
    """cache (N, P, H_kv, D) read at flat slots index (B, S) -> (B, H_kv, S, D)."""
    flat = cache.reshape((-1,) + tuple(cache.shape[2:]))  # (N*P, H_kv, D)
    return mx.swapaxes(mx.take(flat, mx.array(index), axis=0), 1, 2)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
    """sdpa of q (B, T, H, K) over each sequence's keys and values gathered through its block
    table; causal: query t sits at position seq_lens[b] - T + t. Output (B, T, H, V)."""
    q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                        seq_lens, causal)
    out, _ = sdpa(mx.swapaxes(q, 1, 2), _paged_kv(kc, index), _paged_kv(vc, index),
                  mx.array(np.asarray(keep)[:, None]), scale=scale, num_kv_heads=kc.shape[2])
    return mx.swapaxes(out, 1, 2)  # (B, T, H, V)


def _written(cache, index, new):
    """A copy of cache (N, P, H_kv, D) with flat slots index (B*T,) set to new (B, T, H_kv, D)."""
    flat = mx.array(cache.reshape((-1,) + tuple(cache.shape[2:])))  # (N*P, H_kv, D)
    flat[mx.array(np.asarray(index))] = new.reshape((-1,) + tuple(new.shape[2:]))
    return flat.reshape(cache.shape)


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """The caches with k, v (B, T, H_kv, .) written at positions seq_lens[b] .. + T - 1
    through the block table, and seq_lens + T; the inputs are not modified."""
    kc, vc, k, v, index, lens = check.paged_append_plan(_core, k_cache, v_cache, block_table,
                                                        seq_lens, k, v)
    return _written(kc, index, k), _written(vc, index, v), mx.array(np.asarray(lens)).astype(mx.int64)


# sdpa over a packed batch of variable-length sequences: the shared composite over this sdpa.
from ..composite.varlen import Varlen  # noqa: E402

(sdpa_varlen,) = Varlen.bind(__package__, "sdpa_varlen")


def fp8_grid(x, fp8_format):
    """x through ml_dtypes' float8 of the format and back, on the host (MLX has no float8
    dtype): equal to x where x is a value of the format."""
    import ml_dtypes

    f8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fp8_format]
    a = np.array(x.astype(mx.float32))
    with np.errstate(invalid="ignore", over="ignore"):
        return mx.array(a.astype(f8).astype(np.float32)).astype(x.dtype)


# sdpa on float8 inputs: the shared composite over this sdpa (dequantised explicitly).
from ..composite.fp8 import Fp8  # noqa: E402

(sdpa_fp8,) = Fp8.bind(__package__, "sdpa_fp8")
