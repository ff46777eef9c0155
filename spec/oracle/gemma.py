"""Gemma 2 / Gemma 3 decoder layer (Gemma Team 2024, 2025; transformers' Gemma2DecoderLayer,
Gemma3DecoderLayer), inference: sandwich (1 + w) RMSNorms, optional per-head QK-norm,
RoPE ("half"), grouped-query attention scaled by query_pre_attn_scalar^-1/2 with an optional
logit soft-cap and sliding window, GeGLU (tanh GELU) feed-forward, no biases.

gemma_layer, x (B, T, D), H query heads and H_kv key/value heads of width K, every
RMSNorm(.; w) = x / rms(x) * (1 + w):
    n1 = RMSNorm(x; input_norm.gamma)
    Q' = heads(n1 W_q) (B, H, T, K),  K' = heads(n1 W_k),  V = heads(n1 W_v)  (B, H_kv, T, K)
    qk_norm: Q' = RMSNorm(Q'; attn.q_norm.gamma), K' = RMSNorm(K'; attn.k_norm.gamma)  (per head)
    Q = RoPE_half(Q'), K = RoPE_half(K')       positions offset .. offset + T - 1
    (with rope_scaling: rope(scaling=rope_scaling), theta_i and the attention factor m from
    rope_frequencies(seq_len = offset + T), as llama_layer; the layer applies the scaling it
    is given whatever its window: which layers are scaled is the model's rule)
    keep[b, i, j] = mask and j <= i and (window is None or i - window < j)
    O_h = softmax(cap(s^-1/2 Q_h K_g^T), keep) V_g,  s = query_pre_attn_scalar (None: K),
          cap(z) = c tanh(z / c) (softcap c; None: none),  g = h // (H / H_kv)
    a  = concat_h(O_h) W_o                                          (attn.output)
    r1 = x + RMSNorm(a; post_attn_norm.gamma)                       (residual1.output)
    f  = W_down(gelu_tanh(n2 W_gate) * (n2 W_up)),  n2 = RMSNorm(r1; pre_ffn_norm.gamma)
    y  = r1 + RMSNorm(f; post_ffn_norm.gamma)                       (residual2.output)
"""

import mpmath

from .core import add, linear_vjp, matmul, merge, mpa, prefixed, sub, zeros
from .embedding import embedding, embedding_vjp, lm_head, lm_head_vjp
from .gated_feedforward import gated_feedforward, gated_feedforward_vjp
from .llama import heads_of, keep_mask, merge_heads
from .masks import _padding
from .rms_norm import rms_norm, rms_norm_vjp
from .rope import rope, rope_vjp
from .sdpa import sdpa, sdpa_vjp
from .softcap import softcap as softcap_fn
from .softcap import softcap_vjp

ORDER = ["attn.weights", "attn.output", "post_attn_norm.output", "residual1.output",
         "ffn.output", "post_ffn_norm.output", "residual2.output"]
UNIT = {"unit_offset": True}


def _norm(x, eps, params, name):
    return rms_norm(x, eps=eps, params=sub(params, name), **UNIT)["y"]


def _scale(query_pre_attn_scalar, width):
    s = width if query_pre_attn_scalar is None else query_pre_attn_scalar
    return 1 / mpmath.sqrt(mpmath.mpf(s))


def _qkv(n1, num_heads, num_kv_heads, qk_norm, eps, params):
    """(Q', K' before RoPE (QK-normed when asked), V, K, H, H_kv) from the normed input."""
    h_count = int(num_heads)
    h_kv = h_count if num_kv_heads is None else int(num_kv_heads)
    q_all = matmul(n1, mpa(params["w_q"]))  # (B, T, H*K)
    kw = q_all.shape[-1] // h_count
    q = heads_of(q_all, h_count, kw)                                # (B, H, T, K)
    k = heads_of(matmul(n1, mpa(params["w_k"])), h_kv, kw)          # (B, H_kv, T, K)
    v = heads_of(matmul(n1, mpa(params["w_v"])), h_kv, kw)
    if qk_norm:
        q, k = _norm(q, eps, params, "q_norm"), _norm(k, eps, params, "k_norm")
    return q, k, v, kw, h_count, h_kv


def _rot(a):
    """rope's attributes for the queries and keys: offset, base, "half", the layer's scaling."""
    return {"offset": a["offset"], "base": a["rope_base"], "convention": "half",
            "scaling": a["rope_scaling"]}


