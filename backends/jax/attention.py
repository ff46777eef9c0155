"""Attention core: softmax, masks, scaled dot-product, top-k attention, attention
entropy, soft-capping.

Argument checks run in Python on shapes (``backends/_checks.py``); the arithmetic of each
kernel is one ``jax.jit`` function with its attributes static, compiled once per shape,
dtype and attribute set and reused.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import _core, buckets
from ._core import boolean, const, floating, host, integers, weighted_sum
from .host import bind as _bind


def _softmax_core(x, keep, axis: int):
    """The masked softmax along ``axis`` (inside a jit); keep broadcasts to x."""
    kept = keep & (x != -jnp.inf)  # entries that compete
    nan = jnp.any(kept & jnp.isnan(x), axis=axis, keepdims=True)
    top = kept & (x == jnp.inf)
    live = jnp.where(jnp.any(top, axis=axis, keepdims=True), top, kept & ~jnp.isnan(x))
    x = jnp.where(top, 0, x)  # each +inf entry: exp(0) = 1, an equal share
    m = jnp.max(jnp.where(live, x, -jnp.inf), axis=axis, keepdims=True, initial=-jnp.inf)
    m = jnp.where(jnp.isfinite(m), m, 0)
    e = jnp.where(live, jnp.exp(jnp.where(live, x - m, 0)), 0)
    total = jnp.sum(e, axis=axis, keepdims=True)
    y = e / jnp.where(total > 0, total, 1)
    return jnp.where(nan & kept, jnp.nan, y).astype(x.dtype)


@functools.partial(jax.jit, static_argnames="axis")
def _softmax(x, keep, axis):
    return _softmax_core(x, True if keep is None else keep, axis)


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) and -inf get weight 0; a slice with nothing kept is all 0.
    Kept +inf entries share the slice equally (the limit); a kept NaN makes every kept
    weight of its slice NaN.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, s)
    return _softmax_bucketed(x, mask, axis % len(s))


def _softmax_bucketed(x, mask, axis):
    """_softmax at bucket sizes (buckets.py): the axis moved last, the other axes
    flattened to rows; rows and the axis padded, padded entries masked out."""
    s = x.shape
    rest = s[:axis] + s[axis + 1:]
    n, length = math.prod(rest), s[axis]
    N, L = buckets.size(n), buckets.size(length)
    if not (buckets.applies(x, mask) and buckets.small((N, L))):
        return _softmax(x, mask, axis)
    keep = np.broadcast_to(True if mask is None else np.asarray(mask), s)
    xp, kp = (buckets.pad(np.moveaxis(np.asarray(a), axis, -1).reshape(n, length), (N, L), fill)
              for a, fill in ((x, 0), (keep, False)))
    y = np.asarray(_softmax(*buckets.on_device(xp, kp), -1))[:n, :length]  # (n, L)
    return buckets.cut(np.moveaxis(y.reshape((*rest, length)), -1, axis), ...)


def causal_mask(*, t, s):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing.
    """
    t, s = check.size("t", t), check.size("s", s)
    i = np.arange(t)[:, None]  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    return host(j <= i + (s - t))  # (T, S), built on the host: nothing to compile


def sliding_window_mask(*, t, s, window):
    """mask[i, j] = p - W < j <= p with p = i + (S - T): the causal mask limited to the W
    most recent keys (the query's own position included), bottom-right aligned."""
    t, s = check.size("t", t), check.size("s", s)
    w = check.integer("window", window, lo=1)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = np.arange(s)[None, :]  # (1, S)
    return host((j <= p) & (j > p - w))  # (T, S), built on the host


def local_window_mask(*, t, s, left, right):
    """mask[i, j] = p - left <= j <= p + right with p = i + (S - T), bottom-right aligned;
    left or right None: that side unbounded. (jax.nn.dot_product_attention's
    local_window_size counts from p = i, top-left: see masks.md.)"""
    t, s, left, right = check.local_window_args(t, s, left, right)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = np.arange(s)[None, :]  # (1, S)
    keep = np.ones((t, s), dtype=bool)  # (T, S)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return host(keep)  # built on the host


