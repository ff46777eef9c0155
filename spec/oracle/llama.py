"""Llama-style decoder (Touvron et al. 2023; transformers' LlamaDecoderLayer, LlamaForCausalLM;
Mistral's sliding window), inference: pre-RMSNorm, RoPE ("half"), grouped-query causal
attention, SwiGLU, no biases.

llama_layer, x (B, T, D), H query heads and H_kv key/value heads of width K:
    n1 = RMSNorm(x; attn_norm.gamma)
    Q  = RoPE_half(n1 W_q + b_q)  (B, H, T, K)      positions offset .. offset + T - 1
    K  = RoPE_half(n1 W_k + b_k)  (B, H_kv, T, K)
    V  = n1 W_v + b_v             (B, H_kv, T, K)
    (b_q, b_k, b_v only with attention_bias, Qwen2; never an output bias)
    RoPE_half is rope(convention "half", base rope_base, rotary_dim, scaling rope_scaling):
    with rotary_dim R only the first R features of each head rotate (Phi-3); with rope_scaling
    theta_i and the attention factor m come from rope_frequencies(seq_len = offset + T) and
    m multiplies cos and sin (transformers' attention_scaling), so the scores carry m^2
    keep[b, i, j] = mask[b, 0, i, j] and j <= i and (window is None or i - window < j)
    O_h = sdpa(Q_h, K_g, V_g, keep),  g = h // (H / H_kv)
    r1 = x + concat_h(O_h) W_o                              (attn.output = concat W_o)
    y  = r1 + W_down(silu(RMSNorm(r1) W_gate) * (RMSNorm(r1) W_up))   (ffn.output)

llama_decoder_only, ids (B, T):
    h_0    = embed.table[ids]                   (no positional table, no scale)
    h_i+1  = llama_layer_i(h_i, padding(ids)),  offset 0, parameters layers.<i>.*
    logits = RMSNorm(h_N; norm.gamma) lm_head.w
"""

import numpy as np

from .core import add, linear_vjp, matmul, merge, mpa, prefixed, sub, zeros
from .embedding import embedding, embedding_vjp, lm_head, lm_head_vjp
from .gated_feedforward import gated_feedforward, gated_feedforward_vjp
from .masks import _causal, _padding, sliding_window_mask
from .rms_norm import rms_norm, rms_norm_vjp
from .rope import rope, rope_vjp
from .sdpa import sdpa, sdpa_vjp

ORDER = ["attn.weights", "attn.output", "residual1.output", "ffn.output", "residual2.output"]


def heads_of(x, count, width):
    """(B, T, count*width) -> (B, count, T, width): head h is columns h*width:(h+1)*width."""
    b, t = x.shape[:2]
    out = zeros((b, count, t, width))
    for h in range(count):
        out[:, h] = x[:, :, h * width:(h + 1) * width]
    return out


def merge_heads(o):
    """(B, H, T, K) -> (B, T, H*K)."""
    b, h_count, t, kw = o.shape
    out = zeros((b, t, h_count * kw))
    for h in range(h_count):
        out[:, :, h * kw:(h + 1) * kw] = o[:, h]
    return out


def keep_mask(t, mask=None, window=None):
    """causal (or the sliding window) over T queries and T keys, ANDed with mask: (B?, 1, T, T)."""
    keep = _causal(t, t) if window is None else sliding_window_mask(t, t, window)["mask"]
    keep = keep[None, None]
    return keep if mask is None else np.logical_and(np.asarray(mask, dtype=bool), keep)


def qkv_project(n1, params, name, bias):
    """n1 W_name (+ b_name with attention_bias) over the last axis."""
    out = matmul(n1, mpa(params["w_" + name]))
    return add(out, mpa(params["b_" + name])) if bias else out


def _rot(offset, rope_base, rope):
    """rope's attributes for the queries and keys: rope = (rotary_dim, rope_scaling)."""
    rotary_dim, scaling = rope
    return {"offset": offset, "base": rope_base, "convention": "half", "rotary_dim": rotary_dim,
            "scaling": scaling}