def attention(n1, keep, a, params):
    """The attention sublayer on the normed input: (output (B, T, D), weights)."""
    q, k, v, kw, _, h_kv = _qkv(n1, a["num_heads"], a["num_kv_heads"], a["qk_norm"], a["eps"],
                                params)
    rot = _rot(a)
    r = sdpa(rope(q, **rot)["y"], rope(k, **rot)["y"], v, mask=keep, num_kv_heads=h_kv,
             scale=_scale(a["query_pre_attn_scalar"], kw), softcap=a["softcap"])
    return matmul(merge_heads(r["output"]), mpa(params["w_o"])), r["weights"]


def _attrs(num_heads, num_kv_heads, eps, rope_base, offset, query_pre_attn_scalar, softcap,
           qk_norm, rope_scaling=None):
    return {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "eps": eps,
            "rope_base": rope_base, "offset": offset,
            "query_pre_attn_scalar": query_pre_attn_scalar, "softcap": softcap,
            "qk_norm": bool(qk_norm), "rope_scaling": rope_scaling}


def gemma_layer(x, mask=None, num_heads=1, num_kv_heads=None, eps=1e-6, rope_base=10000.0,
                window=None, offset=0, query_pre_attn_scalar=None, softcap=None, qk_norm=False,
                rope_scaling=None, params=None):
    a = _attrs(num_heads, num_kv_heads, eps, rope_base, offset, query_pre_attn_scalar, softcap,
               qk_norm, rope_scaling)
    x = mpa(x)
    out = {}
    n1 = _norm(x, eps, params, "input_norm")
    keep = keep_mask(x.shape[1], mask, window)
    out["attn.output"], out["attn.weights"] = attention(n1, keep, a, sub(params, "attn"))
    out["post_attn_norm.output"] = _norm(out["attn.output"], eps, params, "post_attn_norm")
    out["residual1.output"] = add(x, out["post_attn_norm.output"])
    n2 = _norm(out["residual1.output"], eps, params, "pre_ffn_norm")
    out["ffn.output"] = gated_feedforward(n2, activation="gelu_tanh",
                                          params=sub(params, "ffn"))["y"]
    out["post_ffn_norm.output"] = _norm(out["ffn.output"], eps, params, "post_ffn_norm")
    out["residual2.output"] = add(out["residual1.output"], out["post_ffn_norm.output"])
    return {"y": out["residual2.output"], **{k: out[k] for k in ORDER}}


# -- gradients -------------------------------------------------------------------------------

def _norm_vjp(dy, x, eps, params, name):
    g, p = rms_norm_vjp({"y": dy}, x, eps=eps, params=sub(params, name), **UNIT)
    return g["x"], prefixed(name, p)


def attention_vjp(da, n1, keep, a, params):
    """dA = cotangent of concat_h(O_h) W_o (B, T, D):
        dW_o = concat(O)^T dA,  dO = heads(dA W_o^T),  (dQ, dK, dV) = sdpa^T dO (scaled by
        s^-1/2, through the cap's 1 - tanh^2, GQA summed per kv head),  dQ', dK' = RoPE^T,
        qk_norm: through RMSNorm^T (with dq_norm.gamma, dk_norm.gamma),
        dW_q = n1^T concat(dQ') (likewise k, v),  dn1 = sum of concat(d.) W_.^T
    Returns (dn1, {attn.* path: grad})."""
    qn, kn, v, kw, h_count, h_kv = _qkv(n1, a["num_heads"], a["num_kv_heads"], a["qk_norm"],
                                        a["eps"], params)
    rot = _rot(a)
    q, k = rope(qn, **rot)["y"], rope(kn, **rot)["y"]
    attn = {"mask": keep, "num_kv_heads": h_kv, "scale": _scale(a["query_pre_attn_scalar"], kw),
            "softcap": a["softcap"]}
    w = {n: mpa(params[n]) for n in ("w_q", "w_k", "w_v", "w_o")}
    o = sdpa(q, k, v, **attn)["output"]
    grads = {}
    d_cat, grads["w_o"], _ = linear_vjp(merge_heads(o), w["w_o"], da)  # (B, T, H*K)
    gi, _ = sdpa_vjp({"output": heads_of(d_cat, h_count, kw)}, q, k, v, **attn)
    d = {"w_q": rope_vjp({"y": gi["q"]}, qn, **rot)[0]["x"],
         "w_k": rope_vjp({"y": gi["k"]}, kn, **rot)[0]["x"], "w_v": gi["v"]}
    if a["qk_norm"]:
        q_pre = heads_of(matmul(n1, w["w_q"]), h_count, kw)
        k_pre = heads_of(matmul(n1, w["w_k"]), h_kv, kw)
        d["w_q"], pq = _norm_vjp(d["w_q"], q_pre, a["eps"], params, "q_norm")
        d["w_k"], pk = _norm_vjp(d["w_k"], k_pre, a["eps"], params, "k_norm")
        grads.update(merge(pq, pk))
    dn1 = zeros(n1.shape)
    for name, dh in d.items():
        dn, grads[name], _ = linear_vjp(n1, w[name], merge_heads(dh))
        dn1 = dn1 + dn
    return dn1, prefixed("attn", grads)


