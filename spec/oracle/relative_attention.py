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

from .core import cotangent, mp, mpa, softmax_backward_row, softmax_row, zeros


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
            e = [mp.fdot((q[bi, i, c], k[bi, j, c] + rel_k[rows[j], c]) for c in range(kw))
                 * scale for j in range(s)]
            alpha = softmax_row(e, list(keep[bi, i]))
            for j in range(s):
                weights[bi, i, j] = alpha[j]
            # z_i = sum_j alpha_ij (v_j + a^V_ij)
            for c in range(vw):
                out[bi, i, c] = mp.fdot((alpha[j], v[bi, j, c] + rel_v[rows[j], c])
                                        for j in range(s) if alpha[j] != 0)
    return {"output": out, "weights": weights}


def relative_attention_vjp(cot, q, k, v, mask=None, max_distance=None, scale=None,
                           params=None):
    """e_ij = c q_i . (k_j + a^K_ij), alpha = softmax(e), z_i = sum_j alpha_ij (v_j + a^V_ij),
    a^K_ij = rel_k[r_ij], a^V_ij = rel_v[r_ij], r_ij = clip(j - i, -m, m) + m:
        dalpha'_ij = dz_i . (v_j + a^V_ij) + dalpha_ij,  de = softmax backward of dalpha'
        dq_i = c sum_j de_ij (k_j + a^K_ij),  dk_j = c sum_i de_ij q_i,  dv_j = sum_i alpha_ij dz_i
        drel_k[r] = c sum_{b, (i, j): r_ij = r} de_ij q_i,
        drel_v[r] = sum_{b, (i, j): r_ij = r} alpha_ij dz_i
    """
    q, k, v = mpa(q), mpa(k), mpa(v)
    rel_k, rel_v = mpa(params["rel_k"]), mpa(params["rel_v"])
    (b, t, kw), s, vw = q.shape, k.shape[1], v.shape[2]
    m = max_distance
    c = 1 / mpmath.sqrt(kw) if scale is None else mpmath.mpf(scale)
    alpha = relative_attention(q, k, v, mask=mask, max_distance=m, scale=scale,
                               params={"rel_k": rel_k, "rel_v": rel_v})["weights"]
    dz = cotangent(cot, "output", (b, t, vw))
    dalpha = cotangent(cot, "weights", (b, t, s))
    rows = [[min(max(j - i, -m), m) + m for j in range(s)] for i in range(t)]
    terms = {n: np.empty(shape, dtype=object) for n, shape in
             (("q", q.shape), ("k", k.shape), ("v", v.shape), ("rel_k", rel_k.shape),
              ("rel_v", rel_v.shape))}
    for a in terms.values():
        for idx in np.ndindex(a.shape):
            a[idx] = []
    for bi in range(b):
        for i in range(t):
            da = [mp.fdot((dz[bi, i, x], v[bi, j, x] + rel_v[rows[i][j], x]) for x in range(vw))
                  + dalpha[bi, i, j] for j in range(s)]
            de = softmax_backward_row(list(alpha[bi, i]), da)
            for j in range(s):
                r = rows[i][j]
                for x in range(kw):
                    terms["q"][bi, i, x].append(c * de[j] * (k[bi, j, x] + rel_k[r, x]))
                    terms["k"][bi, j, x].append(c * de[j] * q[bi, i, x])
                    terms["rel_k"][r, x].append(c * de[j] * q[bi, i, x])
                for x in range(vw):
                    terms["v"][bi, j, x].append(alpha[bi, i, j] * dz[bi, i, x])
                    terms["rel_v"][r, x].append(alpha[bi, i, j] * dz[bi, i, x])
    out = {n: np.vectorize(mp.fsum, otypes=[object])(a) if a.size else zeros(a.shape)
           for n, a in terms.items()}
    return ({n: out[n] for n in ("q", "k", "v")},
            {"rel_k": out["rel_k"], "rel_v": out["rel_v"]})


VJPS = {"relative_attention": relative_attention_vjp}
