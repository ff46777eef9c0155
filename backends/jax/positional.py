"""Positions: sinusoidal and learned absolute encodings, Shaw et al. relative
attention, rotary position embedding (RoPE), ALiBi."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from .. import _rope as rope_rules
from ..numpy import positional as numpy_positional  # the host-built tables
from . import buckets, ops
from ._core import boolean, const, floating, host, integers, weighted_sum
from .attention import _softmax_core


def sinusoidal_pe(*, length, d_model, offset=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    pos = offset + row; column c uses i = c // 2 and the actual D (odd D: the last
    column is a sin without a cos partner). Returned in float64.
    A table of constants: the NumPy backend's code builds it on the host, so nothing is
    compiled for its shape.
    """
    return host(numpy_positional.sinusoidal_pe(length=length, d_model=d_model, offset=offset))


def alibi_bias(*, num_heads, t, s):
    """ALiBi (Press et al. 2022): bias[h, i, j] = -m_h (p_i - j), p_i = i + (S - T).

    The slopes m_h come from ``_checks.alibi_slopes``. Returned in float64, shaped
    (H, T, S): sdpa's bias input. Built on the host (the NumPy backend's code), as above.
    """
    return host(numpy_positional.alibi_bias(num_heads=num_heads, t=t, s=s))


def learned_pe(positions, *, params):
    """pe[...] = table[positions[...]], table of shape (max_len, D)."""
    table = floating("table", check.params_of(params).require("table", (None, None)))
    positions = integers("positions", positions)
    max_len = table.shape[0]
    values = np.asarray(positions)  # the range check reads values: on the host
    if values.size and (values.min() < 0 or values.max() >= max_len):
        raise DomainError(f"positions must be in [0, max_len) with max_len={max_len} "
                          f"(table {table.shape}), got values in [{values.min()}, "
                          f"{values.max()}]")
    # a gather: on the host where the table is concrete (buckets.gathered)
    return buckets.gathered(lambda t: _rows(t, positions), table, values)  # (..., D)


@jax.jit
def _rows(table, positions):
    return table[positions]


def _relative_rows(t: int, s: int, m: int) -> np.ndarray:
    """clip(j - i, -m, m) + m for query i in 0..T-1 and key j in 0..S-1."""
    return np.clip(np.arange(s)[None, :] - np.arange(t)[:, None], -m, m) + m  # (T, S)


@jax.jit
def _relative(q, k, v, keep, rel_k, rel_v, rows, c):
    a_k, a_v = rel_k[rows], rel_v[rows]  # (T, S, K), (T, S, V)
    e = (q @ jnp.swapaxes(k, -1, -2) + jnp.einsum("btk,tsk->bts", q, a_k)) * c  # (B, T, S)
    alpha = _softmax_core(e, keep, -1)  # (B, T, S)
    z = weighted_sum(alpha, v) + jnp.einsum("bts,tsv->btv", alpha, a_v)  # (B, T, V)
    return z, alpha


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
    keep = True
    if mask is not None:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, (b, t, s))
    c, rows = const(q, check.scale(scale, kw)), _relative_rows(t, s, m)
    B, T, S, K, V = (buckets.size(n) for n in (b, t, s, kw, vw))
    if not (buckets.applies(q, k, v, mask, rel_k, rel_v) and buckets.small((B, T, S, max(K, V)))):
        return _relative(q, k, v, keep, rel_k, rel_v, rows, c)
    # bucketed (buckets.py): padded keys masked; padded rows of the index table read row 0
    inputs = (buckets.pad(q, (B, T, K)), buckets.pad(k, (B, S, K)), buckets.pad(v, (B, S, V)),
              buckets.keep(mask, (b, t, s), (B, T, S)), buckets.pad(rel_k, (2 * m + 1, K)),
              buckets.pad(rel_v, (2 * m + 1, V)), buckets.pad(rows, (T, S)))
    z, alpha = _relative(*buckets.on_device(*inputs), c)
    return (buckets.cut(z, slice(0, b), slice(0, t), slice(0, vw)),
            buckets.cut(alpha, slice(0, b), slice(0, t), slice(0, s)))


