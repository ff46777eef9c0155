"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import _core
from ._core import boolean, floating, integers


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
        keep = np.ones(s, dtype=bool)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = np.broadcast_to(keep, s)
    kept = keep & (x != -np.inf)  # entries that compete
    nan = np.any(kept & np.isnan(x), axis=axis, keepdims=True)
    top = kept & (x == np.inf)
    live = np.where(np.any(top, axis=axis, keepdims=True), top, kept & ~np.isnan(x))
    x = np.where(top, 0, x)  # each +inf entry: exp(0) = 1, an equal share
    m = np.max(np.where(live, x, -np.inf), axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(live, np.exp(np.where(live, x - m, 0)), 0)
    total = np.sum(e, axis=axis, keepdims=True)
    y = e / np.where(total > 0, total, 1)
    return np.where(nan & kept, x.dtype.type(np.nan), y)


def weighted_sum(weights, v):
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :].

    A key of weight 0 (masked) is left out, not multiplied by 0, so a NaN or inf in
    its value cannot reach the output (0 * NaN = NaN).
    """
    if np.all(np.isfinite(v)):
        return weights @ v  # (..., T, V)
    with np.errstate(invalid="ignore"):
        terms = weights[..., :, :, None] * v[..., None, :, :]  # (..., T, S, V)
    return np.sum(np.where((weights != 0)[..., None], terms, 0), axis=-2)  # (..., T, V)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing.
    """
    t, s = check.size("t", t), check.size("s", s)
    i = np.arange(t)[:, None]  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def sliding_window_mask(*, t, s, window):
    """mask[i, j] = p - W < j <= p with p = i + (S - T): the causal mask limited to the W
    most recent keys (the query's own position included), bottom-right aligned."""
    t, s, w = check.window_mask_args(t, s, window)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = np.arange(s)[None, :]  # (1, S)
    return (j <= p) & (j > p - w)  # (T, S)


def local_window_mask(*, t, s, left, right):
    """mask[i, j] = p - left <= j <= p + right with p = i + (S - T), bottom-right aligned;
    left or right None: that side unbounded (flash-attn's window_size=(left, right))."""
    t, s, left, right = check.local_window_args(t, s, left, right)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = np.arange(s)[None, :]  # (1, S)
    keep = np.ones((t, s), dtype=bool)  # (T, S)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep


def chunked_mask(*, t, s, chunk, causal=True):
    """mask[i, j] = (j // C == p // C) and (j <= p if causal), p = i + (S - T): attention
    within fixed chunks of C positions (Llama 4's local layers), floor division."""
    t, s, c, causal = check.chunked_mask_args(t, s, chunk, causal)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    keep = (j // c) == (p // c)  # (T, S)
    return keep & (j <= p) if causal else keep


def softcap(x, *, cap):
    """y = cap tanh(x / cap): logit soft-capping (Gemma 2), elementwise; cap > 0."""
    x = floating("x", x)
    return _softcap(x, check.eps(cap, "cap"))


def _softcap(x, cap: float):
    c = x.dtype.type(cap)
    return c * np.tanh(x / c)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = check.size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    causal = check.flag("causal", causal)
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s)  # (B, 1, T, S)
    return np.broadcast_to(keep, (b, h, t, s)).copy()  # (B, H, T, S)


def repeat_kv(q, k, v, num_kv_heads):
    """k, v (..., H_kv, S, .) -> (..., H, S, .), each kv head repeated H / H_kv times."""
    group = check.kv_group(num_kv_heads, q, k, v)
    return np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)


def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """weights = softmax(cap(scale * q k^T) + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output. With num_kv_heads (grouped-query
    attention), axis -3 holds the heads and query head h reads kv head h // (H / H_kv).
    With softcap = c, cap(s) = c tanh(s / c), before the bias and the mask (Gemma 2, ONNX).
    """
    v, scores, mask, _ = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    weights = softmax(scores, mask)  # (..., T, S)
    return weighted_sum(weights, v), weights  # (..., T, V), (..., T, S)