def chunked_mask(*, t, s, chunk, causal=True):
    """mask[i, j] = (j // C == p // C) and (j <= p if causal), p = i + (S - T), floor division."""
    t, s, c, causal = check.chunked_mask_args(t, s, chunk, causal)
    p = np.arange(t)[:, None] + (s - t)  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    keep = (j // c) == (p // c)  # (T, S)
    return host(keep & (j <= p) if causal else keep)  # built on the host


@jax.jit
def _softcap(x, c):
    return c * jnp.tanh(x / c)


def softcap(x, *, cap):
    """y = cap tanh(x / cap): logit soft-capping (Gemma 2), elementwise; cap > 0."""
    x = floating("x", x)
    return buckets.rowwise(_softcap, x, const(x, check.eps(cap, "cap")), item_rank=0)


def _padding(ids, pad_id) -> np.ndarray:
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (np.asarray(ids) != pad_id)[:, None, None, :]  # (B, 1, 1, S), on the host


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    return host(_padding(ids, pad_id))  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = _padding(ids, pad_id)  # (B, 1, 1, S)
    t = check.size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    causal = check.flag("causal", causal)
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & (np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t))  # (B, 1, T, S)
    return host(np.broadcast_to(keep, (b, h, t, s)))  # (B, H, T, S)