def attention(n1, keep, num_heads, num_kv_heads, rope_base, offset, params, bias=False,
              rope_extra=(None, None)):
    """The grouped-query attention sublayer on the normed input: (output, weights)."""
    h_count = int(num_heads)
    h_kv = h_count if num_kv_heads is None else int(num_kv_heads)
    q_all = qkv_project(n1, params, "q", bias)  # (B, T, H*K)
    kw = q_all.shape[-1] // h_count
    k_all = qkv_project(n1, params, "k", bias)  # (B, T, H_kv*K)
    v_all = qkv_project(n1, params, "v", bias)  # (B, T, H_kv*K)
    rot = _rot(offset, rope_base, rope_extra)
    q = rope(heads_of(q_all, h_count, kw), **rot)["y"]
    k = rope(heads_of(k_all, h_kv, kw), **rot)["y"]
    v = heads_of(v_all, h_kv, kw)
    r = sdpa(q, k, v, mask=keep, num_kv_heads=h_kv)  # (B, H, T, K), (B, H, T, T)
    return matmul(merge_heads(r["output"]), mpa(params["w_o"])), r["weights"]


def llama_layer(x, mask=None, num_heads=1, num_kv_heads=None, eps=1e-6, rope_base=10000.0,
                window=None, offset=0, attention_bias=False, rope_scaling=None, rotary_dim=None,
                params=None):
    x = mpa(x)
    out = {}
    n1 = rms_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    keep = keep_mask(x.shape[1], mask, window)
    out["attn.output"], out["attn.weights"] = attention(n1, keep, num_heads, num_kv_heads,
                                                        rope_base, offset, sub(params, "attn"),
                                                        bool(attention_bias),
                                                        (rotary_dim, rope_scaling))
    out["residual1.output"] = add(x, out["attn.output"])
    n2 = rms_norm(out["residual1.output"], eps=eps, params=sub(params, "ffn_norm"))["y"]
    out["ffn.output"] = gated_feedforward(n2, activation="silu", params=sub(params, "ffn"))["y"]
    out["residual2.output"] = add(out["residual1.output"], out["ffn.output"])
    return {"y": out["residual2.output"], **{k: out[k] for k in ORDER}}


def llama_decoder_only(ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None, eps=1e-6,
                       rope_base=10000.0, window=None, rope_scaling=None, rotary_dim=None,
                       attention_bias=False, tie_embeddings=False, params=None):
    """attention_bias (Qwen2): every layer's q, k, v projections add b_q, b_k, b_v;
    tie_embeddings: logits = RMSNorm(h_N) embed.table^T (no lm_head.w)."""
    h = embedding(ids, scale=False, params=sub(params, "embed"))["y"]  # (B, T, D)
    out = {"embed.output": h}
    pad = _padding(ids, pad_id)  # (B, 1, 1, T)
    for i in range(int(num_layers)):
        r = llama_layer(h, pad, num_heads=num_heads, num_kv_heads=num_kv_heads, eps=eps,
                        rope_base=rope_base, window=window, offset=0,
                        rope_scaling=rope_scaling, rotary_dim=rotary_dim,
                        attention_bias=attention_bias, params=sub(params, f"layers.{i}"))
        h = r.pop("y")
        out.update({f"layers.{i}.{k}": v for k, v in r.items()})
    h = rms_norm(h, eps=eps, params=sub(params, "norm"))["y"]
    out["norm.output"] = h
    if tie_embeddings:  # logits[b, t, l] = sum_d h[b, t, d] E[l, d]
        return {"logits": lm_head(h, tied=True, params=sub(params, "embed"))["logits"], **out}
    logits = matmul(h, mpa(params["lm_head.w"]))  # (B, T, L)
    return {"logits": logits, **out}


# -- gradients -------------------------------------------------------------------------------

