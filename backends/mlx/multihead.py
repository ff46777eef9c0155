"""Self-attention (one head) and multi-head attention over the fused (D, H*K) layout."""

from __future__ import annotations

from .. import _checks as check
from . import _core
from ._core import floating
from .attention import sdpa


def _linear(x, p, w: str, b: str, d_in: int, d_out: int | None = None):
    """x W + b over the last axis; b is optional."""
    weight = check.param(_core, p, w, (d_in, d_out), x, "the input")
    y = x @ weight
    bias = p.get(b, (weight.shape[1],))
    return y if bias is None else y + check.param(_core, p, b, None, x, "the input")


def self_attention(x, mask=None, *, scale=None, params):
    """Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V; sdpa(Q, K, V, mask, scale)."""
    x = floating("x", x)
    b, t, d = check.rank("x", x, min_rank=3, max_rank=3)
    p = check.params_of(params)
    q = _linear(x, p, "w_q", "b_q", d)  # (B, T, K)
    k = _linear(x, p, "w_k", "b_k", d, q.shape[-1])  # (B, T, K)
    v = _linear(x, p, "w_v", "b_v", d)  # (B, T, V)
    mask = check.mask_of(_core, mask, (b, t, t), x)
    return sdpa(q, k, v, mask, scale=scale)


def _split_heads(x, heads: int):
    """(B, T, H*K) -> (B, H, T, K): head h takes columns h*K:(h+1)*K."""
    b, t, width = x.shape
    return x.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3)


def mha(query, key, value, mask=None, *, num_heads, params, num_kv_heads=None):
    """Multi-head attention (Vaswani et al. 2017, §3.2.2), fused projections, grouped kv heads."""
    query, key, value = floating("query", query), floating("key", key), floating("value", value)
    b, t, s, d_k, d_v = check.sequences(query, key, value, ("query", "key", "value"),
                                        same_width=False)
    d_q = check.shape(query)[-1]
    p = check.params_of(params)
    heads, kv_heads, hk, kv_k, hv = check.heads(p, num_heads, d_q, d_v, num_kv_heads)
    mask = check.mask_of(_core, mask, (b, heads, t, s), query)
    q = _split_heads(_linear(query, p, "w_q", "b_q", d_q), heads)  # (B, H, T, K)
    k = _split_heads(_linear(key, p, "w_k", "b_k", d_k, kv_k), kv_heads)  # (B, H_kv, S, K)
    v = _split_heads(_linear(value, p, "w_v", "b_v", d_v), kv_heads)  # (B, H_kv, S, V)
    grouped = None if kv_heads == heads else kv_heads
    heads_out, weights = sdpa(q, k, v, mask, num_kv_heads=grouped)  # (B, H, T, V), (B, H, T, S)
    concat = heads_out.transpose(0, 2, 1, 3).reshape(b, t, hv)  # (B, T, H*V)
    return _linear(concat, p, "w_o", "b_o", hv), weights