def gemma_layer_vjp(cot, x, mask=None, num_heads=1, num_kv_heads=None, eps=1e-6,
                    rope_base=10000.0, window=None, offset=0, query_pre_attn_scalar=None,
                    softcap=None, qk_norm=False, rope_scaling=None, params=None):
    """r1 = x + N_pa(A(N_in(x))), y = r1 + N_pf2(F(N_pf1(r1))), each residual passing its
    cotangent to both branches:
        dr1 = dy + N_pf1^T F^T N_pf2^T dy,   dx = dr1 + N_in^T A^T N_pa^T dr1
    The mask (boolean) and the positions get no gradient (nor does rope_scaling: RoPE^T is
    m R^T with the scaled angles, rope_vjp)."""
    a = _attrs(num_heads, num_kv_heads, eps, rope_base, offset, query_pre_attn_scalar, softcap,
               qk_norm, rope_scaling)
    x, dy = mpa(x), mpa(cot["y"])
    n1 = _norm(x, eps, params, "input_norm")
    keep = keep_mask(x.shape[1], mask, window)
    att, _ = attention(n1, keep, a, sub(params, "attn"))
    r1 = add(x, _norm(att, eps, params, "post_attn_norm"))
    n2 = _norm(r1, eps, params, "pre_ffn_norm")
    f = gated_feedforward(n2, activation="gelu_tanh", params=sub(params, "ffn"))["y"]
    df, p_pff = _norm_vjp(dy, f, eps, params, "post_ffn_norm")
    gf, pf = gated_feedforward_vjp({"y": df}, n2, activation="gelu_tanh",
                                   params=sub(params, "ffn"))
    dn2, p_pf = _norm_vjp(gf["x"], r1, eps, params, "pre_ffn_norm")
    dr1 = dy + dn2
    datt, p_pa = _norm_vjp(dr1, att, eps, params, "post_attn_norm")
    dn1, pa = attention_vjp(datt, n1, keep, a, sub(params, "attn"))
    dx1, p_in = _norm_vjp(dn1, x, eps, params, "input_norm")
    return {"x": dr1 + dx1}, merge(p_pff, prefixed("ffn", pf), p_pf, p_pa, pa, p_in)


VJPS = {"gemma_layer": gemma_layer_vjp}


# -- the Gemma 2 model -------------------------------------------------------------------------
#
# gemma_decoder_only, ids (B, T):
#     h_0    = embed.table[ids] sqrt(D)
#     h_i+1  = gemma_layer_i(h_i, padding(ids)), offset 0, parameters layers.<i>.*; layer i
#              is global where (i + 1) % sliding_window_pattern == 0 (2: the odd layers,
#              Gemma 2's alternation; Gemma 3: 6), local otherwise; the local layers take the
#              window and rotate with rope_local_base (None: rope_base) unscaled, the global
#              ones with rope_base and rope_scaling (Gemma 3: rope_parameters["full_attention"])
#     logits = cap_f(RMSNorm(h_N; norm.gamma, unit offset) embed.table^T)   (tied head)
#     cap_f(z) = c tanh(z / c) with final_softcap c (None: the identity)

def _model_attrs(num_heads, num_kv_heads, eps, rope_base, query_pre_attn_scalar, softcap,
                 qk_norm):
    return {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "eps": eps,
            "rope_base": rope_base, "offset": 0, "query_pre_attn_scalar": query_pre_attn_scalar,
            "softcap": softcap, "qk_norm": qk_norm}