def _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """The checked arrays and the scaled, capped, biased scores of sdpa and its variants:
    (v, scores (..., T, S), mask, the broadcast batch shape (..., T, S))."""
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    c = q.dtype.type(check.scale(scale, q.shape[-1]))
    cap = check.softcap(softcap)
    scores = (q @ np.swapaxes(k, -1, -2)) * c  # (..., T, S)
    if cap is not None:
        scores = _softcap(scores, cap)
    if bias is not None:
        scores = scores + bias
    return v, np.broadcast_to(scores, full), mask, full


TIES = ("lower_index", "keep_all")


def topk_attention(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; with fewer than top_k unmasked keys all of them are
    kept. ties="lower_index": equal scores keep the lower key index first (exactly
    top_k kept); "keep_all": every key scoring >= the top_k-th largest is kept.
    A NaN among a row's unmasked scores makes its unmasked weights NaN.
    """
    q, k, v, mask, scores, allowed, chosen = _topk(q, k, v, mask, top_k, scale, ties)
    weights = softmax(scores, chosen)  # (..., T, S)
    nan = np.any(allowed & np.isnan(scores), axis=-1, keepdims=True)
    weights = np.where(nan & allowed, q.dtype.type(np.nan), weights)
    return weighted_sum(weights, v), weights  # (..., T, V), (..., T, S)


def _topk(q, k, v, mask, top_k, scale, ties):
    """The checked inputs, the scores (..., T, S), the unmasked keys and the kept keys."""
    q, k, v, mask, _, full = check.attention_inputs(_core, q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    ties = check.choice("ties", ties, TIES)
    c = q.dtype.type(check.scale(scale, q.shape[-1]))
    scores = np.broadcast_to((q @ np.swapaxes(k, -1, -2)) * c, full)  # (..., T, S)
    allowed = np.ones(full, dtype=bool) if mask is None else np.broadcast_to(mask, full)
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = np.argsort(np.where(allowed, -scores, np.inf), axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(full[-1]), axis=-1)
    chosen = allowed & (rank < top_k)  # (..., T, S)
    if ties == "keep_all":
        kth = np.min(np.where(chosen, scores, np.inf), axis=-1, keepdims=True)  # (..., T, 1)
        chosen = allowed & (scores >= kth)
    return q, k, v, mask, scores, allowed, chosen


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


# -- backward (vector-Jacobian products): dy in, gradients out ------------------------------

def _unbroadcast(g, shape):
    """The gradient of an input of ``shape`` that broadcast to g.shape: summed over the
    axes it was broadcast along."""
    g = np.sum(g, axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return np.sum(g, axis=ones, keepdims=True) if ones else g


def softmax_backward(y, dy, axis=-1):
    """dx_i = y_i (dy_i - sum_j dy_j y_j): the Jacobian diag(y) - y y^T applied to dy."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


# dx = y * (dy - sum(dy * y))   along the softmax axis; masked entries (y = 0) get 0
def softmax_vjp(cotangents, x, mask=None, *, axis=-1):
    y = softmax(x, mask, axis=axis)
    return {"x": softmax_backward(y, np.asarray(cotangents["y"], dtype=y.dtype), axis)}, {}


# s = c q k^T, S = C tanh(s / C) + bias (no softcap: S = s + bias), W = softmax(S), O = W v;
# with cotangents dO (and dW):
#   dW' = dO v^T + dW,  dS = W * (dW' - rowsum(dW' * W)),  ds = dS * (1 - tanh^2(s / C)),
#   dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS   (each summed to its input's shape)
# With num_kv_heads, k and v are repeated over each group of H / H_kv query heads, so dk and
# dv of a kv head are the sums over its group.
def sdpa_vjp(cotangents, q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None,
             softcap=None):
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)                       # (..., H, S, .)
    output, w = sdpa(q, k, v, mask, bias, scale=scale, softcap=softcap)  # (..., T, V), (..., T, S)
    dO = np.broadcast_to(np.asarray(cotangents["output"], dtype=w.dtype), output.shape)
    dW = dO @ np.swapaxes(v, -1, -2)                                   # (..., T, S)
    if "weights" in cotangents:
        dW = dW + np.asarray(cotangents["weights"], dtype=w.dtype)
    dS = softmax_backward(w, dW)                                       # (..., T, S)
    return _scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias, scale, softcap, num_kv_heads), {}


