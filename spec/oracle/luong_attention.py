"""Luong et al. (2015) global attention, three score functions, no scaling.

    dot:     e[b,t,s] = sum_i query[b,t,i] keys[b,s,i]                     (Dq == Dk)
    general: e[b,t,s] = sum_i sum_j query[b,t,i] w[i,j] keys[b,s,j]        w (Dq, Dk)
    concat:  e[b,t,s] = sum_a v[a] tanh( sum_i c[i] w[i,a] ),  c = [query[b,t]; keys[b,s]]
                                                                          w (Dq+Dk, A)
    weights[b, t, :] = softmax over s of e[b, t, :], mask False -> 0, nothing kept -> all 0
    context[b, t, :] = sum_s weights[b, t, s] values[b, s, :]            (values default: keys)
"""

import mpmath
import numpy as np

from .additive_attention import scored_attention_vjp, tanh_scores_vjp
from .core import matmul, mp, mpa, softmax, transpose_last, weighted_sum, zeros


def _concat_scores(q, k, w, v):
    b, t, s = q.shape[0], q.shape[1], k.shape[1]
    e = zeros((b, t, s))
    for bi in range(b):
        for ti in range(t):
            for si in range(s):
                c = list(q[bi, ti]) + list(k[bi, si])  # [q_t; k_s]
                hidden = [mpmath.tanh(mp.fdot((c[i], w[i, j]) for i in range(len(c))))
                          for j in range(w.shape[1])]
                e[bi, ti, si] = mp.fdot((v[j], hidden[j]) for j in range(len(hidden)))
    return e


def luong_attention(query, keys, values=None, mask=None, score="dot", params=None):
    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    params = params or {}
    if score == "dot":
        e = matmul(q, transpose_last(k))
    elif score == "general":
        e = matmul(matmul(q, mpa(params["w"])), transpose_last(k))
    elif score == "concat":
        e = _concat_scores(q, k, mpa(params["w"]), mpa(params["v"]))
    else:
        raise ValueError(f"unknown score {score!r}")
    b, t, s = e.shape
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s))
    weights = softmax(e, axis=-1, keep=keep)
    return {"context": weighted_sum(weights, vals), "weights": weights}


def luong_attention_vjp(cot, query, keys, values=None, mask=None, score="dot", params=None):
    """weights = softmax(e), context = weights values, de from the softmax backward:
        dot:     e = q k^T:        dq = de k,  dk = de^T q
        general: e = q W k^T:      dq = de k W^T,  dk = de^T q W,  dW = sum_b q^T de k
        concat:  e = v^T tanh([q; k] W): additive attention's backward with W = [W_q; W_k]
    with values omitted (= keys), dkeys also gets dvalues."""

    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    params = {n: mpa(a) for n, a in (params or {}).items()}
    if score == "dot":
        e = matmul(q, transpose_last(k))  # (B, T, S)
    elif score == "general":
        e = matmul(matmul(q, params["w"]), transpose_last(k))
    else:
        e = _concat_scores(q, k, params["w"], params["v"])
    de, dvals = scored_attention_vjp(cot, e, vals, mask)
    grads = {}
    if score == "dot":
        dq, dk = matmul(de, k), matmul(transpose_last(de), q)
    elif score == "general":
        w = params["w"]
        dq = matmul(matmul(de, k), transpose_last(w))
        dk = matmul(matmul(transpose_last(de), q), w)
        qf, dek = q.reshape(-1, q.shape[-1]), matmul(de, k).reshape(-1, k.shape[-1])
        grads["w"] = matmul(transpose_last(qf), dek)  # sum over b, t of q^T (de k)
    else:
        w, d_q = params["w"], q.shape[-1]
        dq, dk, dw_q, dw_k, grads["v"] = tanh_scores_vjp(q, k, w[:d_q], w[d_q:], params["v"], de)
        grads = {"w": np.concatenate([dw_q, dw_k], axis=0), "v": grads["v"]}
    dx = {"query": dq, "keys": dk + dvals if values is None else dk}
    if values is not None:
        dx["values"] = dvals
    return dx, grads


VJPS = {"luong_attention": luong_attention_vjp}
