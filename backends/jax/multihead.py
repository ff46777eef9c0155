"""Self-attention (one head) and multi-head attention over the fused (D, H*K) layout."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks as check
from . import _core, buckets
from ._core import const, floating
from .attention import _sdpa, sdpa


def _linear(x, p, w: str, b: str, d_in: int, d_out: int | None = None):
    """x W + b over the last axis; b is optional."""
    weight = check.param(_core, p, w, (d_in, d_out), x, "the input")
    bias = p.get(b, (weight.shape[1],))
    bias = None if bias is None else check.param(_core, p, b, None, x, "the input")
    return buckets.rowwise(_affine, x, weight, bias)


@jax.jit
def _affine(x, w, b):
    return x @ w if b is None else x @ w + b  # one compilation, not one per primitive


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


@functools.partial(jax.jit, static_argnums=1)
def _split_heads(x, heads: int):
    """(B, T, H*K) -> (B, H, T, K): head h takes columns h*K:(h+1)*K."""
    b, t, width = x.shape
    return x.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3)


def split_heads(x, heads: int):
    """(B, T, H*K) -> (B, H, T, K) (the composites' op): moved on the host where x is
    concrete, and under jax.vjp of concrete arrays (buckets.moved)."""
    b, t, width = x.shape
    return buckets.moved(lambda x: _split_heads(x, heads),
                         lambda a: a.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3),
                         lambda g: g.transpose(0, 2, 1, 3).reshape(b, t, width), x)


def _weights(p, d_q: int, d_k: int, d_v: int, hk: int, hv: int, like) -> dict:
    """The mha parameters, shape-checked (ParameterError naming the path) and of ``like``'s
    dtype (DTypeError); biases may be None."""
    w = {"w_q": p.require("w_q", (d_q, None)), "w_k": p.require("w_k", (d_k, hk)),
         "w_v": p.require("w_v", (d_v, None))}
    w["w_o"] = p.require("w_o", (hv, None))
    for name in list(w):
        w[name] = check.param(_core, p, name, None, like, "the input")
        b = "b" + name[1:]
        bias = p.get(b, (w[name].shape[1],))
        w[b] = None if bias is None else check.param(_core, p, b, None, like, "the input")
    return w


def _project(x, w, b):
    return x @ w if b is None else x @ w + b


@functools.partial(jax.jit, static_argnames=("heads", "kv_heads"))
def _mha(query, key, value, mask, w, c, heads, kv_heads):
    b, t, _ = query.shape
    q = _split_heads(_project(query, w["w_q"], w["b_q"]), heads)  # (B, H, T, K)
    k = _split_heads(_project(key, w["w_k"], w["b_k"]), kv_heads)  # (B, H_kv, S, K)
    v = _split_heads(_project(value, w["w_v"], w["b_v"]), kv_heads)  # (B, H_kv, S, V)
    # query head h reads kv head h // (H / H_kv)
    k, v = jnp.repeat(k, heads // kv_heads, axis=1), jnp.repeat(v, heads // kv_heads, axis=1)
    heads_out, weights = _sdpa(q, k, v, mask, None, c, (b, heads, t, k.shape[2]))
    concat = heads_out.transpose(0, 2, 1, 3).reshape(b, t, -1)  # (B, T, H*V)
    return _project(concat, w["w_o"], w["b_o"]), weights


def mha(query, key, value, mask=None, *, num_heads, params, num_kv_heads=None):
    """Multi-head attention (Vaswani et al. 2017, §3.2.2), fused projections.

    Q = query W_q + b_q (B, T, H*K), K = key W_k + b_k (B, S, H_kv*K),
    V = value W_v + b_v (B, S, H_kv*V), H_kv = num_kv_heads (None: H);
    head_h = sdpa(Q_h, K_g, V_g, mask) with Q_h the columns h*K:(h+1)*K and g = h // (H / H_kv)
    (grouped-query attention), scale 1/sqrt(K);
    output = concat_h(head_h) W_o + b_o; weights (B, H, T, S) per head.
    """
    query = floating("query", query)
    key, value = (check.like(_core, n, floating(n, x), "query", query)
                  for n, x in (("key", key), ("value", value)))
    b, t, s, d_k, d_v = check.sequences(query, key, value, ("query", "key", "value"),
                                        same_width=False)
    d_q = check.shape(query)[-1]
    p = check.params_of(params)
    heads, kv_heads, hk, kv_k, hv = check.heads(p, num_heads, d_q, d_v, num_kv_heads)
    mask = check.mask_of(_core, mask, (b, heads, t, s), query)
    c = const(query, check.scale(None, hk // heads))  # 1/sqrt(K)
    w = _weights(p, d_q, d_k, d_v, kv_k, hv, query)
    return _mha_bucketed(query, key, value, mask, w, c, heads, kv_heads)


W_NAMES = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")


def _mha_bucketed(query, key, value, mask, w, c, heads, kv_heads):
    """_mha at bucket sizes (buckets.py): batch, queries and keys padded (padded keys
    masked out); the model widths and each head's K and V padded with zeros, in the inputs
    and in the weights' rows and columns alike; missing biases given as zeros. Under
    jax.vjp of concrete arrays the forward and the pullback run at the same bucket sizes
    (buckets.differentiable; the padding is a copy into zeros, so the cotangents are the
    padded pullback's, cut back)."""
    sizes = _mha_sizes(query, key, value, w, heads, kv_heads)
    if not buckets.small(*sizes["limits"]):
        return _mha(query, key, value, mask, w, c, heads, kv_heads)
    if buckets.traced(query, key, value, *w.values()) and not isinstance(mask, jax.core.Tracer):
        names = tuple(n for n in W_NAMES if w[n] is not None)

        def exact(q, k, v, *ws):
            return _mha(q, k, v, mask, {**w, **dict(zip(names, ws))}, c, heads, kv_heads)

        def forward(q, k, v, *ws):
            return _mha_padded(q, k, v, mask, {**w, **dict(zip(names, ws))}, c, heads,
                               kv_heads, sizes)

        def backward(primals, cts):
            q, k, v, *ws = primals
            return _mha_pullback_padded(q, k, v, mask, {**w, **dict(zip(names, ws))}, c,
                                        heads, kv_heads, sizes, cts, names)

        return buckets.differentiable(forward, backward, exact, query, key, value,
                                      *(w[n] for n in names))
    if not buckets.applies(query, key, value, mask, *w.values()):
        return _mha(query, key, value, mask, w, c, heads, kv_heads)
    return _mha_padded(query, key, value, mask, w, c, heads, kv_heads, sizes)


def _mha_sizes(query, key, value, w, heads, kv_heads) -> dict:
    (b, t, d_q), (s, d_k), d_v = query.shape, key.shape[1:], value.shape[-1]
    k_w, v_w, d_o = w["w_q"].shape[1] // heads, w["w_v"].shape[1] // kv_heads, w["w_o"].shape[1]
    exact = dict(b=b, t=t, s=s, d_q=d_q, d_k=d_k, d_v=d_v, k_w=k_w, v_w=v_w, d_o=d_o)
    B, T, S, DQ, DK, DV, K, V, DO = (buckets.size(n) for n in exact.values())
    return {**exact, "B": B, "T": T, "S": S, "DQ": DQ, "DK": DK, "DV": DV, "K": K, "V": V,
            "DO": DO, "limits": ((B, heads, T, S), (B, S, max(DK, DV)),
                                 (max(DQ, DK, DV, heads * V), max(heads * K, heads * V, DO)))}


def _heads_padded(x, rows, n_heads, width, rows_to, width_to, dtype):  # (R, h*W) -> (R', h*W')
    x = np.zeros((rows, n_heads * width), dtype) if x is None else np.asarray(x)
    x = buckets.pad(x.reshape(rows, n_heads, width), (rows_to, n_heads, width_to))
    return x.reshape(rows_to, n_heads * width_to)


def _heads_cut(g, rows, n_heads, width, rows_to, width_to):  # the adjoint: (R', h*W') -> (R, h*W)
    g = np.asarray(g).reshape(rows_to, n_heads, width_to)[:rows, :, :width]
    return g.reshape(rows, n_heads * width)


def _mha_padded_args(query, key, value, mask, w, heads, kv_heads, z):
    """The padded inputs (query, key, value, keep) and weights, on the device."""
    dt = query.dtype
    hp = functools.partial(_heads_padded, dtype=dt)
    wp = {"w_q": hp(w["w_q"], z["d_q"], heads, z["k_w"], z["DQ"], z["K"]),
          "b_q": hp(w["b_q"], 1, heads, z["k_w"], 1, z["K"])[0],
          "w_k": hp(w["w_k"], z["d_k"], kv_heads, z["k_w"], z["DK"], z["K"]),
          "b_k": hp(w["b_k"], 1, kv_heads, z["k_w"], 1, z["K"])[0],
          "w_v": hp(w["w_v"], z["d_v"], kv_heads, z["v_w"], z["DV"], z["V"]),
          "b_v": hp(w["b_v"], 1, kv_heads, z["v_w"], 1, z["V"])[0],
          # w_o's rows are the heads' value columns: padded per head, as w_v's columns
          "w_o": hp(np.asarray(w["w_o"]).T, z["d_o"], heads, z["v_w"], z["DO"], z["V"]).T,
          "b_o": buckets.pad(np.zeros(z["d_o"], dt) if w["b_o"] is None else w["b_o"],
                             (z["DO"],))}
    inputs = (buckets.pad(query, (z["B"], z["T"], z["DQ"])),
              buckets.pad(key, (z["B"], z["S"], z["DK"])),
              buckets.pad(value, (z["B"], z["S"], z["DV"])),
              buckets.keep(mask, (z["b"], heads, z["t"], z["s"]), (z["B"], heads, z["T"], z["S"])))
    return buckets.on_device(*inputs), dict(zip(wp, buckets.on_device(*wp.values())))


def _mha_padded(query, key, value, mask, w, c, heads, kv_heads, z):
    inputs, wp = _mha_padded_args(query, key, value, mask, w, heads, kv_heads, z)
    out, weights = _mha(*inputs, wp, c, heads, kv_heads)
    return (buckets.cut(out, slice(0, z["b"]), slice(0, z["t"]), slice(0, z["d_o"])),
            buckets.cut(weights, slice(0, z["b"]), slice(None), slice(0, z["t"]),
                        slice(0, z["s"])))


@functools.partial(jax.jit, static_argnames=("heads", "kv_heads"))
def _mha_pullback(query, key, value, mask, w, c, cts, heads, kv_heads):
    """The cotangents of (query, key, value, w) of _mha for the cotangents of (out, weights):
    one program per bucket (c an argument, not a constant)."""
    _, pull = jax.vjp(lambda q, k, v, w: _mha(q, k, v, mask, w, c, heads, kv_heads),
                      query, key, value, w)
    return pull(cts)


def _mha_pullback_padded(query, key, value, mask, w, c, heads, kv_heads, z, cts, names):
    (q, k, v, keep), wp = _mha_padded_args(query, key, value, mask, w, heads, kv_heads, z)
    ct_out, ct_weights = (np.asarray(ct) for ct in cts)
    cps = buckets.on_device(buckets.pad(ct_out, (z["B"], z["T"], z["DO"])),
                            buckets.pad(ct_weights, (z["B"], heads, z["T"], z["S"])))
    gq, gk, gv, gw = _mha_pullback(q, k, v, keep, wp, c, cps, heads, kv_heads)
    hc = _heads_cut
    cut = {"w_q": lambda g: hc(g, z["d_q"], heads, z["k_w"], z["DQ"], z["K"]),
           "b_q": lambda g: hc(g, 1, heads, z["k_w"], 1, z["K"])[0],
           "w_k": lambda g: hc(g, z["d_k"], kv_heads, z["k_w"], z["DK"], z["K"]),
           "b_k": lambda g: hc(g, 1, kv_heads, z["k_w"], 1, z["K"])[0],
           "w_v": lambda g: hc(g, z["d_v"], kv_heads, z["v_w"], z["DV"], z["V"]),
           "b_v": lambda g: hc(g, 1, kv_heads, z["v_w"], 1, z["V"])[0],
           "w_o": lambda g: hc(np.asarray(g).T, z["d_o"], heads, z["v_w"], z["DO"], z["V"]).T,
           "b_o": lambda g: np.asarray(g)[:z["d_o"]]}
    grads = (np.asarray(gq)[:z["b"], :z["t"], :z["d_q"]], np.asarray(gk)[:z["b"], :z["s"], :z["d_k"]],
             np.asarray(gv)[:z["b"], :z["s"], :z["d_v"]], *(cut[n](gw[n]) for n in names))
    return buckets.on_device(*(np.ascontiguousarray(g) for g in grads))