def repeat_kv(q, k, v, num_kv_heads):
    """k, v (..., H_kv, S, .) -> (..., H, S, .), each kv head repeated H / H_kv times."""
    group = check.kv_group(num_kv_heads, q, k, v)

    def adjoint(g):  # the sum over each kv head's copies
        return g.reshape(*g.shape[:-3], g.shape[-3] // group, group, *g.shape[-2:]).sum(axis=-3)
    return tuple(buckets.moved(lambda x: _repeat_kv(x, x, group)[0],
                               lambda a: np.repeat(a, group, axis=-3), adjoint, x) for x in (k, v))


@functools.partial(jax.jit, static_argnums=2)
def _repeat_kv(k, v, group: int):
    return jnp.repeat(k, group, axis=-3), jnp.repeat(v, group, axis=-3)


def _scores(q, k, c, bias, full, cap=None):
    scores = (q @ jnp.swapaxes(k, -1, -2)) * c  # (..., T, S)
    if cap is not None:
        scores = cap * jnp.tanh(scores / cap)  # soft-capping, before the bias and the mask
    if bias is not None:
        scores = scores + bias
    return jnp.broadcast_to(scores, full)


@functools.partial(jax.jit, static_argnames=("full", "finite"))
def _sdpa(q, k, v, mask, bias, c, full, cap=None, finite=None):
    weights = _softmax_core(_scores(q, k, c, bias, full, cap), True if mask is None else mask, -1)
    return weighted_sum(weights, v, finite), weights  # (..., T, V), (..., T, S)


def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """weights = softmax(cap(scale * q k^T) + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output. With num_kv_heads (grouped-query
    attention), axis -3 holds the heads and query head h reads kv head h // (H / H_kv).
    With softcap = c, cap(s) = c tanh(s / c), before the bias and the mask (Gemma 2);
    None: cap(s) = s.
    """
    k_kv, v_kv = k, v
    if num_kv_heads is not None:
        q, k, v = floating("q", q), floating("k", k), floating("v", v)
        k_kv, v_kv = k, v
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    cap = None if softcap is None else const(q, check.softcap(softcap))
    c = const(q, check.scale(scale, q.shape[-1]))
    if _core.skip_weights() and cap is None and bias is None and _fusable(q, k_kv, v_kv, mask):
        return _fused(q, k_kv, v_kv, mask, c, _is_causal(mask, full)), None
    return _bucketed(_sdpa, q, k, v, mask, full, {"bias": bias}, c=c, cap=cap)


def _fusable(q, k, v, mask) -> bool:
    """Where jax.nn.dot_product_attention agrees with the spec: rank-4 (B, H, T, K) arrays
    (the composites'), a mask of rank <= 4, not float64 (its XLA version takes the logits
    in float32), finite q, k, v (its weights multiply a masked key's value by 0, so a NaN
    there would reach the output, and +inf scores give NaN)."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or (mask is not None and mask.ndim > 4):
        return False
    if q.dtype == jnp.float64:
        return False
    # a sum is finite only if every term is (one that overflows: the explicit path)
    return bool(jnp.isfinite(q.sum() + k.sum() + v.sum()))


def _is_causal(mask, full) -> bool:
    """Whether mask is exactly the causal (T, T) mask (jax's is_causal is top-left aligned,
    the spec's bottom-right: the same when T = S)."""
    t, s = full[-2:]
    if mask is None or t != s or math.prod(mask.shape) != t * s or mask.shape[-2:] != (t, s):
        return False
    return bool(np.array_equal(np.asarray(mask).reshape(t, s), np.tri(t, s, dtype=bool)))


@functools.partial(jax.jit, static_argnames="causal")
def _fused(q, k, v, mask, c, causal: bool):
    """sdpa's output through jax.nn.dot_product_attention ((B, T, H, K) layout; k, v may
    have H_kv heads, grouped-query attention). Its masked logits are a large negative
    number, not -inf: a row with no key left would average every value; the spec's is 0."""
    swap = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731  (B, H, T, K) <-> (B, T, H, K)
    keep = None if mask is None or causal else mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    out = swap(jax.nn.dot_product_attention(swap(q), swap(k), swap(v), mask=keep, scale=c,
                                            is_causal=causal))  # (B, H, T, V)
    if keep is None:
        return out
    return jnp.where(keep.any(axis=-1, keepdims=True), out, 0)


def _bucketed(kernel, q, k, v, mask, full, scores_like: dict, columns: dict | None = None,
              lse: bool = False, **rest):
    """``kernel(q=, k=, v=, mask=, full=, **scores_like, **columns, **rest)`` at bucket sizes
    (buckets.py): the batch flattened to N; queries, keys and both widths padded, padded keys
    masked out; the mask, and each array of scores_like (broadcastable to full; None: zeros),
    always given; each array of columns broadcastable to (*full[:-1], 1). The second output
    is the weights (..., T, S), or with lse the (..., T) log-sum-exp. At the exact shapes
    where bucketing does not apply. Under ``jax.vjp`` of concrete arrays the backward pass
    runs at bucket sizes too (``_bucketed_traced``)."""
    columns = columns or {}
    *batch, t, s = full
    n, kw, vw = math.prod(batch), q.shape[-1], v.shape[-1]
    N, T, S, K, V = (buckets.size(d) for d in (n, t, s, kw, vw))
    arrays = (q, k, v, mask, *scores_like.values(), *columns.values())
    if buckets.small((N, T, S), (N, S, max(K, V))) and buckets.traced(*arrays):
        return _bucketed_traced(kernel, q, k, v, mask, full, scores_like, columns, lse, rest)
    if not (buckets.applies(*arrays) and buckets.small((N, T, S), (N, S, max(K, V)))):
        return kernel(q=q, k=k, v=v, mask=mask, full=full, **scores_like, **columns, **rest)
    padded = _bucket_inputs(q, k, v, mask, full, scores_like, columns)
    out, second = kernel(**dict(zip(padded, buckets.on_device(*padded.values()))),
                         full=(N, T, S), finite=_finite(padded["v"]), **rest)
    second = (np.asarray(second)[:n, :t].reshape(*batch, t) if lse
              else np.asarray(second)[:n, :t, :s].reshape(full))
    return buckets.cut(np.asarray(out)[:n, :t, :vw].reshape(*batch, t, vw), ...), buckets.cut(second, ...)


def _finite(v: np.ndarray) -> bool:
    """Whether the values hold no NaN or infinity (read on the host: the kernel then holds
    one branch of weighted_sum, not a lax.cond of two)."""
    return bool(np.isfinite(v).all())


def _bucket_inputs(q, k, v, mask, full, scores_like: dict, columns: dict) -> dict:
    """The kernel's array arguments padded on the host to the bucket sizes of ``full``."""
    *batch, t, s = full
    n, kw, vw = math.prod(batch), q.shape[-1], v.shape[-1]
    N, T, S, K, V = (buckets.size(d) for d in (n, t, s, kw, vw))
    padded = {"q": buckets.flat(q, batch, (t, kw), (N, T, K)),
              "k": buckets.flat(k, batch, (s, kw), (N, S, K)),
              "v": buckets.flat(v, batch, (s, vw), (N, S, V)),
              "mask": buckets.flat(True if mask is None else mask, batch, (t, s), (N, T, S), False)}
    padded.update({name: buckets.flat(np.zeros((), q.dtype) if x is None else x, batch, (t, s),
                                      (N, T, S)) for name, x in scores_like.items()})
    padded.update({name: buckets.flat(x, batch, (t, 1), (N, T, 1)) for name, x in columns.items()})
    return padded


def _bucketed_traced(kernel, q, k, v, mask, full, scores_like, columns, lse, rest):
    """_bucketed under a transformation: the exact kernel, with a custom VJP that pads on the
    host where ``jax.vjp`` runs on concrete arrays, so a gradient compiles once per bucket
    (the pullback of the padded kernel), not once per shape. Padding is a copy into zeros
    (and a broadcast), so its adjoint is a cut (and a sum over the broadcast axes); padded
    keys are masked and padded widths are zeros, so the real entries' cotangents are those
    of the exact kernel."""
    names = ("q", "k", "v", "mask", *scores_like, *columns)
    *batch, t, s = full
    n, vw = math.prod(batch), v.shape[-1]

    def call(*a):
        return dict(zip(names, a))

    def exact(*a):
        return kernel(**call(*a), full=full, **rest)

    def forward(*a):
        x = call(*a)
        return _bucketed(kernel, x["q"], x["k"], x["v"], x["mask"], full,
                         {m: x[m] for m in scores_like}, {m: x[m] for m in columns}, lse, **rest)

    def backward(a, cts):
        x = call(*a)
        padded = _bucket_inputs(x["q"], x["k"], x["v"], x["mask"], full,
                                {m: x[m] for m in scores_like}, {m: x[m] for m in columns})
        (N, T, V), S = padded["v"].shape[:1] + padded["q"].shape[1:2] + padded["v"].shape[2:], \
            padded["k"].shape[1]
        c_out, c_second = (np.asarray(c) for c in cts)
        c_out = buckets.pad(c_out.reshape(n, t, vw), (N, T, V))
        c_second = (buckets.pad(c_second.reshape(n, t), (N, T)) if lse
                    else buckets.pad(c_second.reshape(n, t, s), (N, T, S)))
        # numbers (the scale, the cap) are arguments of the pullback, not constants in it: one
        # program for every value, and none shared across dtypes
        numbers = {m: y for m, y in rest.items() if isinstance(y, np.ndarray | np.generic)}
        static = (("finite", _finite(padded["v"])), ("full", (N, T, S)),
                  *sorted((m, y) for m, y in rest.items() if m not in numbers))
        grads = buckets.vjp_of(_by_name(kernel, (*padded, *numbers)), static)(
            (*buckets.on_device(*padded.values()), *numbers.values()),
            tuple(buckets.on_device(c_out, c_second)))
        tails = {"q": (t, x["q"].shape[-1]), "k": (s, x["k"].shape[-1]), "v": (s, vw),
                 **{m: (t, s) for m in scores_like}, **{m: (t, 1) for m in columns}}
        out = []
        for name, g in zip(padded, grads):
            if name == "mask" or x[name] is None:
                out.append(None)
                continue
            tail = tails[name]
            g = np.asarray(g)[(slice(0, n), *(slice(0, d) for d in tail))].reshape(*batch, *tail)
            out.append(buckets.cut(buckets.unbroadcast(g, np.shape(x[name])), ...))
        return out

    return buckets.differentiable(forward, backward, exact, q, k, v, mask,
                                  *scores_like.values(), *columns.values())


@functools.cache
def _by_name(kernel, names: tuple):
    """kernel taking its array arguments by position in the order ``names`` (for vjp_of)."""
    def positional(*a, **static):
        return kernel(**dict(zip(names, a)), **static)
    return positional


TIES = ("lower_index", "keep_all")


@functools.partial(jax.jit, static_argnames=("full", "top_k", "keep_all", "finite"))
def _topk(q, k, v, mask, c, full, top_k, keep_all, finite=None):
    scores = _scores(q, k, c, None, full)  # (..., T, S)
    allowed = jnp.ones(full, dtype=bool) if mask is None else jnp.broadcast_to(mask, full)
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = jnp.argsort(jnp.where(allowed, -scores, jnp.inf), axis=-1, stable=True)
    rank = jnp.argsort(order, axis=-1)  # the inverse permutation
    chosen = allowed & (rank < top_k)  # (..., T, S)
    if keep_all:
        kth = jnp.min(jnp.where(chosen, scores, jnp.inf), axis=-1, keepdims=True)  # (..., T, 1)
        chosen = allowed & (scores >= kth)
    weights = _softmax_core(scores, chosen, -1)
    nan = jnp.any(allowed & jnp.isnan(scores), axis=-1, keepdims=True)
    weights = jnp.where(nan & allowed, jnp.nan, weights).astype(q.dtype)
    return weighted_sum(weights, v, finite), weights  # (..., T, V), (..., T, S)


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
    c = const(q, check.scale(scale, q.shape[-1]))
    return _bucketed(_topk, q, k, v, mask, full, {}, c=c, top_k=top_k, keep_all=ties == "keep_all")


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    known = _core.concrete(w)  # under jax.vjp of concrete arrays: the primal
    if known is None:  # under jax.jit: the values are not known
        return _entropy(w, axis % len(s))
    host = np.asarray(known)  # the domain check reads values: on the host, nothing compiled
    bad = ~(np.isfinite(host) & (host >= 0))
    if bad.any():
        raise DomainError(f"weights must be finite and >= 0, got a value of "
                          f"{host[bad].flat[0]} in shape {s}")
    return _entropy(w, axis % len(s))


@functools.partial(jax.jit, static_argnames="axis")
def _entropy(w, axis):
    positive = w > 0
    terms = jnp.where(positive, w * jnp.log(jnp.where(positive, w, 1)), 0)
    return -jnp.sum(terms, axis=axis)


# == log-sum-exp output and merging attention states (issue 22) ==========================

def _logsumexp_core(x, keep, axis: int):
    """ln sum_j exp(x_j) over the kept entries (keep and x_j != -inf), inside a jit; none kept
    -> -inf, a kept +inf -> +inf, a kept NaN -> NaN. The maximum m of the finite kept entries
    is subtracted first (and held constant: its gradient cancels); an empty row's log is
    taken of 1, then replaced, so no NaN reaches the gradient."""
    kept = keep & (x != -jnp.inf)
    nan = jnp.any(kept & jnp.isnan(x), axis=axis)
    top = jnp.any(kept & (x == jnp.inf), axis=axis)
    live = kept & jnp.isfinite(x)
    m = jnp.max(jnp.where(live, x, -jnp.inf), axis=axis, keepdims=True, initial=-jnp.inf)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))
    total = jnp.sum(jnp.where(live, jnp.exp(jnp.where(live, x - m, 0)), 0), axis=axis)
    some = total > 0
    lse = jnp.where(some, jnp.squeeze(m, axis) + jnp.log(jnp.where(some, total, 1)), -jnp.inf)
    lse = jnp.where(top, jnp.inf, lse)
    return jnp.where(nan, jnp.nan, lse).astype(x.dtype)