# From dS (the gradient of the capped, biased scores) and dO to the input gradients, shared
# by sdpa, sdpa_lse and sdpa_sinks (k, v repeated under GQA; kv_in the given ones):
#   ds = dS * (1 - tanh^2(s / C)),  dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS
def _scores_backward(dS, w, dO, q, k, v, kv_in, bias, scale, softcap, num_kv_heads) -> dict:
    c = w.dtype.type(check.scale(scale, q.shape[-1]))
    ds = dS
    if softcap is not None:
        cap = w.dtype.type(check.softcap(softcap))
        ds = dS * (1 - np.tanh((q @ np.swapaxes(k, -1, -2)) * c / cap) ** 2)
    grads = {"q": _unbroadcast(c * (ds @ k), q.shape),                 # (..., T, K)
             "k": _unbroadcast(c * (np.swapaxes(ds, -1, -2) @ q), k.shape),  # (..., S, K)
             "v": _unbroadcast(np.swapaxes(w, -1, -2) @ dO, v.shape)}  # (..., S, V)
    if num_kv_heads is not None:
        for name, x in zip(("k", "v"), kv_in):  # (..., H, S, .) -> (..., H_kv, S, .)
            g = grads[name]
            kv = np.shape(x)[-3]
            grads[name] = g.reshape(g.shape[:-3] + (kv, g.shape[-3] // kv) + g.shape[-2:]).sum(-3)
    if bias is not None:
        grads["bias"] = _unbroadcast(dS, np.shape(bias))
    return grads


# The kept set is held fixed at the forward pass's choice (the selection and its ties are
# not differentiated): within it this is sdpa's backward pass with the kept set as the mask.
def topk_attention_vjp(cotangents, q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    q, k, v, _, _, _, chosen = _topk(q, k, v, mask, top_k, scale, ties)
    return sdpa_vjp(cotangents, q, k, v, chosen, scale=scale)


# == grad2: softcap, attention_entropy backward =============================================

# y = cap tanh(x / cap):  dx = dy (1 - tanh^2(x / cap))
def softcap_vjp(cotangents, x, *, cap):
    x = floating("x", x)
    c = x.dtype.type(check.eps(cap, "cap"))
    t = np.tanh(x / c)
    return {"x": np.asarray(cotangents["y"], dtype=x.dtype) * (1 - t * t)}, {}


# H = -sum_j w_j ln w_j:  dw_j = -dH (ln w_j + 1) where w_j > 0, and 0 where w_j = 0
# (0 ln 0 = 0; the where-guarded entropy of torch and TensorFlow gives 0 there too)
def attention_entropy_vjp(cotangents, weights, *, axis=-1):
    attention_entropy(weights, axis=axis)                             # the checks, once
    w = np.asarray(weights)
    dh = np.expand_dims(np.asarray(cotangents["entropy"], dtype=w.dtype), axis)
    positive = w > 0
    return {"weights": np.where(positive, -dh * (np.log(np.where(positive, w, 1)) + 1),
                                w.dtype.type(0))}, {}


# == log-sum-exp output and merging attention states (issue 22) ==========================

def logsumexp(x, keep, axis: int = -1):
    """ln sum_j exp(x_j) over the kept entries (keep and x_j != -inf); none kept -> -inf,
    a kept +inf -> +inf, a kept NaN -> NaN. The maximum m of the finite kept entries is
    subtracted first: m + ln sum_j exp(x_j - m)."""
    kept = keep & (x != -np.inf)
    nan = np.any(kept & np.isnan(x), axis=axis)
    top = np.any(kept & (x == np.inf), axis=axis)
    live = kept & np.isfinite(x)
    m = np.max(np.where(live, x, -np.inf), axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    total = np.sum(np.where(live, np.exp(np.where(live, x - m, 0)), 0), axis=axis)
    with np.errstate(divide="ignore"):
        lse = np.squeeze(m, axis=axis) + np.log(total)  # log 0 = -inf: nothing kept
    lse = np.where(top, x.dtype.type(np.inf), lse)
    return np.where(nan, x.dtype.type(np.nan), lse).astype(x.dtype)


def _lse_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """sdpa's checked arrays: (v, scores (..., T, S), keep (..., T, S))."""
    v, scores, mask, full = _scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    keep = np.ones(full, dtype=bool) if mask is None else np.broadcast_to(mask, full)
    return v, scores, keep


def sdpa_lse(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and lse[..., i] = ln sum_j exp(scores[..., i, j]) over the kept keys
    (natural log; -inf for a row with nothing kept, whose output is 0)."""
    v, scores, keep = _lse_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    weights = softmax(scores, keep)  # (..., T, S)
    return weighted_sum(weights, v), logsumexp(scores, keep)  # (..., T, V), (..., T)


def merge_attention_states(outputs, lses):
    """w = softmax over the parts (axis 0) of lses (a -inf part gets weight 0; all -inf: 0),
    output = sum_n w_n outputs_n over the parts with w_n != 0, lse = ln sum_n exp(lses_n)."""
    o, s = check.attention_states(_core, outputs, lses)  # (N, ..., V), (N, ...)
    w = softmax(s, axis=0)[..., None]  # (N, ..., 1)
    with np.errstate(invalid="ignore"):
        terms = np.where(w != 0, w * o, 0)
    return np.sum(terms, axis=0), logsumexp(s, True, axis=0)  # (..., V), (...)


# W = softmax(S) over the kept keys, O = W v, lse = ln sum_j exp(S_j), so d lse / dS = W:
#   dS = W * (dO v^T - rowsum(dO v^T * W)) + W dlse,  ds = dS * (1 - tanh^2(s / C)),
#   dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS   (each summed to its input's shape)
def sdpa_lse_vjp(cotangents, q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None,
                 softcap=None):
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)                       # (..., H, S, .)
    output, w = sdpa(q, k, v, mask, bias, scale=scale, softcap=softcap)  # (..., T, V), (..., T, S)
    dO = np.broadcast_to(np.asarray(cotangents.get("output", 0), dtype=w.dtype), output.shape)
    dlse = np.broadcast_to(np.asarray(cotangents.get("lse", 0), dtype=w.dtype), w.shape[:-1])
    dS = softmax_backward(w, dO @ np.swapaxes(v, -1, -2)) + w * dlse[..., None]  # (..., T, S)
    return _scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias, scale, softcap, num_kv_heads), {}


# w = softmax_n(lses), O = sum_n w_n o_n, L = ln sum_n exp(lses_n):
#   doutputs_n = w_n dO,  dlses_n = w_n (dO . (o_n - O) + dL)   (0 for a part of weight 0)
def merge_attention_states_vjp(cotangents, outputs, lses):
    merged, _ = merge_attention_states(outputs, lses)                # (..., V)
    o, s = np.asarray(outputs), np.asarray(lses)
    w = softmax(s, axis=0)                                           # (N, ...)
    dO = np.broadcast_to(np.asarray(cotangents.get("output", 0), dtype=o.dtype), merged.shape)
    dL = np.broadcast_to(np.asarray(cotangents.get("lse", 0), dtype=o.dtype), s.shape[1:])
    used = w != 0
    with np.errstate(invalid="ignore"):
        dot = np.sum(dO * np.where(used[..., None], o - merged, 0), axis=-1)  # (N, ...)
    return {"outputs": w[..., None] * dO, "lses": np.where(used, w * (dot + dL), 0)}, {}


# == attention sinks (issue 22 item 4) =====================================================

def _sink_weights(scores, keep, sinks):
    """softmax over [kept scores..., sink_h] with the sink column dropped: (..., H, T, S)."""
    column = np.broadcast_to(sinks[:, None, None], scores.shape[:-1] + (1,))  # (..., H, T, 1)
    x = np.concatenate([scores, column.astype(scores.dtype)], axis=-1)  # (..., H, T, S + 1)
    kept = np.concatenate([keep, np.ones(column.shape, dtype=bool)], axis=-1)
    return softmax(x, kept)  # (..., H, T, S + 1)


def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
    """W = exp(S) / (exp(sinks[h]) + sum_kept exp(S)) per head h (axis -3), output = W v.

    S are sdpa's scores; the sink is a logit with no value, neither scaled, capped nor
    biased (gpt-oss). A fully masked row gives zero weights and a zero output."""
    v, scores, keep = _lse_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    sinks = check.sinks_of(_core, sinks, scores.shape, q)
    weights = _sink_weights(scores, keep, sinks)[..., :-1]  # (..., H, T, S)
    return weighted_sum(weights, v), weights  # (..., H, T, V), (..., H, T, S)


# P = softmax([S, sink]), W = P[..., :S], p = P[..., S]; g = dO v^T + dW:
#   dS = W * (g - rowsum(g * W)),  dsink_h = -sum over every row of head h of p * rowsum(g * W)
# then sdpa's backward from dS (tanh' of the cap, scale, GQA group sums, dbias = dS).
def sdpa_sinks_vjp(cotangents, q, k, v, sinks, mask=None, bias=None, *, scale=None,
                   num_kv_heads=None, softcap=None):
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = repeat_kv(q, k, v, num_kv_heads)                       # (..., H, S, .)
    v, scores, keep = _lse_scores(q, k, v, mask, bias, scale, None, softcap)
    sinks = check.sinks_of(_core, sinks, scores.shape, q)
    p_all = _sink_weights(scores, keep, sinks)
    w, p = p_all[..., :-1], p_all[..., -1]                           # (..., H, T, S), (..., H, T)
    dO = np.broadcast_to(np.asarray(cotangents["output"], dtype=w.dtype), w.shape[:-1] + v.shape[-1:])
    g = dO @ np.swapaxes(v, -1, -2)                                   # (..., H, T, S)
    if "weights" in cotangents:
        g = g + np.asarray(cotangents["weights"], dtype=w.dtype)
    gw = np.sum(g * w, axis=-1)                                       # (..., H, T)
    dS = w * (g - gw[..., None])
    grads = _scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias, scale, softcap, num_kv_heads)
    dp = -p * gw                                                      # (..., H, T)
    grads["sinks"] = np.sum(dp.reshape(-1, *dp.shape[-2:]), axis=(0, 2))  # (H,)
    return grads, {}


# == paged KV cache (issue 22 item 3) ======================================================

def _paged_kv(cache, index):
    """cache (N, P, H_kv, D) read at flat slots index (B, S) -> (B, H_kv, S, D)."""
    flat = cache.reshape((-1,) + cache.shape[2:])  # (N*P, H_kv, D)
    return np.swapaxes(flat[index], 1, 2)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
    """sdpa of q (B, T, H, K) over the keys and values of each sequence gathered through its
    block table: key j of sequence b at block_table[b, j // P], offset j % P, j < seq_lens[b];
    causal: query t sits at position seq_lens[b] - T + t. Output (B, T, H, V)."""
    q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                        seq_lens, causal)
    out, _ = sdpa(np.swapaxes(q, 1, 2), _paged_kv(kc, index), _paged_kv(vc, index),
                  keep[:, None], scale=scale, num_kv_heads=kc.shape[2])  # (B, H, T, V)
    return np.swapaxes(out, 1, 2)


# sdpa's backward on the gathered keys; a slot's gradient is the sum over every (sequence,
# position) reading it (a shared page gets both), slots never read get zero.
def paged_attention_vjp(cotangents, q, k_cache, v_cache, block_table, seq_lens, *, scale=None,
                        causal=False):
    q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                        seq_lens, causal)
    dO = np.swapaxes(np.asarray(cotangents["output"], dtype=q.dtype), 1, 2)  # (B, H, T, V)
    g, _ = sdpa_vjp({"output": dO}, np.swapaxes(q, 1, 2), _paged_kv(kc, index),
                    _paged_kv(vc, index), keep[:, None], scale=scale, num_kv_heads=kc.shape[2])
    used = keep.any(axis=1)  # (B, S): j < L_b
    grads = {"q": np.swapaxes(g["q"], 1, 2)}
    for name, cache in (("k_cache", kc), ("v_cache", vc)):
        flat = np.zeros((cache.shape[0] * cache.shape[1],) + cache.shape[2:], dtype=q.dtype)
        np.add.at(flat, index[used], np.swapaxes(g[name[0]], 1, 2)[used])
        grads[name] = flat.reshape(cache.shape)
    return grads, {}


def _written(cache, index, new):
    """A copy of cache (N, P, H_kv, D) with flat slots index (B*T,) set to new (B, T, H_kv, D)."""
    flat = cache.reshape((-1,) + cache.shape[2:]).copy()  # (N*P, H_kv, D)
    flat[index] = new.reshape((-1,) + new.shape[2:])
    return flat.reshape(cache.shape)


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """The caches with k, v (B, T, H_kv, .) written at positions seq_lens[b] .. + T - 1 through
    the block table, and seq_lens + T; the inputs are not modified."""
    kc, vc, k, v, index, lens = check.paged_append_plan(_core, k_cache, v_cache, block_table,
                                                        seq_lens, k, v)
    return _written(kc, index, k), _written(vc, index, v), lens


# sdpa over a packed batch of variable-length sequences: the shared composite over this sdpa.
from ..composite.varlen import Varlen  # noqa: E402

(sdpa_varlen,) = Varlen.bind(__package__, "sdpa_varlen")


# == float8 inputs with descales (issue 22 item 6) =========================================

def fp8_grid(x, fp8_format):
    """x cast to ml_dtypes' float8 of the format and back (NumPy's own float8 dtypes):
    equal to x where x is a value of the format."""
    import ml_dtypes

    f8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fp8_format]
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(f8).astype(x.dtype)


# sdpa on float8 inputs: the shared composite over this sdpa. NumPy has no float8 matmul:
# the inputs are checked through ml_dtypes' float8 and dequantised explicitly (x * descale).
from ..composite.fp8 import Fp8  # noqa: E402

sdpa_fp8, _fp8_plan = Fp8.bind(__package__, "sdpa_fp8", "plan")


def _descale_grad(g, x, d):
    """d(descale) = sum of g * x over the elements the descale multiplies: () or (B, H_kv)."""
    gx = np.sum(g * x, axis=(2, 3))  # (B, heads)
    if np.ndim(d) == 0:
        return np.sum(gx)
    b, h_kv = np.shape(d)
    return gx.reshape(b, h_kv, -1).sum(-1)  # (B, H_kv)


# With x^ = x * d (d broadcast per head) and dx^ sdpa's gradient w.r.t. x^:
#   dx = dx^ * d,  d(descale) = sum of dx^ * x over each descale entry's elements.
def sdpa_fp8_vjp(cotangents, q, k, v, q_descale=None, k_descale=None, v_descale=None, *,
                 fp8_format="e4m3fn", scale=None, causal=False, num_kv_heads=None, softcap=None):
    xs, scales, mask = _fp8_plan(q, k, v, q_descale, k_descale, v_descale,
                                 fp8_format=fp8_format, causal=causal)
    hats = [x if d is None else x * d for x, d in zip(xs, scales)]
    g, _ = sdpa_vjp(cotangents, *hats, mask, scale=scale, num_kv_heads=num_kv_heads,
                    softcap=softcap)
    grads = {}
    for name, x, d, given in zip("qkv", xs, scales, (q_descale, k_descale, v_descale)):
        grads[name] = g[name] if d is None else g[name] * d
        if given is not None:
            grads[f"{name}_descale"] = _descale_grad(g[name], x, np.asarray(given))
    return grads, {}
