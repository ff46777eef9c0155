"""Mixture-of-experts decoder layers (Mixtral, Qwen2-MoE, DeepSeek-V3) and a DeepSeek-V3-style
model, composed from the other components' oracles (llama attention, mla, moe, rms_norm,
gated_feedforward, embedding):

mixtral_layer, x (B, T, D):
    n1 = RMSNorm(x; attn_norm.gamma)
    r1 = x + A(n1)            A: llama_layer's attention (GQA, RoPE "half", causal within
                              window, ANDed with mask; b_q, b_k, b_v with attention_bias)
    n2 = RMSNorm(r1; ffn_norm.gamma)
    y  = r1 + moe(n2 flattened to (B T, D); moe.*, softmax, top_k, renormalize)  folded back

deepseek_layer, x (B, T, D):
    r1 = x + mla(RMSNorm(x; attn_norm.gamma), mask; attn.*)     (eps shared with mla's norms)
    y  = r1 + F(RMSNorm(r1; ffn_norm.gamma)),   F = SwiGLU(ffn.*) or moe(moe.*; the router
                                                attributes)

deepseek_decoder_only, ids (B, T):
    h_0 = embed.table[ids];  h_i+1 = deepseek_layer_i(h_i, padding(ids)), layers.<i>.*
    (i < first_k_dense_replace: dense, else MoE);  logits = RMSNorm(h_N; norm.gamma) lm_head.w
"""

import numpy as np

from .core import add, linear_vjp, matmul, merge, mpa, prefixed, sub
from .embedding import embedding, embedding_vjp
from .gated_feedforward import gated_feedforward, gated_feedforward_vjp
from .llama import attention, attention_vjp, keep_mask
from .masks import _padding
from .mla import mla, mla_vjp
from .moe_layer import moe, moe_vjp
from .rms_norm import rms_norm, rms_norm_vjp

ROUTER = ("scoring", "renormalize", "n_group", "topk_group", "routed_scaling_factor",
          "group_score")
MLA = ("num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "eps", "rope_base",
       "rope_convention", "yarn_factor", "mscale_all_dim", "offset", "rope_scaling")


def _flat(h):
    return h.reshape(h.shape[0] * h.shape[1], h.shape[2])


def _second(n2, params, top_k, router):
    """The second sublayer F on the normed n2 (B, T, D): moe over the tokens or the SwiGLU."""
    if "moe.router.w" in params:
        y = moe(_flat(n2), params=sub(params, "moe"), top_k=int(top_k), **router)["y"]
        return y.reshape(n2.shape)
    return gated_feedforward(n2, activation="silu", params=sub(params, "ffn"))["y"]


def _second_vjp(dy, n2, params, top_k, router):
    """(dn2, {path: grad}) of _second."""
    if "moe.router.w" in params:
        gi, gp = moe_vjp({"y": _flat(dy)}, _flat(n2), params=sub(params, "moe"),
                         top_k=int(top_k), **router)
        return gi["x"].reshape(n2.shape), prefixed("moe", gp)
    gi, gp = gated_feedforward_vjp({"y": dy}, n2, activation="silu", params=sub(params, "ffn"))
    return gi["x"], prefixed("ffn", gp)


# -- mixtral_layer ---------------------------------------------------------------------------

def _mixtral_attention(x, mask, num_heads, num_kv_heads, eps, rope_base, window, offset,
                       attention_bias, params):
    n1 = rms_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    keep = keep_mask(x.shape[1], mask, window)
    a, _ = attention(n1, keep, num_heads, num_kv_heads, rope_base, offset, sub(params, "attn"),
                     bool(attention_bias))
    return n1, keep, a


def mixtral_layer(x, mask=None, num_heads=1, top_k=1, num_kv_heads=None, eps=1e-6,
                  rope_base=10000.0, window=None, offset=0, attention_bias=False,
                  renormalize=True, params=None):
    x = mpa(x)
    _, _, a = _mixtral_attention(x, mask, num_heads, num_kv_heads, eps, rope_base, window,
                                 offset, attention_bias, params)
    r1 = add(x, a)
    n2 = rms_norm(r1, eps=eps, params=sub(params, "ffn_norm"))["y"]
    return {"y": add(r1, _second(n2, params, top_k, {"renormalize": bool(renormalize)}))}


def mixtral_layer_vjp(cot, x, mask=None, num_heads=1, top_k=1, num_kv_heads=None, eps=1e-6,
                      rope_base=10000.0, window=None, offset=0, attention_bias=False,
                      renormalize=True, params=None):
    """r1 = x + A(RMSNorm_1(x)), y = r1 + moe(RMSNorm_2(r1)), each residual passing its
    cotangent to both branches:
        dr1 = dy + RMSNorm_2^T moe^T dy   (moe's VJP over the flattened tokens),
        dx  = dr1 + RMSNorm_1^T A^T dr1   (llama's attention VJP)
    The mask and the positions get no gradient; the expert choice is piecewise constant."""
    x, dy = mpa(x), mpa(cot["y"])
    n1, keep, a = _mixtral_attention(x, mask, num_heads, num_kv_heads, eps, rope_base, window,
                                     offset, attention_bias, params)
    r1 = add(x, a)
    n2 = rms_norm(r1, eps=eps, params=sub(params, "ffn_norm"))["y"]
    dn2, pm = _second_vjp(dy, n2, params, top_k, {"renormalize": bool(renormalize)})
    gn2, pn2 = rms_norm_vjp({"y": dn2}, r1, eps=eps, params=sub(params, "ffn_norm"))
    dr1 = dy + gn2["x"]
    dn1, pa = attention_vjp(dr1, n1, keep, num_heads, num_kv_heads, rope_base, offset,
                            sub(params, "attn"), bool(attention_bias))
    gn1, pn1 = rms_norm_vjp({"y": dn1}, x, eps=eps, params=sub(params, "attn_norm"))
    return {"x": dr1 + gn1["x"]}, merge(pm, prefixed("ffn_norm", pn2), pa,
                                        prefixed("attn_norm", pn1))


