"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative
attention, rotary position embedding (RoPE)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError, ShapeError

from .. import _checks as check
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


def rope(x, *, offset=0, base=10000.0, convention="interleaved"):
    """Rotate feature pairs (a, b) of row t by p * theta_i, p = offset + t,
    theta_i = base^(-2i/K):  y_a = x_a cos - x_b sin,  y_b = x_a sin + x_b cos.

    "interleaved" pairs (2i, 2i+1) (RoFormer, GPT-J); "half" pairs (i, i + K/2)
    (GPT-NeoX, Hugging Face rotate_half).
    """
    x = floating("x", x)
    *_, t, kw = check.rank("x", x, min_rank=2)
    if kw % 2:
        raise ShapeError(f"rope needs an even feature width, x has shape {check.shape(x)}")
    offset = check.integer("offset", offset, lo=0)
    convention = check.choice("convention", convention, ("interleaved", "half"))
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ConfigError(f"base must be a positive number, got {base!r}")
    theta = float(base) ** (-2.0 * np.arange(kw // 2) / kw)  # (K/2,)
    angle = np.arange(offset, offset + t, dtype=np.float64)[:, None] * theta  # (T, K/2)
    cos, sin = (tf.cast(tf.constant(f(angle)), x.dtype) for f in (np.cos, np.sin))
    if convention == "interleaved":
        xa, xb = x[..., 0::2], x[..., 1::2]
    else:
        xa, xb = x[..., : kw // 2], x[..., kw // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        return tf.reshape(tf.stack([ya, yb], axis=-1), check.shape(x))
    return tf.concat([ya, yb], axis=-1)


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on integers,
    a graph constant); the result has the table's dtype, shaped (H, T, S).
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return tf.transpose(tf.gather(table, tf.constant(b)), (2, 0, 1))  # (H, T, S)
