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

from .core import add, mpa, sub
from .feedforward import feedforward
from .layer_norm import layer_norm
from .mha import mha


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