def _local(attrs, i, window, rope_local_base, rope_scaling=None, pattern=2):
    """Layer i's attributes: layer i is global where (i + 1) % pattern == 0 (pattern 2: the
    odd layers, Gemma 2's alternation; Gemma 3: 6), local otherwise. The local layers take
    the window and rope_local_base (None: rope_base) and no scaling, the global ones no
    window and rope_scaling (Gemma 3's rope_local_base_freq, the sliding_attention layers'
    rope_theta, and its rope scaling on the full_attention layers only)."""
    if (i + 1) % int(pattern) == 0:
        return {**attrs, "window": None, "rope_scaling": rope_scaling}
    base = attrs["rope_base"] if rope_local_base is None else rope_local_base
    return {**attrs, "window": window, "rope_base": base}


def gemma_decoder_only(ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None, eps=1e-6,
                       rope_base=10000.0, window=None, query_pre_attn_scalar=None, softcap=None,
                       final_softcap=None, qk_norm=False, rope_local_base=None, rope_scaling=None,
                       sliding_window_pattern=2, params=None):
    attrs = _model_attrs(num_heads, num_kv_heads, eps, rope_base, query_pre_attn_scalar,
                         softcap, qk_norm)
    h = embedding(ids, scale=True, params=sub(params, "embed"))["y"]  # (B, T, D)
    out = {"embed.output": h}
    pad = _padding(ids, pad_id)  # (B, 1, 1, T)
    for i in range(int(num_layers)):
        r = gemma_layer(h, pad, **_local(attrs, i, window, rope_local_base, rope_scaling,
                                         sliding_window_pattern),
                        params=sub(params, f"layers.{i}"))
        h = r.pop("y")
        out.update({f"layers.{i}.{k}": v for k, v in r.items()})
    h = _norm(h, eps, params, "norm")
    out["norm.output"] = h
    logits = lm_head(h, tied=True, params=sub(params, "embed"))["logits"]  # (B, T, L)
    if final_softcap is not None:
        logits = softcap_fn(logits, final_softcap)["y"]
    return {"logits": logits, **out}


def gemma_decoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None,
                           eps=1e-6, rope_base=10000.0, window=None, query_pre_attn_scalar=None,
                           softcap=None, final_softcap=None, qk_norm=False, rope_local_base=None,
                           rope_scaling=None, sliding_window_pattern=2, params=None):
    """z = N(h_N) E^T, logits = cap_f(z), h_i+1 = layer_i(h_i), h_0 = E[ids] sqrt(D):
        dz = dlogits (1 - tanh^2(z / c)),  dE += dz^T N(h_N) (the tied head),
        dh_N = N^T (dz E),  dh_i = layer_i^T dh_i+1,
        dE[l] += sqrt(D) sum of dh_0 over the positions holding id l   (the ids get none)"""
    attrs = _model_attrs(num_heads, num_kv_heads, eps, rope_base, query_pre_attn_scalar,
                         softcap, qk_norm)
    hs = [embedding(ids, scale=True, params=sub(params, "embed"))["y"]]
    pad = _padding(ids, pad_id)
    layer_attrs = [_local(attrs, i, window, rope_local_base, rope_scaling, sliding_window_pattern)
                   for i in range(int(num_layers))]
    for i, a in enumerate(layer_attrs):
        hs.append(gemma_layer(hs[-1], pad, **a, params=sub(params, f"layers.{i}"))["y"])
    n = _norm(hs[-1], eps, params, "norm")
    dz = mpa(cot["logits"])
    if final_softcap is not None:
        z = lm_head(n, tied=True, params=sub(params, "embed"))["logits"]
        dz = softcap_vjp({"y": dz}, z, final_softcap)[0]["x"]
    gn, p_head = lm_head_vjp({"logits": dz}, n, tied=True, params=sub(params, "embed"))
    dh, p_norm = _norm_vjp(gn["x"], hs[-1], eps, params, "norm")
    grads = [prefixed("embed", p_head), p_norm]
    for i in reversed(range(int(num_layers))):
        gi, pl = gemma_layer_vjp({"y": dh}, hs[i], pad, **layer_attrs[i],
                                 params=sub(params, f"layers.{i}"))
        dh = gi["x"]
        grads.append(prefixed(f"layers.{i}", pl))
    _, pe = embedding_vjp({"y": dh}, ids, scale=True, params=sub(params, "embed"))
    return {}, merge(*grads, prefixed("embed", pe))


VJPS["gemma_decoder_only"] = gemma_decoder_only_vjp