@functools.partial(jax.jit, static_argnames=("full", "finite"))
def _sdpa_lse(q, k, v, mask, bias, c, full, cap=None, finite=None):
    scores = _scores(q, k, c, bias, full, cap)  # (..., T, S)
    keep = jnp.broadcast_to(True if mask is None else mask, full)
    output = weighted_sum(_softmax_core(scores, keep, -1), v, finite)  # (..., T, V)
    return output, _logsumexp_core(scores, keep, -1)  # (..., T)


def sdpa_lse(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and lse[..., i] = ln sum_j exp(scores[..., i, j]) over the kept keys
    (natural log; -inf for a row with nothing kept, whose output is 0). Bucketed as sdpa
    (padded keys are masked out, so they add nothing to the lse; padded rows are cut)."""
    if num_kv_heads is not None:
        q, k, v = floating("q", q), floating("k", k), floating("v", v)
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    cap = None if softcap is None else const(q, check.softcap(softcap))
    c = const(q, check.scale(scale, q.shape[-1]))
    return _bucketed(_sdpa_lse, q, k, v, mask, full, {"bias": bias}, lse=True, c=c, cap=cap)


@jax.jit
def _merge(o, s):
    w = _softmax_core(s, True, 0)[..., None]  # (N, ..., 1)
    terms = w * jnp.where(w != 0, o, 0)  # an unused part's NaN never meets its weight 0
    return jnp.sum(terms, axis=0), _logsumexp_core(s, True, 0)  # (..., V), (...)


def merge_attention_states(outputs, lses):
    """w = softmax over the parts (axis 0) of lses (a -inf part gets weight 0; all -inf: 0),
    output = sum_n w_n outputs_n over the parts with w_n != 0, lse = ln sum_n exp(lses_n)."""
    outputs, lses = check.attention_states(_core, outputs, lses)
    parts, *rows, width = outputs.shape
    n = math.prod(rows)
    P, N, V = buckets.size(parts), buckets.size(n), buckets.size(width)
    if not (buckets.applies(outputs, lses) and buckets.small((P, N, V))):
        return _merge(outputs, lses)
    # padded parts have lse -inf: weight 0, left out of the sum and of the lse
    o = buckets.pad(np.asarray(outputs).reshape(parts, n, width), (P, N, V))  # (P, N, V)
    s = buckets.pad(np.asarray(lses).reshape(parts, n), (P, N), -np.inf)  # (P, N)
    out, lse = (np.asarray(y) for y in _merge(*buckets.on_device(o, s)))
    return buckets.cut(out[:n, :width].reshape(*rows, width), ...), buckets.cut(lse[:n].reshape(rows), ...)


# == attention sinks (issue 22 item 4) =====================================================

@functools.partial(jax.jit, static_argnames="full")
def _sdpa_sinks(q, k, v, sinks, mask, bias, c, full, cap=None):
    column = jnp.broadcast_to(sinks[:, None, None], full[:-1] + (1,))  # (..., H, T, 1)
    return _sdpa_sink_column(q, k, v, column, mask, bias, c, full, cap)


@functools.partial(jax.jit, static_argnames=("full", "finite"))
def _sdpa_sink_column(q, k, v, column, mask, bias, c, full, cap=None, finite=None):
    """_sdpa_sinks with each row's sink given: column (..., T, 1) (bucketed: the heads are
    flattened into the batch, so each row carries its head's sink)."""
    scores = _scores(q, k, c, bias, full, cap)  # (..., T, S)
    keep = jnp.broadcast_to(True if mask is None else mask, full)
    kept = jnp.concatenate([keep, jnp.ones(full[:-1] + (1,), bool)], axis=-1)
    column = jnp.broadcast_to(column, full[:-1] + (1,))  # (H, 1, 1) where no bucket applies
    weights = _softmax_core(jnp.concatenate([scores, column], axis=-1), kept, -1)[..., :-1]
    return weighted_sum(weights, v, finite), weights  # (..., T, V), (..., T, S)


def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
    """W = exp(S) / (exp(sinks[h]) + sum_kept exp(S)) per head h (axis -3), output = W v:
    the softmax over the scores with the sink column appended (gpt-oss), then dropped. The
    sink is neither scaled, capped nor biased; a fully masked row gives zeros."""
    if num_kv_heads is not None:
        q, k, v = floating("q", q), floating("k", k), floating("v", v)
        k, v = repeat_kv(q, k, v, num_kv_heads)
    q, k, v, mask, bias, full = check.attention_inputs(_core, q, k, v, mask, bias)
    sinks = check.sinks_of(_core, sinks, full, q)
    cap = None if softcap is None else const(q, check.softcap(softcap))
    c = const(q, check.scale(scale, q.shape[-1]))
    if not (buckets.applies(sinks) or buckets.traced(sinks)):
        return _sdpa_sinks(q, k, v, sinks, mask, bias, c, full, cap)
    # (H, 1, 1): broadcasts to (..., H, T, 1); a tracer under jax.vjp (bucketed VJP)
    column = (sinks[:, None, None] if isinstance(sinks, jax.core.Tracer)
              else np.asarray(sinks)[:, None, None])
    return _bucketed(_sdpa_sink_column, q, k, v, mask, full, {"bias": bias},
                     {"column": column}, c=c, cap=cap)


# == paged KV cache (issue 22 item 3) ======================================================

@jax.jit
def _paged_kv(cache, index):
    """cache (N, P, H_kv, D) read at flat slots index (B, S) -> (B, H_kv, S, D)."""
    flat = cache.reshape((-1,) + cache.shape[2:])  # (N*P, H_kv, D)
    return jnp.swapaxes(jnp.take(flat, index, axis=0), 1, 2)


def _gather_pages(cache, index):
    """_paged_kv(cache, index), a gather: on the host where the cache is concrete
    (buckets.moved), so no program is compiled per (pages, slots) shape; under jax.vjp of
    concrete arrays its adjoint adds each cotangent row into the slot it was read from."""
    index = np.asarray(index)
    n, p = cache.shape[:2]

    def forward(c):
        return np.swapaxes(c.reshape((n * p,) + c.shape[2:])[index], 1, 2)

    def adjoint(g):  # (B, H_kv, S, D) -> (N, P, H_kv, D)
        grad = np.zeros((n * p,) + g.shape[1:2] + g.shape[3:], g.dtype)
        np.add.at(grad, index, np.swapaxes(g, 1, 2))
        return grad.reshape((n, p) + grad.shape[1:])
    return buckets.moved(lambda c: _paged_kv(c, index), forward, adjoint, cache)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, causal=False):
    """sdpa of q (B, T, H, K) over the keys and values of each sequence gathered through its
    block table (key j of sequence b at block_table[b, j // P], offset j % P, j < seq_lens[b]);
    causal: query t sits at position seq_lens[b] - T + t. Output (B, T, H, V)."""
    q, kc, vc, index, keep = check.paged_attention_plan(_core, q, k_cache, v_cache, block_table,
                                                        seq_lens, causal)
    out, _ = sdpa(_swapped(q), _gather_pages(kc, index), _gather_pages(vc, index),
                  host(keep[:, None]), scale=scale, num_kv_heads=kc.shape[2])
    return _swapped(out)  # (B, T, H, V)