@functools.partial(jax.jit, static_argnames="half")
def _rotate(x, cos, sin, half):
    kw = x.shape[-1]
    if half:
        xa, xb = x[..., : kw // 2], x[..., kw // 2:]
    else:
        xa, xb = x[..., 0::2], x[..., 1::2]
    ya, yb = xa * cos - xb * sin, xa * sin + xb * cos
    if half:
        return jnp.concatenate([ya, yb], axis=-1)
    return jnp.stack([ya, yb], axis=-1).reshape(x.shape)


def rope(x, *, offset=0, base=10000.0, convention="interleaved", rotary_dim=None, scaling=None):
    """Rotate feature pairs (a, b) of row t by p * theta_i, p = offset + t,
    theta_i = base^(-2i/R):  y_a = m (x_a cos - x_b sin),  y_b = m (x_a sin + x_b cos).

    "interleaved" pairs (2i, 2i+1) (RoFormer, GPT-J); "half" pairs (i, i + R/2)
    (GPT-NeoX, Hugging Face rotate_half). Only the first R = rotary_dim features (None: K)
    are rotated, the rest pass through; `scaling` (transformers' rope_parameters) gives theta
    and m through rope_frequencies (m = 1 without it).
    """
    x = floating("x", x)
    # the angles in float64 on the host (NumPy), as the spec computes them, then cast
    cos, sin, r = rope_rules.tables(x.shape, offset, base, convention, rotary_dim, scaling)
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)  # (T, R/2)
    if r == x.shape[-1]:
        return _rope_rows(x, cos, sin, convention == "half")
    # the rotated features and the rest, sliced and joined on the host where x is concrete
    head, rest = (buckets.sliced(x, (Ellipsis, part)) for part in (slice(0, r), slice(r, None)))
    return ops.concat([_rope_rows(head, cos, sin, convention == "half"), rest], axis=-1)


def _rope_rows(x, cos, sin, half):
    """Every feature pair of x rotated by the (T, K/2) tables cos, sin."""
    *lead, t, kw = x.shape
    n = math.prod(lead)
    N, T = buckets.size(n), buckets.size(t)
    if buckets.small((N, T, kw)) and buckets.traced(x):  # under jax.vjp: bucketed VJP too
        def backward(a, ct):
            xp, cp = (buckets.pad(np.asarray(y).reshape((n, t, kw)), (N, T, kw)) for y in (a[0], ct))
            g = buckets.vjp_of(_rotate, (("half", half),))(
                buckets.on_device(xp, buckets.pad(cos, (T, kw // 2)),
                                  buckets.pad(sin, (T, kw // 2))), *buckets.on_device(cp))[0]
            return buckets.cut(np.asarray(g)[:n, :t].reshape(x.shape), ...), None, None
        return buckets.differentiable(lambda x, c, s: _rope_rows(x, c, s, half), backward,
                                      lambda x, c, s: _rotate(x, c, s, half),  # c, s: traced under jax.jit
                                      x, cos, sin)
    if not (buckets.applies(x) and buckets.small((N, T, kw))):
        return _rotate(x, host(cos), host(sin), half)
    # bucketed (buckets.py): leading axes flattened, rows and positions padded, then cut
    xp = buckets.pad(np.asarray(x).reshape((n, t, kw)), (N, T, kw))
    y = _rotate(*buckets.on_device(xp, buckets.pad(cos, (T, kw // 2)),
                                   buckets.pad(sin, (T, kw // 2))), half)
    return buckets.cut(np.asarray(y)[:n, :t].reshape(x.shape), ...)


def rope_frequencies(*, head_dim, base=10000.0, rope_type="default", seq_len=None, factor=None,
                     original_max_position_embeddings=None, max_position_embeddings=None,
                     beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None,
                     attention_factor=None, low_freq_factor=None, high_freq_factor=None,
                     short_factor=None, long_factor=None, truncate=True):
    """inv_freq (K/2,) and the attention factor (0-d), float64, under transformers' rope_type
    rules: configuration numbers, computed once for every backend (backends/_rope.py)."""
    inv_freq, m = rope_rules.frequencies(**locals())  # the attributes, as given
    return host(inv_freq), host(np.float64(m))


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    """bias[h, i, j] = table[bucket(j - (offset + i)), h] (T5; spec/components/t5_bias.md).

    The buckets come from ``_checks.t5_buckets`` (one copy for every backend, on the host);
    the result has the table's dtype, shaped (H, T, S).
    """
    b = check.t5_buckets(t, s, bidirectional, num_buckets, max_distance, offset)  # (T, S)
    table = floating("table", check.params_of(params).require("table", (num_buckets, None)))
    # a gather and a transpose: on the host where the table is concrete (buckets.moved)
    rows = buckets.gathered(lambda t: _rows(t, b), table, b)  # (T, S, H)
    return buckets.moved(lambda r: jnp.transpose(r, (2, 0, 1)),
                         lambda r: np.transpose(r, (2, 0, 1)),
                         lambda g: np.transpose(g, (1, 2, 0)), rows)  # (H, T, S)
