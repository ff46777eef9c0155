"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .. import _checks as check
from . import _core
from ._core import boolean, const, floating, integers, size, value_check, zeros


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
        keep = tf.ones(s, dtype=tf.bool)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = tf.broadcast_to(keep, s)
    kept = keep & (x != -np.inf)  # entries that compete
    nan = tf.reduce_any(kept & tf.math.is_nan(x), axis=axis, keepdims=True)
    top = kept & (x == np.inf)
    live = tf.where(tf.reduce_any(top, axis=axis, keepdims=True), top,
                    kept & ~tf.math.is_nan(x))
    x = tf.where(top, zeros(x), x)  # each +inf entry: exp(0) = 1, an equal share
    m = tf.reduce_max(tf.where(live, x, const(-np.inf, x)), axis=axis, keepdims=True)
    m = tf.where(tf.math.is_finite(m), m, zeros(m))
    e = tf.where(live, tf.exp(tf.where(live, x - m, zeros(x))), zeros(x))
    total = tf.reduce_sum(e, axis=axis, keepdims=True)
    y = e / tf.where(total > 0, total, const(1, total))
    return tf.where(nan & kept, const(np.nan, y), y)


def weighted_sum(weights, v):
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :].

    A key of weight 0 (masked) is left out, not multiplied by 0, so a NaN or inf in
    its value cannot reach the output (0 * NaN = NaN). ``v`` has the batch dims of
    ``weights``.
    """
    def selected():
        terms = weights[..., :, :, None] * v[..., None, :, :]  # (..., T, S, V)
        return tf.reduce_sum(tf.where((weights != 0)[..., None], terms, zeros(terms)), axis=-2)

    return tf.cond(tf.reduce_all(tf.math.is_finite(v)), lambda: tf.matmul(weights, v),
                   selected)  # (..., T, V)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing.
    """
    t, s = check.size("t", t), check.size("s", s)
    i = tf.range(t)[:, None]  # (T, 1)
    j = tf.range(s)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def sliding_window_mask(*, t, s, window):
    """mask[i, j] = p - W < j <= p with p = i + (S - T): the causal mask limited to the W
    most recent keys (the query's own position included), bottom-right aligned."""
    t, s, w = check.window_mask_args(t, s, window)
    p = tf.range(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = tf.range(s)[None, :]  # (1, S)
    return (j <= p) & (j > p - w)  # (T, S)


def local_window_mask(*, t, s, left, right):
    """mask[i, j] = p - left <= j <= p + right with p = i + (S - T), bottom-right aligned;
    left or right None: that side unbounded."""
    t, s, left, right = check.local_window_args(t, s, left, right)
    p = tf.range(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = tf.range(s)[None, :]  # (1, S)
    keep = tf.ones((t, s), dtype=tf.bool)  # (T, S)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep


def chunked_mask(*, t, s, chunk, causal=True):
    """mask[i, j] = (j // C == p // C) and (j <= p if causal), p = i + (S - T); tf's // floors."""
    t, s, c, causal = check.chunked_mask_args(t, s, chunk, causal)
    p = tf.range(t)[:, None] + (s - t)  # (T, 1)
    j = tf.range(s)[None, :]  # (1, S)
    keep = tf.equal(tf.math.floordiv(j, c), tf.math.floordiv(p, c))  # (T, S)
    return keep & (j <= p) if causal else keep


def softcap(x, *, cap):
    """y = cap tanh(x / cap): logit soft-capping (Gemma 2), elementwise; cap > 0."""
    x = floating("x", x)
    return _softcap(x, check.eps(cap, "cap"))


def _softcap(x, cap: float):
    c = const(cap, x)
    return c * tf.tanh(x / c)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != tf.cast(pad_id, ids.dtype))[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = check.size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    causal = check.flag("causal", causal)
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s)  # (B, 1, T, S)
    return tf.broadcast_to(keep, (b, h, t, s))  # (B, H, T, S)


def _batched(x, full: tuple):
    """x broadcast over the batch dimensions of ``full`` (keeping its last two)."""
    return tf.broadcast_to(x, full[:-2] + tuple(check.shape(x)[-2:]))


def repeat_kv(q, k, v, num_kv_heads):
    """k, v (..., H_kv, S, .) -> (..., H, S, .), each kv head repeated H / H_kv times."""
    group = check.kv_group(num_kv_heads, q, k, v)
    # one gather each: tf.repeat is ~20 eager ops (~0.5 ms a call, 24 us for the gather)
    heads = np.repeat(np.arange(check.shape(k)[-3], dtype=np.int32), group)  # (H,)
    return (tf.gather(k, heads, axis=len(k.shape) - 3),
            tf.gather(v, heads, axis=len(v.shape) - 3))


def _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """The checked q, v, mask, bias and the scaled, capped, biased scores (..., T, S), with
    the broadcast shape (sdpa and its lse and sink variants)."""
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    c = const(check.scale(scale, check.shape(q)[-1]), q)
    cap = check.softcap(softcap)
    scores = tf.matmul(_batched(q, full), _batched(k, full), transpose_b=True) * c  # (..., T, S)
    if cap is not None:
        scores = _softcap(scores, cap)
    if bias is not None:
        scores = scores + bias
    return q, v, mask, bias, scores, full


def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """weights = softmax(cap(scale * q k^T) + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output. With num_kv_heads (grouped-query
    attention), axis -3 holds the heads and query head h reads kv head h // (H / H_kv).
    With softcap = c, cap(s) = c tanh(s / c), before the bias and the mask (Gemma 2, ONNX).
    """
    q, v, mask, bias, scores, full = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    if mask is None and bias is None:  # finite scores: the fused kernel, nothing to zero
        weights = tf.cond(tf.reduce_all(tf.math.is_finite(scores)),
                          lambda: tf.nn.softmax(scores), lambda: softmax(scores))
    else:
        weights = softmax(tf.broadcast_to(scores, full), mask)  # (..., T, S)
    return weighted_sum(weights, _batched(v, full)), weights  # (..., T, V), (..., T, S)


TIES = ("lower_index", "keep_all")


def topk_attention(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; with fewer than top_k unmasked keys all of them are
    kept. ties="lower_index": equal scores keep the lower key index first (exactly
    top_k kept); "keep_all": every key scoring >= the top_k-th largest is kept.
    A NaN among a row's unmasked scores makes its unmasked weights NaN.
    """
    q, k, v, mask, _, full = check.attention_inputs(_core, q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    ties = check.choice("ties", ties, TIES)
    c = const(check.scale(scale, check.shape(q)[-1]), q)
    scores = tf.matmul(_batched(q, full), _batched(k, full), transpose_b=True) * c  # (..., T, S)
    allowed = tf.ones(full, dtype=tf.bool) if mask is None else tf.broadcast_to(mask, full)
    # a stable sort of -score ranks equal scores by key index; masked keys (and NaN,
    # whose row is NaN below) go last
    key = tf.where(allowed & ~tf.math.is_nan(scores), -scores, const(np.inf, scores))
    order = tf.argsort(key, axis=-1, stable=True)
    rank = tf.argsort(order, axis=-1, stable=True)  # the inverse permutation
    chosen = allowed & (rank < top_k)  # (..., T, S)
    if ties == "keep_all":
        kth = tf.reduce_min(tf.where(chosen, scores, const(np.inf, scores)), axis=-1,
                            keepdims=True)  # (..., T, 1)
        chosen = allowed & (scores >= kth)
    weights = softmax(scores, chosen)  # (..., T, S)
    nan = tf.reduce_any(allowed & tf.math.is_nan(scores), axis=-1, keepdims=True)
    weights = tf.where(nan & allowed, const(np.nan, weights), weights)
    return weighted_sum(weights, _batched(v, full)), weights  # (..., T, V), (..., T, S)


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


# == log-sum-exp output and merging attention states (issue 22) ==========================

def logsumexp(x, keep, axis: int = -1):
    """ln sum_j exp(x_j) over the kept entries (keep and x_j != -inf); none kept -> -inf,
    a kept +inf -> +inf, a kept NaN -> NaN. The maximum m of the finite kept entries is
    subtracted first (and held constant: its gradient cancels); an empty row's log is taken
    of 1, then replaced, so no NaN reaches the gradient."""
    kept = keep & (x != -np.inf)
    nan = tf.reduce_any(kept & tf.math.is_nan(x), axis=axis)
    top = tf.reduce_any(kept & (x == np.inf), axis=axis)
    live = kept & tf.math.is_finite(x)
    m = tf.stop_gradient(tf.reduce_max(tf.where(live, x, const(-np.inf, x)), axis=axis,
                                       keepdims=True))
    m = tf.where(tf.math.is_finite(m), m, zeros(m))
    e = tf.where(live, tf.exp(tf.where(live, x - m, zeros(x))), zeros(x))
    total = tf.reduce_sum(e, axis=axis)
    some = total > 0
    lse = tf.squeeze(m, axis=axis) + tf.math.log(tf.where(some, total, const(1, total)))
    lse = tf.where(some, lse, const(-np.inf, lse))
    lse = tf.where(top, const(np.inf, lse), lse)
    return tf.where(nan, const(np.nan, lse), lse)


def sdpa_lse(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and lse[..., i] = ln sum_j exp(scores[..., i, j]) over the kept keys
    (natural log; -inf for a row with nothing kept, whose output is 0)."""
    q, v, scores, keep, full = _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    output = weighted_sum(softmax(scores, keep), _batched(v, full))  # (..., T, V)
    return output, logsumexp(scores, keep)  # (..., T)


def _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """The checked arrays, the scaled, capped, biased scores and the kept keys, written out
    (sdpa_lse, sdpa_sinks): (q, v, scores (..., T, S), keep (..., T, S), that shape)."""
    q, v, mask, _, scores, full = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    keep = tf.ones(full, dtype=tf.bool) if mask is None else tf.broadcast_to(mask, full)
    return q, v, tf.broadcast_to(scores, full), keep, full


def merge_attention_states(outputs, lses):
    """w = softmax over the parts (axis 0) of lses (a -inf part gets weight 0; all -inf: 0),
    output = sum_n w_n outputs_n over the parts with w_n != 0, lse = ln sum_n exp(lses_n)."""
    o, s = check.attention_states(_core, outputs, lses)  # (N, ..., V), (N, ...)
    w = softmax(s, axis=0)[..., None]  # (N, ..., 1)
    used = tf.broadcast_to(w != 0, check.shape(o))
    terms = w * tf.where(used, o, zeros(o))  # an unused part's NaN never meets its weight 0
    return tf.reduce_sum(terms, axis=0), logsumexp(s, tf.ones_like(s, dtype=tf.bool), axis=0)


# == attention sinks (issue 22 item 4) =====================================================

def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
    """W = exp(S) / (exp(sinks[h]) + sum_kept exp(S)) per head h (axis -3), output = W v:
    the softmax over the scores with the sink column appended (gpt-oss), then dropped. The
    sink is neither scaled, capped nor biased; a fully masked row gives zeros."""
    q, v, scores, keep, full = _kept_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    sinks = check.sinks_of(_core, sinks, full, q)  # (..., H, T, S) scores
    column = tf.broadcast_to(sinks[:, None, None], full[:-1] + (1,))  # (..., H, T, 1)
    kept = tf.concat([keep, tf.ones(full[:-1] + (1,), dtype=tf.bool)], axis=-1)
    weights = softmax(tf.concat([scores, column], axis=-1), kept)[..., :-1]  # (..., H, T, S)
    return weighted_sum(weights, _batched(v, full)), weights


# == paged KV cache (issue 22 item 3) ======================================================
# The tables are tensors (symbolic under tf.function): the gather index, the mask and the
# value checks are TensorFlow ops; a failed check raises the message NumPy's plan gives.

def _paged_values(block_table, seq_lens, kc: tuple, extra: int, writes=None):
    """DomainError (through value_check) unless every length and every entry read or written
    is in range and, with writes (B*T,), no slot is written twice. Returns the tables int64."""
    table, lens = tf.cast(block_table, tf.int64), tf.cast(seq_lens, tf.int64)
    m = check.shape(block_table)[1]
    page = kc[1]
    needed = tf.range(m, dtype=tf.int64)[None, :] < (lens[:, None] + extra + page - 1) // page
    ok = tf.reduce_all((lens >= 0) & (lens <= m * page - extra)) & tf.reduce_all(
        ~needed | ((table >= 0) & (table < kc[0])))
    if writes is not None:
        n_w = check.shape(writes)[0]
        same = tf.equal(writes[:, None], writes[None, :]) & ~tf.eye(n_w, dtype=tf.bool)
        ok = ok & ~tf.reduce_any(same)

    def message(t, lens_):
        w = None if writes is None else check._write_slots(t.astype(np.int64),
                                                            lens_.astype(np.int64), extra, page)
        return check.paged_problem(t.astype(np.int64), lens_.astype(np.int64), kc, extra, w)

    value_check(ok, message, block_table, seq_lens)
    return table, lens


def _paged_kv(cache, index):
    """cache (N, P, H_kv, D) read at flat slots index (B, S) -> (B, H_kv, S, D)."""
    s = check.shape(cache)
    flat = tf.reshape(cache, (s[0] * s[1],) + s[2:])  # (N*P, H_kv, D)
    return tf.transpose(tf.gather(flat, index), (0, 2, 1, 3))


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
    """sdpa of q (B, T, H, K) over the keys and values of each sequence gathered through its
    block table (key j of sequence b at block_table[b, j // P], offset j % P, j < seq_lens[b]);
    causal: query t sits at position seq_lens[b] - T + t. Output (B, T, H, V)."""
    q, kc, vc, causal = check.paged_attention_arrays(_core, q, k_cache, v_cache, block_table,
                                                     seq_lens, causal)
    b, t = check.shape(q)[:2]
    n, page, h_kv = check.shape(kc)[:3]
    table, lens = _paged_values(block_table, seq_lens, check.shape(kc), 0)
    j = tf.range(check.shape(block_table)[1] * page, dtype=tf.int64)  # (S,)
    used = j[None, :] < lens[:, None]  # (B, S)
    blocks = tf.clip_by_value(tf.gather(table, j // page, axis=1), 0, n - 1)  # (B, S)
    index = tf.where(used, blocks * page + j % page, tf.zeros_like(blocks))
    keep = tf.broadcast_to(used[:, None, :], (b, t, check.shape(j)[0]))  # (B, T, S)
    if causal:
        last = lens[:, None, None] - t + tf.range(t, dtype=tf.int64)[None, :, None]
        keep = keep & (j[None, None, :] <= last)
    out, _ = sdpa(tf.transpose(q, (0, 2, 1, 3)), _paged_kv(kc, index), _paged_kv(vc, index),
                  keep[:, None], scale=scale, num_kv_heads=h_kv)  # (B, H, T, V)
    return tf.transpose(out, (0, 2, 1, 3))


def _written(cache, index, new):
    """A copy of cache (N, P, H_kv, D) with flat slots index (B*T,) set to new (B, T, H_kv, D)."""
    s, n = check.shape(cache), check.shape(new)
    flat = tf.reshape(cache, (s[0] * s[1],) + s[2:])  # (N*P, H_kv, D)
    flat = tf.tensor_scatter_nd_update(flat, index[:, None], tf.reshape(new, (-1,) + n[2:]))
    return tf.reshape(flat, s)


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """The caches with k, v (B, T, H_kv, .) written at positions seq_lens[b] .. + T - 1 through
    the block table, and seq_lens + T; the inputs are not modified."""
    kc, vc, k, v = check.paged_append_arrays(_core, k_cache, v_cache, block_table, seq_lens, k, v)
    n, page = check.shape(kc)[:2]
    t, m = check.shape(k)[1], check.shape(block_table)[1]
    table, lens = tf.cast(block_table, tf.int64), tf.cast(seq_lens, tf.int64)
    pos = lens[:, None] + tf.range(t, dtype=tf.int64)[None, :]  # (B, T)
    col = tf.clip_by_value(pos // page, 0, max(m - 1, 0))
    blocks = tf.clip_by_value(tf.gather(table, col, batch_dims=1), 0, n - 1)
    index = tf.reshape(blocks * page + pos % page, (-1,))  # (B*T,)
    raw = tf.reshape(tf.gather(table, col, batch_dims=1) * page + pos % page, (-1,))
    _paged_values(block_table, seq_lens, check.shape(kc), t, raw)
    seq_lens = tf.convert_to_tensor(seq_lens)
    new_lens = seq_lens + tf.cast(t, seq_lens.dtype)
    return _written(kc, index, k), _written(vc, index, v), new_lens


# sdpa over a packed batch of variable-length sequences: the shared composite over this sdpa.
from ..composite.varlen import Varlen  # noqa: E402

(sdpa_varlen,) = Varlen.bind(__package__, "sdpa_varlen")


# == float8 inputs with descales (issue 22 item 6) =========================================

def fp8_grid(x, fp8_format):
    """x cast to TensorFlow's float8 of the format (tf.dtypes.experimental) and back."""
    f8 = {"e4m3fn": tf.dtypes.experimental.float8_e4m3fn,
          "e5m2": tf.dtypes.experimental.float8_e5m2}[fp8_format]
    return tf.cast(tf.cast(tf.stop_gradient(x), f8), x.dtype)


# sdpa on float8 inputs: the shared composite over this sdpa. TensorFlow has float8 dtypes
# but no CPU float8 matmul: the inputs are checked through them and dequantised explicitly
# (x * descale in the computation dtype), then this sdpa.
from ..composite.fp8 import Fp8  # noqa: E402

(sdpa_fp8,) = Fp8.bind(__package__, "sdpa_fp8")