def _swapped(x):
    """x with axes 1 and 2 swapped, on the host where x is concrete (buckets.moved)."""
    return buckets.moved(lambda x: jnp.swapaxes(x, 1, 2), lambda x: np.swapaxes(x, 1, 2),
                         lambda g: np.swapaxes(g, 1, 2), x)


@jax.jit
def _written(cache, index, new):
    """A copy of cache (N, P, H_kv, D) with flat slots index (B*T,) set to new (B, T, H_kv, D)."""
    flat = cache.reshape((-1,) + cache.shape[2:])  # (N*P, H_kv, D)
    flat = flat.at[index].set(new.reshape((-1,) + new.shape[2:]))
    return flat.reshape(cache.shape)


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """The caches with k, v (B, T, H_kv, .) written at positions seq_lens[b] .. + T - 1 through
    the block table, and seq_lens + T; the inputs are not modified."""
    kc, vc, k, v, index, lens = check.paged_append_plan(_core, k_cache, v_cache, block_table,
                                                        seq_lens, k, v)
    return _write(kc, index, k), _write(vc, index, v), host(lens)


def _write(cache, index, new):
    """_written: on the host (a copy, then the slots set) where the arrays are concrete."""
    if not buckets.applies(cache, new):
        return _written(cache, np.asarray(index), new)
    flat = np.array(cache).reshape((-1,) + cache.shape[2:])  # (N*P, H_kv, D), a copy
    flat[np.asarray(index)] = np.asarray(new).reshape((-1,) + new.shape[2:])
    return host(flat.reshape(cache.shape))