def attention_vjp(do_all, n1, keep, num_heads, num_kv_heads, rope_base, offset, params,
                  bias=False, rope_extra=(None, None)):
    """The attention sublayer backward, dA = cotangent of concat_h(O_h) W_o (B, T, D):
        dW_o = concat(O)^T dA,  dO = heads(dA W_o^T),  (dQ, dK, dV) = sdpa^T dO (GQA: a kv
        head's dK, dV summed over its query heads),  dQ, dK through RoPE^T (rotation by -angle),
        dW_q = n1^T concat(dQ) (likewise k, v),  dn1 = sum over q, k, v of concat(d.) W_.^T,
        db_q = sum over (B, T) of concat(dQ) (likewise k, v; with attention_bias)
    Returns (dn1, {attn.* path: grad})."""
    h_count = int(num_heads)
    h_kv = h_count if num_kv_heads is None else int(num_kv_heads)
    w = {n: mpa(params[n]) for n in ("w_q", "w_k", "w_v", "w_o")}
    kw = w["w_q"].shape[1] // h_count
    q_pre = heads_of(qkv_project(n1, params, "q", bias), h_count, kw)  # (B, H, T, K) before RoPE
    k_pre = heads_of(qkv_project(n1, params, "k", bias), h_kv, kw)     # (B, H_kv, T, K)
    v = heads_of(qkv_project(n1, params, "v", bias), h_kv, kw)
    rot = _rot(offset, rope_base, rope_extra)  # dx = m R^T dy (rope_vjp), m with rope_scaling
    q, k = rope(q_pre, **rot)["y"], rope(k_pre, **rot)["y"]
    o = sdpa(q, k, v, mask=keep, num_kv_heads=h_kv)["output"]  # (B, H, T, K)
    grads = {}
    d_cat, grads["w_o"], _ = linear_vjp(merge_heads(o), w["w_o"], do_all)  # (B, T, H*K)
    gi, _ = sdpa_vjp({"output": heads_of(d_cat, h_count, kw)}, q, k, v, mask=keep,
                     num_kv_heads=h_kv)
    d = {"w_q": rope_vjp({"y": gi["q"]}, q_pre, **rot)[0]["x"],
         "w_k": rope_vjp({"y": gi["k"]}, k_pre, **rot)[0]["x"], "w_v": gi["v"]}
    dn1 = zeros(n1.shape)
    for name, dh in d.items():
        dn, grads[name], db = linear_vjp(n1, w[name], merge_heads(dh))
        dn1 = dn1 + dn
        if bias:
            grads["b" + name[1:]] = db
    return dn1, prefixed("attn", grads)


def llama_layer_vjp(cot, x, mask=None, num_heads=1, num_kv_heads=None, eps=1e-6,
                    rope_base=10000.0, window=None, offset=0, attention_bias=False,
                    rope_scaling=None, rotary_dim=None, params=None):
    """r1 = x + A(RMSNorm_1(x)), y = r1 + F(RMSNorm_2(r1)), each residual passing its
    cotangent to both branches:
        dr1 = dy + RMSNorm_2^T F^T dy,   dx = dr1 + RMSNorm_1^T A^T dr1
    The mask (boolean) and the positions get no gradient."""
    x, dy = mpa(x), mpa(cot["y"])
    n1 = rms_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    keep = keep_mask(x.shape[1], mask, window)
    bias = bool(attention_bias)
    extra = (rotary_dim, rope_scaling)
    a, _ = attention(n1, keep, num_heads, num_kv_heads, rope_base, offset, sub(params, "attn"),
                     bias, extra)
    r1 = add(x, a)
    n2 = rms_norm(r1, eps=eps, params=sub(params, "ffn_norm"))["y"]
    gf, pf = gated_feedforward_vjp({"y": dy}, n2, activation="silu", params=sub(params, "ffn"))
    gn2, pn2 = rms_norm_vjp({"y": gf["x"]}, r1, eps=eps, params=sub(params, "ffn_norm"))
    dr1 = dy + gn2["x"]
    dn1, pa = attention_vjp(dr1, n1, keep, num_heads, num_kv_heads, rope_base, offset,
                            sub(params, "attn"), bias, extra)
    gn1, pn1 = rms_norm_vjp({"y": dn1}, x, eps=eps, params=sub(params, "attn_norm"))
    return {"x": dr1 + gn1["x"]}, merge(prefixed("ffn", pf), prefixed("ffn_norm", pn2), pa,
                                        prefixed("attn_norm", pn1))


