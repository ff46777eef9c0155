"""sdpa with its log-sum-exp per query row (flash-attn's softmax_lse, FlexAttention's lse):

    scores[..., i, j] = cap(scale * sum_k q[..., i, k] k[..., j, k]) + bias[..., i, j]
    lse[..., i]       = ln sum_{j kept} exp(scores[..., i, j])      (natural log)
    output            = sdpa's output (weights = exp(scores - lse) over the kept keys)

kept: mask True and score not -inf. A row with no key kept has lse = -inf (ln 0) and a
zero output; a kept +inf score gives lse = +inf, a kept NaN score lse = NaN.
"""

import mpmath
import numpy as np

from .core import (
    add,
    cotangent,
    matmul,
    mpa,
    rows,
    softmax_backward_row,
    transpose_last,
)
from .sdpa import batch_shape, repeat_kv, scores_backward, scores_of
from .sdpa import sdpa as sdpa_oracle
from .softcap import softcap as capped


def lse_row(scores, keep=None) -> mpmath.mpf:
    """ln sum_j exp(s_j) over the kept entries; none kept -> -inf (ln 0)."""
    n = len(scores)
    keep = [True] * n if keep is None else [bool(x) for x in keep]
    kept = [scores[j] for j in range(n) if keep[j] and scores[j] != -mpmath.inf]
    if any(mpmath.isnan(s) for s in kept):
        return mpmath.mpf("nan")
    if not kept:
        return -mpmath.inf
    m = max(kept)
    if m == mpmath.inf:
        return mpmath.inf
    return m + mpmath.log(mpmath.fsum(mpmath.exp(s - m) for s in kept))


def masked_scores(q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """(scores, keep), both (..., T, S): sdpa's scores and its mask broadcast (keep None: all)."""
    q, k, v = mpa(q), mpa(k), mpa(v)
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))
    scores = scores_of(q, k, scale)  # (..., T, S)
    if softcap is not None:
        scores = capped(scores, softcap)["y"]
    full = batch_shape(q, k, v) + scores.shape[-2:]
    scores = np.broadcast_to(scores, full)
    if bias is not None:
        scores = add(scores, mpa(bias))
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), full)
    return scores, keep


def lse_of(scores, keep) -> np.ndarray:
    """(..., T, S) -> (..., T)."""
    lse = np.empty(scores.shape[:-1], dtype=object)
    for idx in np.ndindex(lse.shape):
        lse[idx] = lse_row(list(scores[idx]), None if keep is None else list(keep[idx]))
    return lse


def sdpa_lse(q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    attrs = {"scale": scale, "num_kv_heads": num_kv_heads, "softcap": softcap}
    scores, keep = masked_scores(q, k, v, mask, bias, **attrs)
    output = sdpa_oracle(q, k, v, mask=mask, bias=bias, **attrs)["output"]  # (..., T, V)
    return {"output": output, "lse": lse_of(scores, keep)}  # (..., T)


def sdpa_lse_vjp(cot, q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None,
                 softcap=None):
    """W = softmax(S) over the kept keys, O = W v, lse = ln sum_j exp(S_j) (d lse / dS = W):
        dS  = W * (dO v^T - rowsum(dO v^T * W)) + W * dlse      (..., T, S)
        ds  = dS * (1 - tanh^2(s / C))     (softcap; none: ds = dS)
        dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS   (each summed to its shape)
    With num_kv_heads, dk and dv of a kv head are the sums over its group of query heads.
    A row with nothing kept has W = 0, so no gradient at all.
    """
    q, k, v = mpa(q), mpa(k), mpa(v)
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))
    w = sdpa_oracle(q, k, v, mask=mask, bias=bias, scale=scale, softcap=softcap)["weights"]
    full = batch_shape(q, k, v)
    dO = np.broadcast_to(cotangent(cot, "output", full + (q.shape[-2], v.shape[-1])),
                         full + (q.shape[-2], v.shape[-1]))  # (..., T, V)
    dlse = np.broadcast_to(cotangent(cot, "lse", w.shape[:-1]), w.shape[:-1])  # (..., T)
    dWt = matmul(dO, transpose_last(np.broadcast_to(v, full + v.shape[-2:])))  # (..., T, S)
    dS = np.empty(w.shape, dtype=object)
    for idx, row in rows(w):
        dS[idx] = [a + wj * dlse[idx] for a, wj in
                   zip(softmax_backward_row(row, list(dWt[idx])), row)]
    return scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias=bias, scale=scale,
                           num_kv_heads=num_kv_heads, softcap=softcap), {}


VJPS = {"sdpa_lse": sdpa_lse_vjp}
