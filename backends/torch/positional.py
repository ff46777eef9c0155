"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative
attention, rotary position embedding (RoPE)."""

from __future__ import annotations

import torch
from attnspec.spec.errors import DomainError

from .. import _checks as check
from .. import _rope as rope_rules
from ._core import boolean, floating, integers, param
from .attention import softmax, weighted_sum


def sinusoidal_pe(*, length, d_model, offset=0, device=None):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    pos = offset + row; column c uses i = c // 2 and the actual D (odd D: the last
    column is a sin without a cos partner). Returned in float64 (on ``device``, torch only).
    """
    length = check.integer("length", length, lo=0)
    d_model = check.integer("d_model", d_model, lo=1)
    offset = check.integer("offset", offset, lo=0)
    f64 = dict(dtype=torch.float64, device=device)
    pos = torch.arange(offset, offset + length, **f64)[:, None]  # (length, 1)
    i = torch.arange(d_model, device=device) // 2  # (D,)
    angle = pos / 10000.0 ** (2.0 * i.to(torch.float64) / d_model)  # (length, D)
    even = torch.arange(d_model, device=device) % 2 == 0
    return torch.where(even, torch.sin(angle), torch.cos(angle))


def alibi_bias(*, num_heads, t, s, device=None):
    """ALiBi (Press et al. 2022): bias[h, i, j] = -m_h (p_i - j), p_i = i + (S - T).

    The slopes m_h come from ``_checks.alibi_slopes`` (one copy for every backend).
    Returned in float64 (on ``device``, torch only), shaped (H, T, S): sdpa's bias input.
    """
    slopes = check.alibi_slopes(num_heads)
    t, s = check.integer("t", t, lo=0), check.integer("s", s, lo=0)
    f64 = dict(dtype=torch.float64, device=device)
    m = torch.tensor(slopes, **f64)                      # (H,)
    p = torch.arange(t, **f64)[:, None] + (s - t)        # (T, 1) absolute query positions
    j = torch.arange(s, **f64)[None, :]                  # (1, S)
    return -m[:, None, None] * (p - j)                   # (H, T, S)


def learned_pe(positions, *, params):
    """pe[...] = table[positions[...]], table of shape (max_len, D)."""
    table = floating("table", check.params_of(params).require("table", (None, None)))
    positions = integers("positions", positions, table)
    max_len = table.shape[0]
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= max_len):
        raise DomainError(f"positions must be in [0, max_len) with max_len={max_len} "
                          f"(table {tuple(table.shape)}), got values in "
                          f"[{int(positions.min())}, {int(positions.max())}]")
    return table[positions]  # (..., D)


def _relative_rows(t: int, s: int, m: int, device) -> torch.Tensor:
    """clip(j - i, -m, m) + m for query i in 0..T-1 and key j in 0..S-1."""
    j, i = torch.arange(s, device=device), torch.arange(t, device=device)
    return torch.clamp(j[None, :] - i[:, None], -m, m) + m  # (T, S)


def relative_attention(q, k, v, mask=None, *, max_distance, scale=None, params):
    """e_ij = q_i . (k_j + a^K_ij) * scale,  z_i = sum_j softmax_j(e_ij) (v_j + a^V_ij).

    a^K_ij = rel_k[clip(j - i, -m, m) + m], a^V_ij likewise from rel_v (Shaw et al. 2018);
    query i is at position i, key j at position j; scale defaults to 1/sqrt(K).
    """
    q = floating("q", q)
    k, v = floating("k", k, q), floating("v", v, q)
    b, t, s, kw, vw = check.sequences(q, k, v)
    m = check.integer("max_distance", max_distance, lo=0)
    p = check.params_of(params)
    rel_k = param(p, "rel_k", (2 * m + 1, kw), q)
    rel_v = param(p, "rel_v", (2 * m + 1, vw), q)
    keep = torch.ones((b, t, s), dtype=torch.bool, device=q.device)
    if mask is not None:
        mask = boolean("mask", mask, q)
        check.broadcastable("mask", mask, (b, t, s))
        keep = mask.expand(b, t, s)
    scale = check.scale(scale, kw)
    rows = _relative_rows(t, s, m, q.device)
    a_k, a_v = rel_k[rows], rel_v[rows]  # (T, S, K), (T, S, V)
    e = (q @ k.transpose(-1, -2) + torch.einsum("btk,tsk->bts", q, a_k)) * scale
    alpha = softmax(e, keep)  # (B, T, S)
    z = weighted_sum(alpha, v) + torch.einsum("bts,tsv->btv", alpha, a_v)  # (B, T, V)
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
    cos, sin, r = rope_rules.tables(x.shape, offset, base, convention, rotary_dim, scaling)
    # the float64 tables cast on the host, then moved (a device may lack float64)
    cos, sin = (torch.from_numpy(c).to(x.dtype).to(x.device) for c in (cos, sin))  # (T, R/2)
    xr = x[..., :r]
    if convention == "interleaved":
        xa, xb = xr[..., 0::2], xr[..., 1::2]
    else:
        xa, xb = xr[..., : r // 2], xr[..., r // 2:]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if convention == "interleaved":
        yr = torch.stack([ya, yb], dim=-1).reshape(xr.shape)
    else:
        yr = torch.cat([ya, yb], dim=-1)
    return yr if r == x.shape[-1] else torch.cat([yr, x[..., r:]], dim=-1)


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    """inv_freq (K/2,) and the attention factor (0-d), float64, under transformers' rope_type
    rules: configuration numbers, computed once for every backend (backends/_rope.py)."""
    inv_freq, m = rope_rules.frequencies(**locals())  # the attributes, as given
    return torch.from_numpy(inv_freq), torch.tensor(m, dtype=torch.float64)


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on integers);
    the result has the table's dtype and device, shaped (H, T, S): sdpa's bias input.
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    return table[torch.as_tensor(b, device=table.device)].permute(2, 0, 1)  # (H, T, S)
