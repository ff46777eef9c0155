"""Attention sinks (gpt-oss; Xiao et al. 2024's sink as a learned logit): sdpa whose softmax
denominator holds one more term per head, exp(sinks[h]), a logit with no value:

    W[..., h, i, j] = exp(S[..., h, i, j]) / (exp(sinks[h]) + sum_{j' kept} exp(S[..., h, i, j']))
    output          = sum_{j: W != 0} W[..., h, i, j] v[..., j, :]

S are sdpa's scores (scale, soft-cap, bias, mask); the sink is neither scaled, capped nor
biased, and axis -3 of the scores is the head axis (the query heads under GQA). A row with
no key kept has W = 0 and a zero output; the weights of a row sum to 1 - p_sink < 1.
"""

import mpmath
import numpy as np

from .core import (
    matmul,
    mpa,
    softmax_row,
    transpose_last,
    weighted_sum,
)
from .sdpa import batch_shape, repeat_kv, scores_backward
from .sdpa_lse import masked_scores


def _augmented(scores, keep, sinks):
    """Per row: the softmax over [kept scores..., sink] (sink last)."""
    sinks = mpa(sinks)
    out = np.empty(scores.shape[:-1] + (scores.shape[-1] + 1,), dtype=object)
    for idx in np.ndindex(scores.shape[:-1]):
        row = list(scores[idx]) + [sinks[idx[-2]]]  # idx = (..., h, i)
        kept = [True] * scores.shape[-1] if keep is None else [bool(x) for x in keep[idx]]
        out[idx] = softmax_row(row, kept + [True])
    return out  # (..., H, T, S + 1)


def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, scale=None, num_kv_heads=None,
               softcap=None):
    scores, keep = masked_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    weights = _augmented(scores, keep, sinks)[..., :-1]  # (..., H, T, S)
    vv = mpa(v) if num_kv_heads is None else repeat_kv(mpa(v), mpa(q).shape[-3], num_kv_heads)
    return {"output": weighted_sum(weights, vv), "weights": weights}


def sdpa_sinks_vjp(cot, q, k, v, sinks, mask=None, bias=None, scale=None, num_kv_heads=None,
                   softcap=None):
    """With P = softmax([S, sink]) (W = P without its last column, p = its last), cotangents
    dO and dW, g = dO v^T + dW (and 0 for the sink):
        dS    = W * (g - rowsum(g * W))
        dsink = -p * rowsum(g * W), summed over every axis but the head axis
    then sdpa's backward from dS (softcap's tanh', scale, GQA sums, dbias = dS).
    """
    q, k, v = mpa(q), mpa(k), mpa(v)
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))
    scores, keep = masked_scores(q, k, v, mask, bias, scale, None, softcap)
    p_all = _augmented(scores, keep, sinks)
    w, p = p_all[..., :-1], p_all[..., -1]  # (..., H, T, S), (..., H, T)
    full = batch_shape(q, k, v)
    dO = np.broadcast_to(mpa(cot["output"]), full + (q.shape[-2], v.shape[-1]))
    g = matmul(dO, transpose_last(np.broadcast_to(v, full + v.shape[-2:])))  # (..., T, S)
    if "weights" in cot:
        g = g + mpa(cot["weights"])
    dS = np.empty(w.shape, dtype=object)
    dp = np.empty(p.shape, dtype=object)
    for idx in np.ndindex(p.shape):
        s = mpmath.fsum(gj * wj for gj, wj in zip(g[idx], w[idx]))
        dS[idx] = [wj * (gj - s) for gj, wj in zip(g[idx], w[idx])]
        dp[idx] = -p[idx] * s
    grads = scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias=bias, scale=scale,
                            num_kv_heads=num_kv_heads, softcap=softcap)
    dsinks = np.empty(np.shape(sinks), dtype=object)
    for h in range(dsinks.shape[0]):
        dsinks[h] = mpmath.fsum(dp[..., h, :].ravel())
    grads["sinks"] = dsinks
    return grads, {}


VJPS = {"sdpa_sinks": sdpa_sinks_vjp}