# -- deepseek_layer --------------------------------------------------------------------------

def _ds_attrs(kw):
    mla_a = {k: kw[k] for k in MLA if k in kw}
    router = {k: kw[k] for k in ROUTER if k in kw}
    return mla_a, router


def deepseek_layer(x, mask=None, *, top_k=None, params=None, **kw):
    kw = {"eps": 1e-6, "scoring": "sigmoid", "renormalize": True, **kw}
    mla_a, router = _ds_attrs(kw)
    x = mpa(x)
    n1 = rms_norm(x, eps=kw["eps"], params=sub(params, "attn_norm"))["y"]
    r1 = add(x, mla(n1, mask, params=sub(params, "attn"), **mla_a)["y"])
    n2 = rms_norm(r1, eps=kw["eps"], params=sub(params, "ffn_norm"))["y"]
    return {"y": add(r1, _second(n2, params, top_k, router))}


def deepseek_layer_vjp(cot, x, mask=None, *, top_k=None, params=None, **kw):
    """r1 = x + mla(RMSNorm_1(x)), y = r1 + F(RMSNorm_2(r1)):
        dr1 = dy + RMSNorm_2^T F^T dy   (moe's or the SwiGLU's VJP),
        dx  = dr1 + RMSNorm_1^T mla^T dr1"""
    kw = {"eps": 1e-6, "scoring": "sigmoid", "renormalize": True, **kw}
    mla_a, router = _ds_attrs(kw)
    eps = kw["eps"]
    x, dy = mpa(x), mpa(cot["y"])
    n1 = rms_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    r1 = add(x, mla(n1, mask, params=sub(params, "attn"), **mla_a)["y"])
    n2 = rms_norm(r1, eps=eps, params=sub(params, "ffn_norm"))["y"]
    dn2, pf = _second_vjp(dy, n2, params, top_k, router)
    gn2, pn2 = rms_norm_vjp({"y": dn2}, r1, eps=eps, params=sub(params, "ffn_norm"))
    dr1 = dy + gn2["x"]
    ga, pa = mla_vjp({"y": dr1}, n1, mask, params=sub(params, "attn"), **mla_a)
    gn1, pn1 = rms_norm_vjp({"y": ga["x"]}, x, eps=eps, params=sub(params, "attn_norm"))
    return {"x": dr1 + gn1["x"]}, merge(pf, prefixed("ffn_norm", pn2), prefixed("attn", pa),
                                        prefixed("attn_norm", pn1))


# -- deepseek_decoder_only -------------------------------------------------------------------

def _layer_kw(kw):
    kw = {k: v for k, v in kw.items() if k not in ("pad_id", "num_layers",
                                                      "first_k_dense_replace")}
    kw["offset"] = 0
    return kw


def deepseek_decoder_only(ids, *, params=None, **kw):
    eps = kw.get("eps", 1e-6)
    h = embedding(ids, scale=False, params=sub(params, "embed"))["y"]  # (B, T, D)
    pad = _padding(ids, kw.get("pad_id", 0))  # (B, 1, 1, T)
    for i in range(int(kw["num_layers"])):
        h = deepseek_layer(h, pad, params=sub(params, f"layers.{i}"), **_layer_kw(kw))["y"]
    h = rms_norm(h, eps=eps, params=sub(params, "norm"))["y"]
    return {"logits": matmul(h, mpa(params["lm_head.w"]))}


def deepseek_decoder_only_vjp(cot, ids, *, params=None, **kw):
    """logits = RMSNorm(h_N) W_lm, h_i+1 = layer_i(h_i), h_0 = E[ids]:
        dW_lm = RMSNorm(h_N)^T dlogits,  dh_N = RMSNorm^T (dlogits W_lm^T),
        dh_i = deepseek_layer_i^T dh_i+1,  dE[l] = sum of dh_0 over the positions holding l"""
    eps = kw.get("eps", 1e-6)
    hs = [embedding(ids, scale=False, params=sub(params, "embed"))["y"]]
    pad = _padding(ids, kw.get("pad_id", 0))
    lk = _layer_kw(kw)
    for i in range(int(kw["num_layers"])):
        hs.append(deepseek_layer(hs[-1], pad, params=sub(params, f"layers.{i}"), **lk)["y"])
    n = rms_norm(hs[-1], eps=eps, params=sub(params, "norm"))["y"]
    dn, dw, _ = linear_vjp(n, params["lm_head.w"], cot["logits"])
    gh, pn = rms_norm_vjp({"y": dn}, hs[-1], eps=eps, params=sub(params, "norm"))
    dh, grads = gh["x"], [{"lm_head.w": dw}, prefixed("norm", pn)]
    for i in reversed(range(int(kw["num_layers"]))):
        gi, pl = deepseek_layer_vjp({"y": dh}, hs[i], pad, params=sub(params, f"layers.{i}"),
                                    **lk)
        dh = gi["x"]
        grads.append(prefixed(f"layers.{i}", pl))
    _, pe = embedding_vjp({"y": dh}, ids, scale=False, params=sub(params, "embed"))
    return {}, merge(*grads, prefixed("embed", pe))


VJPS = {"mixtral_layer": mixtral_layer_vjp, "deepseek_layer": deepseek_layer_vjp,
        "deepseek_decoder_only": deepseek_decoder_only_vjp}

__all__ = ["mixtral_layer", "deepseek_layer", "deepseek_decoder_only", "np"]
