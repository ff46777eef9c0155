"""Additive (Bahdanau et al. 2015) attention.

    e[b, t, s] = sum_a v[a] tanh( sum_i query[b,t,i] w_q[i,a] + sum_j keys[b,s,j] w_k[j,a] )
    weights[b, t, :] = softmax over s of e[b, t, :], mask False -> 0, nothing kept -> all 0
    context[b, t, :] = sum_s weights[b, t, s] values[b, s, :]      (values default: keys)
"""

import mpmath
import numpy as np

from .core import matmul, mp, mpa, softmax, weighted_sum, zeros


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
                e[bi, ti, si] = mp.fsum(v[j] * mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j])
                                        for j in range(a))
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s))
    weights = softmax(e, axis=-1, keep=keep)
    return {"context": weighted_sum(weights, vals), "weights": weights}
