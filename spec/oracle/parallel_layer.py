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

from .core import add, fsum_axes, merge, mpa, prefixed, sub
from .feedforward import feedforward, feedforward_vjp
from .layer_norm import layer_norm, layer_norm_vjp
from .llama import attention, attention_vjp, keep_mask

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


VJPS = {"parallel_layer": parallel_layer_vjp}
