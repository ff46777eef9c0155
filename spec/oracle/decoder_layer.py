"""One Transformer decoder layer (Vaswani et al. 2017, §3.1): masked self-attention,
cross-attention on the encoder output (memory), feed-forward; each sublayer wrapped in
a residual connection and a LayerNorm.

post-norm:
    r1 = LN1(x  + MHA_self(x, x, x, self_mask))
    r2 = LN2(r1 + MHA_cross(r1, memory, memory, memory_mask))
    r3 = LN3(r2 + FFN(r2))
pre-norm:
    r1 = x  + MHA_self(LN1(x), LN1(x), LN1(x), self_mask)
    r2 = r1 + MHA_cross(LN2(r1), memory, memory, memory_mask)     (memory is not normed here)
    r3 = r2 + FFN(LN3(r2))
y = r3. The query of the cross-attention is the decoder stream; keys and values are memory.
"""

from .core import merge, mpa, sub
from .encoder_layer import attend, attn_sublayer, block_vjp, ffn_sublayer, sublayer
from .feedforward import feedforward

ORDER = ["self_attn.weights", "self_attn.output", "residual1.output", "cross_attn.weights",
         "cross_attn.output", "residual2.output", "ffn.output", "residual3.output"]


def decoder_layer(x, memory, self_mask=None, memory_mask=None, num_heads=1, norm="post",
                  eps=1e-5, activation="relu", params=None):
    if norm not in ("post", "pre"):
        raise ValueError(f"unknown norm {norm!r}")
    x, memory = mpa(x), mpa(memory)
    out = {}

    def self_attn(h):
        r = attend(h, h, self_mask, num_heads, params, "self_attn")
        out["self_attn.weights"], out["self_attn.output"] = r["weights"], r["output"]
        return r["output"]

    def cross_attn(h):
        r = attend(h, memory, memory_mask, num_heads, params, "cross_attn")
        out["cross_attn.weights"], out["cross_attn.output"] = r["weights"], r["output"]
        return r["output"]

    def ffn(h):
        y = feedforward(h, activation=activation, params=sub(params, "ffn"))["y"]
        out["ffn.output"] = y
        return y

    out["residual1.output"] = sublayer(x, self_attn, params, "norm1", norm, eps)
    out["residual2.output"] = sublayer(out["residual1.output"], cross_attn, params, "norm2",
                                          norm, eps)
    out["residual3.output"] = sublayer(out["residual2.output"], ffn, params, "norm3", norm,
                                          eps)
    return {"y": out["residual3.output"], **{k: out[k] for k in ORDER}}


def decoder_layer_vjp(cot, x, memory, self_mask=None, memory_mask=None, num_heads=1,
                      norm="post", eps=1e-5, activation="relu", params=None):
    """r1 = block1(x; self-MHA), r2 = block2(r1; MHA(., memory)), y = block3(r2; FFN):
    backward through block3, block2 (dmemory = dkey + dvalue of the cross-attention),
    block1."""

    x, memory, dmem = mpa(x), mpa(memory), []
    sa = attn_sublayer("self_attn", None, self_mask, num_heads, params, [])
    ca = attn_sublayer("cross_attn", memory, memory_mask, num_heads, params, dmem)
    r1 = sublayer(x, sa[0], params, "norm1", norm, eps)
    r2 = sublayer(r1, ca[0], params, "norm2", norm, eps)
    dr2, g3 = block_vjp(mpa(cot["y"]), r2, *ffn_sublayer(activation, params), params,
                         "norm3", norm, eps)
    dr1, g2 = block_vjp(dr2, r1, *ca, params, "norm2", norm, eps)
    dx, g1 = block_vjp(dr1, x, *sa, params, "norm1", norm, eps)
    return {"x": dx, "memory": dmem[0]}, merge(g1, g2, g3)


VJPS = {"decoder_layer": decoder_layer_vjp}
