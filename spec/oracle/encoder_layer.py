"""One Transformer encoder layer (Vaswani et al. 2017, §3.1): self-attention, then
a position-wise feed-forward network, each wrapped in a residual connection and a
LayerNorm.

post-norm (the paper; torch norm_first=False):
    r1 = LN1(x + MHA(x, x, x, mask))
    r2 = LN2(r1 + FFN(r1))
pre-norm (GPT-2, torch norm_first=True):
    r1 = x + MHA(LN1(x), LN1(x), LN1(x), mask)
    r2 = r1 + FFN(LN2(r1))
y = r2. LN is the canonical LayerNorm (biased variance, eps inside the root).
"""

from .core import add, merge, mpa, prefixed, sub
from .feedforward import feedforward, feedforward_vjp
from .layer_norm import layer_norm, layer_norm_vjp
from .mha import mha, mha_vjp


def ln(x, params, name, eps):
    return layer_norm(x, eps=eps, variant="canonical", params=sub(params, name))["y"]


def attend(query, memory, mask, num_heads, params, name):
    """MHA(query, memory, memory) with the parameters under ``name``."""
    return mha(query, memory, memory, mask=mask, num_heads=num_heads, params=sub(params, name))


def sublayer(x, f, params, norm_name, norm, eps):
    """One residual block: post LN(x + f(x)), pre x + f(LN(x))."""
    if norm == "post":
        return ln(add(x, f(x)), params, norm_name, eps)
    return add(x, f(ln(x, params, norm_name, eps)))


def encoder_layer(x, mask=None, num_heads=1, norm="post", eps=1e-5, activation="relu",
                  params=None):
    if norm not in ("post", "pre"):
        raise ValueError(f"unknown norm {norm!r}")
    x = mpa(x)
    out = {}

    def self_attn(h):
        r = attend(h, h, mask, num_heads, params, "self_attn")
        out["self_attn.weights"], out["self_attn.output"] = r["weights"], r["output"]
        return r["output"]

    def ffn(h):
        y = feedforward(h, activation=activation, params=sub(params, "ffn"))["y"]
        out["ffn.output"] = y
        return y

    r1 = sublayer(x, self_attn, params, "norm1", norm, eps)
    out["residual1.output"] = r1
    r2 = sublayer(r1, ffn, params, "norm2", norm, eps)
    out["residual2.output"] = r2
    return {"y": r2, **_ordered(out)}


ORDER = ["self_attn.weights", "self_attn.output", "residual1.output", "ffn.output",
         "residual2.output"]


def _ordered(out):
    return {k: out[k] for k in ORDER}


def block_vjp(dy, x, f, f_vjp, params, name, norm, eps):
    """A residual block with LayerNorm ``name``, f(h) its sublayer and f_vjp(dout, h) ->
    (dh, grads) the sublayer's VJP:
        post  y = LN(x + f(x)):  ds = LN^T dy,  dx = ds + f^T ds
        pre   y = x + f(LN(x)):  dn = f^T dy,   dx = dy + LN^T dn
    """
    lnp = sub(params, name)
    if norm == "post":
        gs, gn = layer_norm_vjp({"y": dy}, add(x, f(x)), eps=eps, params=lnp)
        dh, gf = f_vjp(gs["x"], x)
        return gs["x"] + dh, merge(gf, prefixed(name, gn))
    dn, gf = f_vjp(dy, layer_norm(x, eps=eps, params=lnp)["y"])
    gx, gn = layer_norm_vjp({"y": dn}, x, eps=eps, params=lnp)
    return dy + gx["x"], merge(gf, prefixed(name, gn))


def attn_sublayer(name, memory, mask, heads, params, dmemory: list):
    """MHA(h, kv, kv), kv = h (self) or memory (cross, whose gradient goes to dmemory)."""
    p = sub(params, name)

    def f(h):
        kv = h if memory is None else memory
        return mha(h, kv, kv, mask=mask, num_heads=heads, params=p)["output"]

    def f_vjp(dout, h):
        kv = h if memory is None else memory
        gi, gp = mha_vjp({"output": dout}, h, kv, kv, mask=mask, num_heads=heads, params=p)
        if memory is None:
            return gi["query"] + gi["key"] + gi["value"], prefixed(name, gp)
        dmemory.append(gi["key"] + gi["value"])
        return gi["query"], prefixed(name, gp)
    return f, f_vjp


def ffn_sublayer(activation, params):
    p = sub(params, "ffn")

    def f_vjp(dout, h):
        gi, gp = feedforward_vjp({"y": dout}, h, activation=activation, params=p)
        return gi["x"], prefixed("ffn", gp)
    return (lambda h: feedforward(h, activation=activation, params=p)["y"]), f_vjp


def encoder_layer_vjp(cot, x, mask=None, num_heads=1, norm="post", eps=1e-5,
                      activation="relu", params=None):
    """r1 = block1(x; MHA), y = block2(r1; FFN):  dr1 = block2^T dy,  dx = block1^T dr1."""
    x = mpa(x)
    attn = attn_sublayer("self_attn", None, mask, num_heads, params, [])
    r1 = sublayer(x, attn[0], params, "norm1", norm, eps)
    dr1, g2 = block_vjp(mpa(cot["y"]), r1, *ffn_sublayer(activation, params), params,
                         "norm2", norm, eps)
    dx, g1 = block_vjp(dr1, x, *attn, params, "norm1", norm, eps)
    return {"x": dx}, merge(g1, g2)


VJPS = {"encoder_layer": encoder_layer_vjp}
