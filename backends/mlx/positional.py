"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative attention,
rotary position embedding (RoPE). The angles and slopes are computed on the host in float64
(NumPy) and rounded once: MLX's own sin and cos are float32-accurate."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from .. import _rope as rope_rules
from ._core import boolean, floating, integers
from .attention import softmax, weighted_sum


def _host(a):
    """A float64 NumPy constant as an MLX array (float64: MLX stores it on the CPU)."""
    return mx.array(np.asarray(a, dtype=np.float64))


def sinusoidal_pe(*, length, d_model, offset=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).
    Returned in float64."""
    length = check.integer("length", length, lo=0)
    d_model = check.integer("d_model", d_model, lo=1)
    offset = check.integer("offset", offset, lo=0)
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]  # (length, 1)
    i = np.arange(d_model) // 2  # (D,)
    angle = pos / 10000.0 ** (2.0 * i / d_model)  # (length, D)
    return _host(np.where(np.arange(d_model) % 2 == 0, np.sin(angle), np.cos(angle)))


def alibi_bias(*, num_heads, t, s):
    """ALiBi: bias[h, i, j] = -m_h (p_i - j), p_i = i + (S - T); float64, (H, T, S)."""
    m = np.array(check.alibi_slopes(num_heads))          # (H,)
    t, s = check.integer("t", t, lo=0), check.integer("s", s, lo=0)
    p = np.arange(t, dtype=np.float64)[:, None] + (s - t)  # (T, 1)
    j = np.arange(s, dtype=np.float64)[None, :]          # (1, S)
    return _host(-m[:, None, None] * (p - j))            # (H, T, S)


def learned_pe(positions, *, params):
    """pe[...] = table[positions[...]], table of shape (max_len, D)."""
    table = floating("table", check.params_of(params).require("table", (None, None)))
    positions = integers("positions", positions)
    max_len = table.shape[0]
    if positions.size:
        lo, hi = mx.min(positions).item(), mx.max(positions).item()
        if lo < 0 or hi >= max_len:
            raise DomainError(f"positions must be in [0, max_len) with max_len={max_len} "
                              f"(table {tuple(table.shape)}), got values in [{lo}, {hi}]")
    return table[positions]  # (..., D)


def _relative_rows(t: int, s: int, m: int):
    """clip(j - i, -m, m) + m for query i in 0..T-1 and key j in 0..S-1."""
    return mx.array(np.clip(np.arange(s)[None, :] - np.arange(t)[:, None], -m, m) + m)  # (T, S)


def relative_attention(q, k, v, mask=None, *, max_distance, scale=None, params):
    """e_ij = q_i . (k_j + a^K_ij) * scale,  z_i = sum_j softmax_j(e_ij) (v_j + a^V_ij)."""
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    b, t, s, kw, vw = check.sequences(q, k, v)
    m = check.integer("max_distance", max_distance, lo=0)
    p = check.params_of(params)
    rel_k = floating("rel_k", p.require("rel_k", (2 * m + 1, kw)))
    rel_v = floating("rel_v", p.require("rel_v", (2 * m + 1, vw)))
    keep = mx.ones((b, t, s), dtype=mx.bool_)
    if mask is not None:
        mask = boolean("mask", mask)
        check.broadcastable("mask", mask, (b, t, s))
        keep = mx.broadcast_to(mask, (b, t, s))
    scale = check.scale(scale, kw)
    rows = _relative_rows(t, s, m)
    a_k, a_v = rel_k[rows], rel_v[rows]  # (T, S, K), (T, S, V)
    e = (q @ mx.swapaxes(k, -1, -2) + mx.einsum("btk,tsk->bts", q, a_k)) * scale
    alpha = softmax(e, keep)  # (B, T, S)
    z = weighted_sum(alpha, v) + mx.einsum("bts,tsv->btv", alpha, a_v)  # (B, T, V)
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
    cos, sin, r = rope_rules.tables(tuple(x.shape), offset, base, convention, rotary_dim, scaling)
    cos, sin = (mx.array(c.astype(np.float32)).astype(x.dtype) for c in (cos, sin))  # (T, R/2)
    xr = x[..., :r]
    if convention == "interleaved":
        xa, xb = xr[..., 0::2], xr[..., 1::2]
    else:
        xa, xb = xr[..., : r // 2], xr[..., r // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        yr = mx.stack([ya, yb], axis=-1).reshape(xr.shape)
    else:
        yr = mx.concatenate([ya, yb], axis=-1)
    return yr if r == x.shape[-1] else mx.concatenate([yr, x[..., r:]], axis=-1)


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    """inv_freq (K/2,) and the attention factor (0-d), float64, under transformers' rope_type
    rules: configuration numbers, computed once for every backend (backends/_rope.py)."""
    inv_freq, m = rope_rules.frequencies(**locals())  # the attributes, as given
    return _host(inv_freq), _host(m)


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on the host);
    the result has the table's dtype, shaped (H, T, S).
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return mx.transpose(table[mx.array(b.astype(np.int32))], (2, 0, 1))  # (H, T, S)