def llama_decoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None,
                           eps=1e-6, rope_base=10000.0, window=None, rope_scaling=None,
                           rotary_dim=None, attention_bias=False, tie_embeddings=False,
                           params=None):
    """logits = RMSNorm(h_N) W_lm, h_i+1 = layer_i(h_i), h_0 = E[ids]:
        dW_lm = RMSNorm(h_N)^T dlogits,  dh_N = RMSNorm^T (dlogits W_lm^T),
        dh_i = layer_i^T dh_i+1 (with its parameters' gradients),
        dE[l] = sum of dh_0 over the positions holding id l   (the ids get none)
    tie_embeddings (W_lm = E^T): dE gets dlogits^T RMSNorm(h_N) as well (the two summed)."""
    attrs = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "eps": eps,
             "rope_base": rope_base, "window": window, "offset": 0,
             "rope_scaling": rope_scaling, "rotary_dim": rotary_dim,
             "attention_bias": attention_bias}
    return decoder_stack_vjp(cot, ids, pad_id, num_layers, (llama_layer, llama_layer_vjp), attrs,
                             (rms_norm, rms_norm_vjp, "norm"), eps, tie_embeddings, params)


def decoder_stack_vjp(cot, ids, pad_id, num_layers, layer, attrs: dict, norm, eps,
                      tie_embeddings, params):
    """The VJP of logits = Norm(h_N) W_lm (or E^T tied), h_i+1 = layer_i(h_i, pad(ids)),
    h_0 = E[ids] unscaled: ``layer`` is (forward, vjp), ``norm`` (forward, vjp, its
    parameters' prefix). The llama and parallel decoder-only models share it."""
    layer_fn, layer_vjp = layer
    norm_fn, norm_vjp, norm_name = norm
    hs = [embedding(ids, scale=False, params=sub(params, "embed"))["y"]]  # h_0 (B, T, D)
    pad = _padding(ids, pad_id)  # (B, 1, 1, T)
    for i in range(int(num_layers)):
        hs.append(layer_fn(hs[-1], pad, **attrs, params=sub(params, f"layers.{i}"))["y"])
    n = norm_fn(hs[-1], eps=eps, params=sub(params, norm_name))["y"]
    if tie_embeddings:
        gl, ph = lm_head_vjp({"logits": cot["logits"]}, n, tied=True, params=sub(params, "embed"))
        dn, head = gl["x"], prefixed("embed", ph)
    else:
        dn, dw, _ = linear_vjp(n, params["lm_head.w"], cot["logits"])
        head = {"lm_head.w": dw}
    gh, pn = norm_vjp({"y": dn}, hs[-1], eps=eps, params=sub(params, norm_name))
    dh, grads = gh["x"], [head, prefixed(norm_name, pn)]
    for i in reversed(range(int(num_layers))):
        gi, pl = layer_vjp({"y": dh}, hs[i], pad, **attrs, params=sub(params, f"layers.{i}"))
        dh = gi["x"]
        grads.append(prefixed(f"layers.{i}", pl))
    _, pe = embedding_vjp({"y": dh}, ids, scale=False, params=sub(params, "embed"))
    return {}, merge(*grads, prefixed("embed", pe))


VJPS = {"llama_layer": llama_layer_vjp, "llama_decoder_only": llama_decoder_only_vjp}
