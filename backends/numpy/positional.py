"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative
attention, rotary position embedding (RoPE)."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from .. import _rope as rope_rules
from ._core import boolean, floating, integers
from .attention import softmax, softmax_backward, weighted_sum


def sinusoidal_pe(*, length, d_model, offset=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    pos = offset + row; column c uses i = c // 2 and the actual D (odd D: the last
    column is a sin without a cos partner). Returned in float64.
    """
    length = check.integer("length", length, lo=0)
    d_model = check.integer("d_model", d_model, lo=1)
    offset = check.integer("offset", offset, lo=0)
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]  # (length, 1)
    i = np.arange(d_model) // 2  # (D,)
    angle = pos / 10000.0 ** (2.0 * i / d_model)  # (length, D)
    return np.where(np.arange(d_model) % 2 == 0, np.sin(angle), np.cos(angle))


def alibi_bias(*, num_heads, t, s):
    """ALiBi (Press et al. 2022): bias[h, i, j] = -m_h (p_i - j), p_i = i + (S - T).

    The slopes m_h come from ``_checks.alibi_slopes`` (one copy for every backend).
    Returned in float64, shaped (H, T, S): sdpa's bias input.
    """
    m = np.array(check.alibi_slopes(num_heads))          # (H,)
    t, s = check.integer("t", t, lo=0), check.integer("s", s, lo=0)
    p = np.arange(t, dtype=np.float64)[:, None] + (s - t)  # (T, 1) absolute query positions
    j = np.arange(s, dtype=np.float64)[None, :]          # (1, S)
    return -m[:, None, None] * (p - j)                   # (H, T, S)


def learned_pe(positions, *, params):
    """pe[...] = table[positions[...]], table of shape (max_len, D)."""
    table = floating("table", check.params_of(params).require("table", (None, None)))
    positions = integers("positions", positions)
    max_len = table.shape[0]
    if positions.size and (positions.min() < 0 or positions.max() >= max_len):
        raise DomainError(f"positions must be in [0, max_len) with max_len={max_len} "
                          f"(table {table.shape}), got values in "
                          f"[{positions.min()}, {positions.max()}]")
    return table[positions]  # (..., D)


def _relative_rows(t: int, s: int, m: int) -> np.ndarray:
    """clip(j - i, -m, m) + m for query i in 0..T-1 and key j in 0..S-1."""
    return np.clip(np.arange(s)[None, :] - np.arange(t)[:, None], -m, m) + m  # (T, S)


def relative_attention(q, k, v, mask=None, *, max_distance, scale=None, params):
    """e_ij = q_i . (k_j + a^K_ij) * scale,  z_i = sum_j softmax_j(e_ij) (v_j + a^V_ij).

    a^K_ij = rel_k[clip(j - i, -m, m) + m], a^V_ij likewise from rel_v (Shaw et al. 2018);
    query i is at position i, key j at position j; scale defaults to 1/sqrt(K).
    """
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    b, t, s, kw, vw = check.sequences(q, k, v)
    m = check.integer("max_distance", max_distance, lo=0)
    p = check.params_of(params)
    rel_k = floating("rel_k", p.require("rel_k", (2 * m + 1, kw)))
    rel_v = floating("rel_v", p.require("rel_v", (2 * m + 1, vw)))
    keep = np.ones((b, t, s), dtype=bool)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, (b, t, s))
        keep = np.broadcast_to(mask, (b, t, s))
    scale = check.scale(scale, kw)
    rows = _relative_rows(t, s, m)
    a_k, a_v = rel_k[rows], rel_v[rows]  # (T, S, K), (T, S, V)
    e = (q @ np.swapaxes(k, -1, -2) + np.einsum("btk,tsk->bts", q, a_k)) * q.dtype.type(scale)
    alpha = softmax(e, keep)  # (B, T, S)
    z = weighted_sum(alpha, v) + np.einsum("bts,tsv->btv", alpha, a_v)  # (B, T, V)
    return z, alpha


def rope(x, *, offset=0, base=10000.0, convention="interleaved", rotary_dim=None, scaling=None):
    """Rotate feature pairs (a, b) of row t by p * theta_i, p = offset + t,
    theta_i = base^(-2i/R):  y_a = m (x_a cos - x_b sin),  y_b = m (x_a sin + x_b cos).

    "interleaved" pairs (2i, 2i+1) (RoFormer, GPT-J); "half" pairs (i, i + R/2)
    (GPT-NeoX, Hugging Face rotate_half). Only the first R = rotary_dim features (None: K)
    are rotated, the rest pass through; `scaling` (transformers' rope_parameters) gives theta
    and m through rope_frequencies (m = 1 without it).
    """
    x = floating("x", x)
    cos, sin, r = _tables(x, offset, base, convention, rotary_dim, scaling)
    return _apply(x, cos, sin, r, convention)


def _tables(x, offset, base, convention, rotary_dim, scaling):
    """m cos(p theta_i), m sin(p theta_i) (T, R/2) in x's dtype (angles in float64), and R."""
    cos, sin, r = rope_rules.tables(x.shape, offset, base, convention, rotary_dim, scaling)
    return cos.astype(x.dtype), sin.astype(x.dtype), r


def _apply(x, cos, sin, r, convention):
    """y = the pairs of x[..., :R] rotated by (cos, sin), x[..., R:] passed through."""
    xr, rest = x[..., :r], x[..., r:]
    if convention == "interleaved":
        xa, xb = xr[..., 0::2], xr[..., 1::2]
    else:
        xa, xb = xr[..., : r // 2], xr[..., r // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        yr = np.stack([ya, yb], axis=-1).reshape(xr.shape)
    else:
        yr = np.concatenate([ya, yb], axis=-1)
    return np.concatenate([yr, rest], axis=-1)


ROPE_TYPES = rope_rules.ROPE_TYPES


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    """inv_freq (K/2,) and the attention factor (0-d), float64, under transformers' rope_type
    rules: configuration numbers, computed once for every backend (backends/_rope.py)."""
    inv_freq, m = rope_rules.frequencies(**locals())  # the attributes, as given
    return inv_freq, np.float64(m)


# == grad2: backward (vector-Jacobian products) =============================================

# y = m R x on the first R features, R the rotation of each pair (a, b) by p theta_i:
# orthogonal, so dx = m R^T dy, the rotation by the opposite angle:
#   dx_a = m (dy_a cos + dy_b sin),  dx_b = m (-dy_a sin + dy_b cos);  dx = dy on the rest
def rope_vjp(cotangents, x, *, offset=0, base=10000.0, convention="interleaved", rotary_dim=None,
             scaling=None):
    x = floating("x", x)
    cos, sin, r = _tables(x, offset, base, convention, rotary_dim, scaling)  # the checks, once
    dy = np.asarray(cotangents["y"], dtype=x.dtype)
    return {"x": _apply(dy, cos, -sin, r, convention)}, {}


# pe[...] = table[positions[...]]:  a scatter-add, repeated positions accumulate:
#   dtable[m] = sum over the n with positions[n] = m of dpe[n];   the positions get none
def learned_pe_vjp(cotangents, positions, *, params):
    pe = learned_pe(positions, params=params)                            # the checks, once
    table = np.asarray(params["table"])
    dtable = np.zeros_like(table)
    np.add.at(dtable, np.asarray(positions).reshape(-1),
              np.asarray(cotangents["pe"], dtype=pe.dtype).reshape(-1, table.shape[1]))
    return {}, {"table": dtable}

# -- backward of relative_attention (attention kernels) -------------------------------------

def _scatter_add(table, rows, g):
    """out[r] = sum of g[i, j] over the (i, j) with rows[i, j] = r (several pairs share a row)."""
    out = np.zeros_like(table)
    np.add.at(out, rows, g)
    return out


# e_ij = c q_i . (k_j + a^K_ij), alpha = softmax(e), z_i = sum_j alpha_ij (v_j + a^V_ij),
# a^K_ij = rel_k[r_ij], a^V_ij = rel_v[r_ij]:
#   dalpha'_ij = dz_i . (v_j + a^V_ij) + dalpha_ij,  de = alpha * (dalpha' - rowsum(dalpha' * alpha)),
#   dq_i = c sum_j de_ij (k_j + a^K_ij),  dk_j = c sum_i de_ij q_i,  dv_j = sum_i alpha_ij dz_i,
#   drel_k[r] = c sum of de_ij q_i over b and every (i, j) with r_ij = r,
#   drel_v[r] = sum of alpha_ij dz_i over b and every (i, j) with r_ij = r
def relative_attention_vjp(cotangents, q, k, v, mask=None, *, max_distance, scale=None,
                           params):
    z, alpha = relative_attention(q, k, v, mask, max_distance=max_distance, scale=scale,
                                  params=params)
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    rel_k, rel_v = (np.asarray(params[n], dtype=q.dtype) for n in ("rel_k", "rel_v"))
    (_, t, kw), s = q.shape, k.shape[1]
    rows = _relative_rows(t, s, max_distance)
    a_k, a_v = rel_k[rows], rel_v[rows]  # (T, S, K), (T, S, V)
    c = q.dtype.type(check.scale(scale, kw))
    dz = cotangents.get("output")
    dz = np.zeros_like(z) if dz is None else np.asarray(dz, dtype=z.dtype)  # (B, T, V)
    dalpha = dz @ np.swapaxes(v, -1, -2) + np.einsum("btv,tsv->bts", dz, a_v)  # (B, T, S)
    if "weights" in cotangents:
        dalpha = dalpha + np.asarray(cotangents["weights"], dtype=z.dtype)
    de = softmax_backward(alpha, dalpha)  # (B, T, S)
    gk_rows = c * np.einsum("bts,btk->tsk", de, q)  # (T, S, K): drel_k before the scatter
    gv_rows = np.einsum("bts,btv->tsv", alpha, dz)  # (T, S, V)
    drel_k, drel_v = _scatter_add(rel_k, rows, gk_rows), _scatter_add(rel_v, rows, gv_rows)
    grads = {"q": c * (de @ k + np.einsum("bts,tsk->btk", de, a_k)),
             "k": c * (np.swapaxes(de, -1, -2) @ q),
             "v": np.swapaxes(alpha, -1, -2) @ dz}
    return grads, {"rel_k": drel_k, "rel_v": drel_v}


# == T5's relative position bias ============================================================

def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on integers);
    the result has the table's dtype, shaped (H, T, S): sdpa's bias input.
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return np.ascontiguousarray(np.transpose(table[b], (2, 0, 1)))  # (H, T, S)


# dtable[b, h] = sum over the (i, j) with bucket b of dbias[h, i, j] (a scatter-add)
def t5_bias_vjp(cotangents, *, t, s, bidirectional=True, num_buckets=32, max_distance=128,
                offset=0, params):
    bias = t5_bias(t=t, s=s, bidirectional=bidirectional, num_buckets=num_buckets,
                   max_distance=max_distance, offset=offset, params=params)  # the checks, once
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = np.asarray(params["table"], dtype=bias.dtype)
    dbias = np.asarray(cotangents["bias"], dtype=bias.dtype)  # (H, T, S)
    dtable = np.zeros_like(table)
    np.add.at(dtable, b.reshape(-1), np.transpose(dbias, (1, 2, 0)).reshape(-1, table.shape[1]))
    return {}, {"table": dtable}