# sdpa over a packed batch of variable-length sequences: the shared composite over this sdpa.
from ..composite.varlen import Varlen  # noqa: E402

(sdpa_varlen,) = _bind(Varlen, __package__, "sdpa_varlen")


# == float8 inputs with descales (issue 22 item 6) =========================================

@functools.partial(jax.jit, static_argnames="fp8_format")
def _fp8_grid(x, fp8_format):
    f8 = {"e4m3fn": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}[fp8_format]
    return jax.lax.stop_gradient(x).astype(f8).astype(x.dtype)


def fp8_grid(x, fp8_format):
    """x cast to JAX's float8 of the format (jnp.float8_e4m3fn, jnp.float8_e5m2) and back,
    row-wise bucketed where x is concrete; a NumPy x (the composite's glue on the host,
    host.py) gets a NumPy result."""
    if getattr(x, "ndim", 0) < 1 or buckets.traced(x) or not buckets.applies(x):
        return jax.lax.stop_gradient(_fp8_grid(x, fp8_format))
    out = buckets.rowwise(_fp8_grid, x, fp8_format=fp8_format)
    return np.asarray(out) if isinstance(x, np.ndarray) else out


# sdpa on float8 inputs: the shared composite over this sdpa (one path for every backend;
# a float8 dot_general with float32 accumulation exists, unused): the inputs are checked
# through JAX's float8 and dequantised explicitly (x * descale), then this sdpa.
from ..composite.fp8 import Fp8  # noqa: E402

(sdpa_fp8,) = _bind(Fp8, __package__, "sdpa_fp8")
