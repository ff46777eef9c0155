"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative attention,
rotary position embedding (RoPE). The angles and slopes are computed on the host in float64
(NumPy) and rounded once: MLX's own sin and cos are float32-accurate."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import ConfigError, DomainError, ShapeError

from .. import _checks as check
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


def rope(x, *, offset=0, base=10000.0, convention="interleaved"):
    """Rotate feature pairs (a, b) of row t by p * theta_i, p = offset + t, theta_i =
    base^(-2i/K): y_a = x_a cos - x_b sin, y_b = x_a sin + x_b cos; "interleaved" pairs
    (2i, 2i+1), "half" pairs (i, i + K/2)."""
    x = floating("x", x)
    *_, t, kw = check.rank("x", x, min_rank=2)
    if kw % 2:
        raise ShapeError(f"rope needs an even feature width, x has shape {tuple(x.shape)}")
    offset = check.integer("offset", offset, lo=0)
    convention = check.choice("convention", convention, ("interleaved", "half"))
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ConfigError(f"base must be a positive number, got {base!r}")
    theta = float(base) ** (-2.0 * np.arange(kw // 2) / kw)  # (K/2,)
    angle = np.arange(offset, offset + t, dtype=np.float64)[:, None] * theta  # (T, K/2)
    cos, sin = (mx.array(f(angle).astype(np.float32)).astype(x.dtype) for f in (np.cos, np.sin))
    if convention == "interleaved":
        xa, xb = x[..., 0::2], x[..., 1::2]
    else:
        xa, xb = x[..., : kw // 2], x[..., kw // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        return mx.stack([ya, yb], axis=-1).reshape(x.shape)
    return mx.concatenate([ya, yb], axis=-1)


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on the host);
    the result has the table's dtype, shaped (H, T, S).
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return mx.transpose(table[mx.array(b.astype(np.int32))], (2, 0, 1))  # (H, T, S)
