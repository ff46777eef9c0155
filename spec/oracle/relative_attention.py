"""Relative position representations (Shaw, Uszkoreit, Vaswani 2018), one head.

Query i sits at position i (0..T-1), key j at position j (0..S-1); m = max_distance.

    a^K_ij = rel_k[clip(j - i, -m, m) + m]        a^V_ij = rel_v[clip(j - i, -m, m) + m]
    e_ij   = q_i . (k_j + a^K_ij) * scale          scale = 1 / sqrt(K) unless given
    alpha_ij = softmax_j(e_ij) over the keys the mask keeps (a row keeping none is all 0)
    z_i    = sum_j alpha_ij (v_j + a^V_ij)   over the j with alpha_ij != 0 (a masked key's
             value, even NaN, never reaches z_i)
"""

import mpmath
import numpy as np

from .core import mp, mpa, softmax_row, zeros


def relative_attention(q, k, v, mask=None, max_distance=None, scale=None, params=None):
    q, k, v = mpa(q), mpa(k), mpa(v)
    rel_k, rel_v = mpa(params["rel_k"]), mpa(params["rel_v"])
    (b, t, kw), s, vw = q.shape, k.shape[1], v.shape[2]
    m = max_distance
    scale = 1 / mpmath.sqrt(kw) if scale is None else mpmath.mpf(scale)
    keep = (np.ones((b, t, s), dtype=bool) if mask is None
            else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s)))
    out, weights = zeros((b, t, vw)), zeros((b, t, s))
    for bi in range(b):
        for i in range(t):
            rows = [min(max(j - i, -m), m) + m for j in range(s)]
            # e_ij = q_i . (k_j + a^K_ij) * scale
            e = [mp.fsum(q[bi, i, c] * (k[bi, j, c] + rel_k[rows[j], c]) for c in range(kw))
                 * scale for j in range(s)]
            alpha = softmax_row(e, list(keep[bi, i]))
            for j in range(s):
                weights[bi, i, j] = alpha[j]
            # z_i = sum_j alpha_ij (v_j + a^V_ij)
            for c in range(vw):
                out[bi, i, c] = mp.fsum(alpha[j] * (v[bi, j, c] + rel_v[rows[j], c])
                                        for j in range(s) if alpha[j] != 0)
    return {"output": out, "weights": weights}
