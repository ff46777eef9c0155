"""The parallel-residual decoder layer (GPT-J, GPT-NeoX, Falcon; transformers' GPTNeoXLayer
with use_parallel_residual, FalconDecoderLayer with parallel_attn), inference:

parallel_layer, x (B, T, D), H query heads and H_kv key/value heads of width K:
    n1 = LayerNorm(x; attn_norm)
    n2 = LayerNorm(x; ffn_norm)          (num_norms = 2)   or   n2 = n1   (num_norms = 1)
    Q  = RoPE_half(n1 W_q + b_q)  (B, H, T, K)       positions offset .. offset + T - 1
                                  (rotary_dim R: the first R features of a head rotate)
    K  = RoPE_half(n1 W_k + b_k)  (B, H_kv, T, K)
    V  = n1 W_v + b_v             (B, H_kv, T, K)
    O_h = sdpa(Q_h, K_g, V_g, causal & mask),  g = h // (H / H_kv)
    A  = concat_h(O_h) W_o + b_o                         (attn.output)
    F  = act(n2 W1 + b1) W2 + b2                         (ffn.output)
    y  = x + A + F                                       (both branches read x, not x + A)
"""

from .core import add, fsum_axes, matmul, merge, mpa, prefixed, sub
from .embedding import embedding, lm_head
from .feedforward import feedforward, feedforward_vjp
from .layer_norm import layer_norm, layer_norm_vjp
from .llama import attention, attention_vjp, decoder_stack_vjp, keep_mask
from .masks import _padding

ORDER = ["attn.weights", "attn.output", "ffn.output"]


def _norms(x, num_norms, eps, params):
    n1 = layer_norm(x, eps=eps, params=sub(params, "attn_norm"))["y"]
    if int(num_norms) == 1:
        return n1, n1
    return n1, layer_norm(x, eps=eps, params=sub(params, "ffn_norm"))["y"]


def parallel_layer(x, mask=None, num_heads=1, num_kv_heads=None, num_norms=2, eps=1e-5,
                   activation="gelu", rope_base=10000.0, offset=0, rotary_dim=None,
                   params=None):
    x = mpa(x)
    n1, n2 = _norms(x, num_norms, eps, params)
    keep = keep_mask(x.shape[1], mask)
    p = sub(params, "attn")
    o, weights = attention(n1, keep, num_heads, num_kv_heads, rope_base, offset, p, bias=True,
                           rope_extra=(rotary_dim, None))
    out = {"attn.weights": weights, "attn.output": add(o, mpa(p["b_o"]))}
    out["ffn.output"] = feedforward(n2, activation=activation, params=sub(params, "ffn"))["y"]
    y = add(add(x, out["attn.output"]), out["ffn.output"])
    return {"y": y, **{k: out[k] for k in ORDER}}


def parallel_layer_vjp(cot, x, mask=None, num_heads=1, num_kv_heads=None, num_norms=2, eps=1e-5,
                       activation="gelu", rope_base=10000.0, offset=0, rotary_dim=None,
                       params=None):
    """y = x + A(n1) + F(n2): the residual passes dy to x and to both branches at once,
        dA = dF = dy,  db_o = sum dy,  dn1 = A^T dy,  dn2 = F^T dy,
        dx = dy + LN_1^T dn1 + LN_2^T dn2        (num_norms = 1: dx = dy + LN_1^T (dn1 + dn2))
    The mask (boolean) and the positions get no gradient."""
    x, dy = mpa(x), mpa(cot["y"])
    n1, n2 = _norms(x, num_norms, eps, params)
    keep = keep_mask(x.shape[1], mask)
    dn1, pa = attention_vjp(dy, n1, keep, num_heads, num_kv_heads, rope_base, offset,
                            sub(params, "attn"), bias=True, rope_extra=(rotary_dim, None))
    pa["attn.b_o"] = fsum_axes(dy.reshape(-1, dy.shape[-1]), (0,))
    gf, pf = feedforward_vjp({"y": dy}, n2, activation=activation, params=sub(params, "ffn"))
    grads = [pa, prefixed("ffn", pf)]
    if int(num_norms) == 1:
        g1, p1 = layer_norm_vjp({"y": dn1 + gf["x"]}, x, eps=eps, params=sub(params, "attn_norm"))
        return {"x": dy + g1["x"]}, merge(*grads, prefixed("attn_norm", p1))
    g1, p1 = layer_norm_vjp({"y": dn1}, x, eps=eps, params=sub(params, "attn_norm"))
    g2, p2 = layer_norm_vjp({"y": gf["x"]}, x, eps=eps, params=sub(params, "ffn_norm"))
    return {"x": dy + g1["x"] + g2["x"]}, merge(*grads, prefixed("attn_norm", p1),
                                                 prefixed("ffn_norm", p2))


# -- parallel_decoder_only: GPT-NeoX's and Falcon's whole model (issue 25 item 6) -------------

def parallel_decoder_only(ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None,
                          num_norms=2, eps=1e-5, activation="gelu", rope_base=10000.0,
                          rotary_dim=None, tie_embeddings=False, params=None):
    """h_0 = E[ids] (no positions, no scale); h_{i+1} = ParallelLayer_i(h_i, pad(ids));
    logits = LN(h_N; final_norm) W_lm (no bias), or LN(h_N) E^T with tie_embeddings."""
    h = embedding(ids, scale=False, params=sub(params, "embed"))["y"]  # (B, T, D)
    out = {"embed.output": h}
    pad = _padding(ids, pad_id)  # (B, 1, 1, T)
    attrs = dict(num_heads=num_heads, num_kv_heads=num_kv_heads, num_norms=num_norms, eps=eps,
                 activation=activation, rope_base=rope_base, offset=0, rotary_dim=rotary_dim)
    for i in range(int(num_layers)):
        r = parallel_layer(h, pad, **attrs, params=sub(params, f"layers.{i}"))
        h = r.pop("y")
        out.update({f"layers.{i}.{k}": v for k, v in r.items()})
    h = layer_norm(h, eps=eps, params=sub(params, "final_norm"))["y"]
    out["final_norm.output"] = h
    if tie_embeddings:  # logits[b, t, l] = sum_d h[b, t, d] E[l, d]
        return {"logits": lm_head(h, tied=True, params=sub(params, "embed"))["logits"], **out}
    return {"logits": matmul(h, mpa(params["lm_head.w"])), **out}


def parallel_decoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, num_kv_heads=None,
                              num_norms=2, eps=1e-5, activation="gelu", rope_base=10000.0,
                              rotary_dim=None, tie_embeddings=False, params=None):
    """logits = LN(h_N) W_lm, h_i+1 = layer_i(h_i), h_0 = E[ids]:
        dW_lm = LN(h_N)^T dlogits,  dh_N = LN^T (dlogits W_lm^T),
        dh_i = layer_i^T dh_i+1 (with its parameters' gradients),
        dE[l] = sum of dh_0 over the positions holding id l   (the ids get none)
    tie_embeddings (W_lm = E^T): dE gets dlogits^T LN(h_N) as well (the two summed)."""
    attrs = dict(num_heads=num_heads, num_kv_heads=num_kv_heads, num_norms=num_norms, eps=eps,
                 activation=activation, rope_base=rope_base, offset=0, rotary_dim=rotary_dim)
    return decoder_stack_vjp(cot, ids, pad_id, num_layers, (parallel_layer, parallel_layer_vjp),
                             attrs, (layer_norm, layer_norm_vjp, "final_norm"), eps,
                             tie_embeddings, params)


VJPS = {"parallel_layer": parallel_layer_vjp, "parallel_decoder_only": parallel_decoder_only_vjp}
