"""Self-attention (one head) and multi-head attention over the fused (D, H*K) layout."""

from __future__ import annotations

import numpy as np

from .. import _checks as check
from . import _core
from ._core import floating
from .attention import sdpa, sdpa_vjp


def _linear(x, p, w: str, b: str, d_in: int, d_out: int | None = None):
    """x W + b over the last axis; b is optional."""
    weight = check.param(_core, p, w, (d_in, d_out), x, "the input")
    y = x @ weight
    bias = p.get(b, (weight.shape[1],))
    return y if bias is None else y + check.param(_core, p, b, None, x, "the input")


def self_attention(x, mask=None, *, scale=None, params):
    """Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V; sdpa(Q, K, V, mask, scale).

    Biases are optional; scale None means 1/sqrt(K).
    """
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
    """Multi-head attention (Vaswani et al. 2017, §3.2.2), fused projections.

    Q = query W_q + b_q (B, T, H*K), K = key W_k + b_k (B, S, H_kv*K),
    V = value W_v + b_v (B, S, H_kv*V), H_kv = num_kv_heads (None: H);
    head_h = sdpa(Q_h, K_g, V_g, mask) with Q_h the columns h*K:(h+1)*K and g = h // (H / H_kv)
    (grouped-query attention), scale 1/sqrt(K);
    output = concat_h(head_h) W_o + b_o; weights (B, H, T, S) per head.
    """
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


# -- backward (vector-Jacobian products) ---------------------------------------------------

def _merge_heads(x):
    """(B, H, T, K) -> (B, T, H*K)."""
    b, h, t, k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * k)


# y = x W + b over the last axis:  dx = dy W^T,  dW = x^T dy,  db = sum dy   (over every token)
def _linear_vjp(x, p, w: str, b: str, dy, grads: dict):
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # (N, D), (N, F)
    grads[w] = x2.T @ dy2
    if b in p:
        grads[b] = dy2.sum(axis=0)
    return dy @ np.asarray(p[w], dtype=dy.dtype).T


def _project(x, p, w: str, b: str):
    y = x @ np.asarray(p[w], dtype=x.dtype)
    return y + np.asarray(p[b], dtype=x.dtype) if b in p else y


def _cotangent(cotangents, name, like):
    c = cotangents.get(name)
    return np.zeros_like(like) if c is None else np.asarray(c, dtype=like.dtype)


# Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V, (O, W) = sdpa(Q, K, V, mask, scale):
#   dQ, dK, dV = sdpa_vjp(dO, dW),  dx = dQ W_Q^T + dK W_K^T + dV W_V^T   (x feeds all three),
#   dW_Q = x^T dQ,  db_Q = sum dQ   (K, V alike)
def self_attention_vjp(cotangents, x, mask=None, *, scale=None, params):
    self_attention(x, mask, scale=scale, params=params)  # the forward's checks
    x = floating("x", x)
    q, k, v = (_project(x, params, f"w_{n}", f"b_{n}") for n in "qkv")  # (B, T, K|V)
    g, _ = sdpa_vjp(cotangents, q, k, v, mask, scale=scale)
    grads = {}
    dx = sum(_linear_vjp(x, params, f"w_{n}", f"b_{n}", g[n], grads) for n in "qkv")
    return {"x": dx}, grads


# Q = query W_q + b_q (B, H, T, K), K = key W_k + b_k (B, H_kv, S, K), V alike,
# O = concat_h(sdpa(Q_h, K_g, V_g)) W_o + b_o, g = h // (H / H_kv):
#   dconcat = dO W_o^T,  dW_o = concat^T dO,  db_o = sum dO   (sums over B and T)
#   dQ, dK, dV = sdpa_vjp per head (dK, dV of a kv head summed over its group of query heads)
#   dquery = dQ W_q^T,  dW_q = query^T dQ,  db_q = sum dQ   (key, value alike)
def mha_vjp(cotangents, query, key, value, mask=None, *, num_heads, params,
            num_kv_heads=None):
    output, weights = mha(query, key, value, mask, num_heads=num_heads, params=params,
                          num_kv_heads=num_kv_heads)
    query, key, value = floating("query", query), floating("key", key), floating("value", value)
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    q = _split_heads(_project(query, params, "w_q", "b_q"), num_heads)  # (B, H, T, K)
    k = _split_heads(_project(key, params, "w_k", "b_k"), kv_heads)  # (B, H_kv, S, K)
    v = _split_heads(_project(value, params, "w_v", "b_v"), kv_heads)  # (B, H_kv, S, V)
    grouped = None if kv_heads == num_heads else kv_heads
    heads_out, _ = sdpa(q, k, v, mask, num_kv_heads=grouped)  # (B, H, T, V)
    grads = {}
    dconcat = _linear_vjp(_merge_heads(heads_out), params, "w_o", "b_o",
                          _cotangent(cotangents, "output", output), grads)  # (B, T, H*V)
    head_cot = {"output": _split_heads(dconcat, num_heads)}  # (B, H, T, V)
    if "weights" in cotangents:
        head_cot["weights"] = cotangents["weights"]
    g, _ = sdpa_vjp(head_cot, q, k, v, mask, num_kv_heads=grouped)
    dx = {"query": _linear_vjp(query, params, "w_q", "b_q", _merge_heads(g["q"]), grads),
          "key": _linear_vjp(key, params, "w_k", "b_k", _merge_heads(g["k"]), grads),
          "value": _linear_vjp(value, params, "w_v", "b_v", _merge_heads(g["v"]), grads)}
    return dx, grads
