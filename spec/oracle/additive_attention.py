"""Additive (Bahdanau et al. 2015) attention.

    e[b, t, s] = sum_a v[a] tanh( sum_i query[b,t,i] w_q[i,a] + sum_j keys[b,s,j] w_k[j,a] )
    weights[b, t, :] = softmax over s of e[b, t, :], mask False -> 0, nothing kept -> all 0
    context[b, t, :] = sum_s weights[b, t, s] values[b, s, :]      (values default: keys)
"""

import mpmath
import numpy as np

from .core import (
    cotangent,
    fsum_axes,
    linear_vjp,
    matmul,
    mp,
    mpa,
    rows,
    softmax,
    softmax_backward_row,
    transpose_last,
    weighted_sum,
    zeros,
)


def additive_attention(query, keys, values=None, mask=None, params=None):
    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    w_q, w_k, v = mpa(params["w_q"]), mpa(params["w_k"]), mpa(params["v"])
    qa, ka = matmul(q, w_q), matmul(k, w_k)  # (B, T, A), (B, S, A)
    b, t, s, a = q.shape[0], q.shape[1], k.shape[1], v.shape[0]
    e = zeros((b, t, s))
    for bi in range(b):
        for ti in range(t):
            for si in range(s):
                e[bi, ti, si] = mp.fdot((v[j], mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j]))
                                        for j in range(a))
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s))
    weights = softmax(e, axis=-1, keep=keep)
    return {"context": weighted_sum(weights, vals), "weights": weights}


def scored_attention_vjp(cot, e, vals, mask):
    """weights = softmax(e) (masked), context = weights values; cotangents dC (and dW):
        dW' = dC values^T + dW,  de = W * (dW' - rowsum(dW' * W)),  dvalues = W^T dC
    Returns (de, dvalues), (B, T, S) and (B, S, Dv)."""
    b, t, s = e.shape
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s))
    w = softmax(e, axis=-1, keep=keep)  # (B, T, S)
    dC = cotangent(cot, "context", (b, t, vals.shape[-1]))
    dWt = matmul(dC, transpose_last(vals))
    if "weights" in cot:
        dWt = dWt + mpa(cot["weights"])
    de = np.empty(w.shape, dtype=object)
    for idx, row in rows(w):
        de[idx] = softmax_backward_row(row, list(dWt[idx]))
    return de, matmul(transpose_last(w), dC)


def tanh_scores_vjp(q, k, w_q, w_k, v, de):
    """e[b,t,s] = sum_a v_a tanh(u), u = (q w_q)[b,t,a] + (k w_k)[b,s,a], h = tanh(u):
        dv_a = sum_{b,t,s} de h_a,   du = de v_a (1 - h^2),
        d(q w_q) = sum_s du,  d(k w_k) = sum_t du,  then the two projections' backward.
    Returns dq, dk, dw_q, dw_k, dv."""
    qa, ka = matmul(q, w_q), matmul(k, w_k)  # (B, T, A), (B, S, A)
    (b, t, s), a = de.shape, v.shape[0]
    dqa, dka, dv_terms = zeros(qa.shape), zeros(ka.shape), [[] for _ in range(a)]
    du = zeros((b, t, s, a))
    for bi, ti, si in np.ndindex(b, t, s):
        for j in range(a):
            h = mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j])
            dv_terms[j].append(de[bi, ti, si] * h)
            du[bi, ti, si, j] = de[bi, ti, si] * v[j] * (1 - h * h)
    dqa, dka = fsum_axes(du, (2,)), fsum_axes(du, (1,))  # (B, T, A), (B, S, A)
    dq, dw_q, _ = linear_vjp(q, w_q, dqa)
    dk, dw_k, _ = linear_vjp(k, w_k, dka)
    return dq, dk, dw_q, dw_k, np.array([mp.fsum(x) for x in dv_terms], dtype=object)


def additive_scores(q, k, w_q, w_k, v):
    """e[b,t,s] = sum_a v_a tanh((q w_q)[b,t,a] + (k w_k)[b,s,a]), as the forward oracle."""
    qa, ka = matmul(q, w_q), matmul(k, w_k)  # (B, T, A), (B, S, A)
    e = zeros((q.shape[0], q.shape[1], k.shape[1]))
    for bi, ti, si in np.ndindex(e.shape):
        e[bi, ti, si] = mp.fdot((v[j], mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j]))
                                for j in range(v.shape[0]))
    return e


def additive_attention_vjp(cot, query, keys, values=None, mask=None, params=None):
    """e = v^T tanh(query W_q + keys W_k) (Bahdanau), weights = softmax(e), context = W values:
    de from the softmax backward, then tanh' = 1 - h^2 (see tanh_scores_vjp); with values
    omitted (= keys), dkeys also gets dvalues."""
    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    w_q, w_k, v = (mpa(params[n]) for n in ("w_q", "w_k", "v"))
    e = additive_scores(q, k, w_q, w_k, v)
    de, dvals = scored_attention_vjp(cot, e, vals, mask)
    dq, dk, dw_q, dw_k, dv = tanh_scores_vjp(q, k, w_q, w_k, v, de)
    grads = {"query": dq, "keys": dk + dvals if values is None else dk}
    if values is not None:
        grads["values"] = dvals
    return grads, {"w_q": dw_q, "w_k": dw_k, "v": dv}


VJPS = {"additive_attention": additive_attention_vjp}
