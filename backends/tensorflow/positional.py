"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative
attention, rotary position embedding (RoPE)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .. import _checks as check
from .. import _rope as rope_rules
from ._core import boolean, const, floating, in_range, integers, take
from .attention import softmax, weighted_sum


def sinusoidal_pe(*, length, d_model, offset=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    pos = offset + row; column c uses i = c // 2 and the actual D (odd D: the last
    column is a sin without a cos partner). Returned in float64.
    """
    length = check.integer("length", length, lo=0)
    d_model = check.integer("d_model", d_model, lo=1)
    offset = check.integer("offset", offset, lo=0)
    pos = tf.range(offset, offset + length, dtype=tf.float64)[:, None]  # (length, 1)
    i = np.arange(d_model) // 2  # (D,)
    angle = pos / tf.constant(10000.0 ** (2.0 * i / d_model))  # (length, D)
    return tf.where(tf.constant(np.arange(d_model) % 2 == 0), tf.sin(angle), tf.cos(angle))


def alibi_bias(*, num_heads, t, s):
    """ALiBi (Press et al. 2022): bias[h, i, j] = -m_h (p_i - j), p_i = i + (S - T).

    The slopes m_h come from ``_checks.alibi_slopes`` (one copy for every backend).
    Returned in float64, shaped (H, T, S): sdpa's bias input.
    """
    m = tf.constant(check.alibi_slopes(num_heads), tf.float64)  # (H,)
    t, s = check.integer("t", t, lo=0), check.integer("s", s, lo=0)
    p = tf.range(t, dtype=tf.float64)[:, None] + float(s - t)  # (T, 1) absolute query positions
    j = tf.range(s, dtype=tf.float64)[None, :]           # (1, S)
    return -m[:, None, None] * (p - j)                   # (H, T, S)


def learned_pe(positions, *, params):
    """pe[...] = table[positions[...]], table of shape (max_len, D)."""
    table = floating("table", check.params_of(params).require("table", (None, None)))
    positions = integers("positions", positions)
    max_len = check.shape(table)[0]
    in_range("positions", positions, 0, max_len, lambda lo, hi: (
        f"positions must be in [0, max_len) with max_len={max_len} "
        f"(table {check.shape(table)}), got values in [{lo}, {hi}]"))
    return take(table, positions, max_len)  # (..., D)


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
    keep = tf.ones((b, t, s), dtype=tf.bool)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, (b, t, s))
        keep = tf.broadcast_to(mask, (b, t, s))
    scale = check.scale(scale, kw)
    rows = tf.constant(_relative_rows(t, s, m))
    a_k, a_v = tf.gather(rel_k, rows), tf.gather(rel_v, rows)  # (T, S, K), (T, S, V)
    e = (tf.matmul(q, k, transpose_b=True) + tf.einsum("btk,tsk->bts", q, a_k)) \
        * const(scale, q)
    alpha = softmax(e, keep)  # (B, T, S)
    z = weighted_sum(alpha, v) + tf.einsum("bts,tsv->btv", alpha, a_v)  # (B, T, V)
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
    cos, sin, r = rope_rules.tables(check.shape(x), offset, base, convention, rotary_dim, scaling)
    cos, sin = (tf.cast(tf.constant(c), x.dtype) for c in (cos, sin))  # (T, R/2)
    xr = x[..., :r]
    if convention == "interleaved":
        xa, xb = xr[..., 0::2], xr[..., 1::2]
    else:
        xa, xb = xr[..., : r // 2], xr[..., r // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        yr = tf.reshape(tf.stack([ya, yb], axis=-1), check.shape(xr))
    else:
        yr = tf.concat([ya, yb], axis=-1)
    return yr if r == check.shape(x)[-1] else tf.concat([yr, x[..., r:]], axis=-1)


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    """inv_freq (K/2,) and the attention factor (0-d), float64, under transformers' rope_type
    rules: configuration numbers, computed once for every backend (backends/_rope.py)."""
    inv_freq, m = rope_rules.frequencies(**locals())  # the attributes, as given
    return tf.constant(inv_freq, tf.float64), tf.constant(m, tf.float64)


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on integers,
    a graph constant); the result has the table's dtype, shaped (H, T, S).
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return tf.transpose(tf.gather(table, tf.constant(b)), (2, 0, 1))  # (H, T, S)
