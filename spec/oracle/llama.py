"""Llama-style decoder (Touvron et al. 2023; transformers' LlamaDecoderLayer, LlamaForCausalLM;
Mistral's sliding window), inference: pre-RMSNorm, RoPE ("half"), grouped-query causal
attention, SwiGLU, no biases.

llama_layer, x (B, T, D), H query heads and H_kv key/value heads of width K:
    n1 = RMSNorm(x; attn_norm.gamma)
    Q  = RoPE_half(n1 W_q)  (B, H, T, K)      positions offset .. offset + T - 1
    K  = RoPE_half(n1 W_k)  (B, H_kv, T, K)
    V  = n1 W_v             (B, H_kv, T, K)
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

from .core import add, matmul, mpa, sub, zeros
from .embedding import embedding
from .gated_feedforward import gated_feedforward
from .masks import _causal, _padding, sliding_window_mask
from .rms_norm import rms_norm
from .rope import rope
from .sdpa import sdpa

ORDER = ["attn.weights", "attn.output", "residual1.output", "ffn.output", "residual2.output"]


def heads_of(x, count, width):
    """(B, T, count*width) -> (B, count, T, width): head h is columns h*width:(h+1)*width."""
    b, t = x.shape[:2]
    out = zeros((b, count, t, width))
    for h in range(count):
        out[:, h] = x[:, :, h * width:(h + 1) * width]
    return out


def merge(o):
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


def attention(n1, keep, num_heads, num_kv_heads, rope_base, offset, params):
    """The grouped-query attention sublayer on the normed input: (output, weights)."""
    h_count = int(num_heads)
    h_kv = h_count if num_kv_heads is None else int(num_kv_heads)
    q_all = matmul(n1, mpa(params["w_q"]))  # (B, T, H*K)
    kw = q_all.shape[-1] // h_count
    k_all = matmul(n1, mpa(params["w_k"]))  # (B, T, H_kv*K)
    v_all = matmul(n1, mpa(params["w_v"]))  # (B, T, H_kv*K)
    q = rope(heads_of(q_all, h_count, kw), offset=offset, base=rope_base, convention="half")["y"]
    k = rope(heads_of(k_all, h_kv, kw), offset=offset, base=rope_base, convention="half")["y"]
    v = heads_of(v_all, h_kv, kw)
    r = sdpa(q, k, v, mask=keep, num_kv_heads=h_kv)  # (B, H, T, K), (B, H, T, T)
    return matmul(merge(r["output"]), mpa(params["w_o"])), r["weights"]


def llama_layer(x, mask=None, num_heads=1, num_kv_heads=None, eps=1e-6, rope_base=10000.0,
                window=None, offset=0, params=None):
    x = mpa(x)
    out = {}
    n1 = rms_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    keep = keep_mask(x.shape[1], mask, window)
    out["attn.output"], out["attn.weights"] = attention(n1, keep, num_heads, num_kv_heads,
                                                        rope_base, offset, sub(params, "attn"))
    out["residual1.output"] = add(x, out["attn.output"])
    n2 = rms_norm(out["residual1.output"], eps=eps, params=sub(params, "ffn_norm"))["y"]
    out["ffn.output"] = gated_feedforward(n2, activation="silu", params=sub(params, "ffn"))["y"]
    out["residual2.output"] = add(out["residual1.output"], out["ffn.output"])
    return {"y": out["residual2.output"], **{k: out[k] for k in ORDER}}


def llama_decoder_only(ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None, eps=1e-6,
                       rope_base=10000.0, window=None, params=None):
    h = embedding(ids, scale=False, params=sub(params, "embed"))["y"]  # (B, T, D)
    out = {"embed.output": h}
    pad = _padding(ids, pad_id)  # (B, 1, 1, T)
    for i in range(int(num_layers)):
        r = llama_layer(h, pad, num_heads=num_heads, num_kv_heads=num_kv_heads, eps=eps,
                        rope_base=rope_base, window=window, offset=0,
                        params=sub(params, f"layers.{i}"))
        h = r.pop("y")
        out.update({f"layers.{i}.{k}": v for k, v in r.items()})
    h = rms_norm(h, eps=eps, params=sub(params, "norm"))["y"]
    out["norm.output"] = h
    logits = matmul(h, mpa(params["lm_head.w"]))  # (B, T, L)
    return {"logits": logits, **out}
