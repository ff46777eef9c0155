"""A stack of N encoder layers (Vaswani et al. 2017, §3.1).

    h_0 = x,  h_{i+1} = EncoderLayer_i(h_i, mask)     parameters layers.<i>.*
    y = h_N                      (norm = "post")
    y = LN_final(h_N)            (norm = "pre": final_norm.*, as GPT-2 and torch's
                                  TransformerEncoder(norm=LayerNorm) with norm_first)
"""

from .core import mpa, sub
from .encoder_layer import encoder_layer, ln


def stack(layer, x, num_layers, norm, eps, params, **kw):
    """Run ``layer`` N times, naming intermediates layers.<i>.*; final norm when pre."""
    h, out = mpa(x), {}
    for i in range(int(num_layers)):
        r = layer(h, norm=norm, eps=eps, params=sub(params, f"layers.{i}"), **kw)
        h = r.pop("y")
        out.update({f"layers.{i}.{k}": v for k, v in r.items()})
    if norm == "pre":
        h = ln(h, params, "final_norm", eps)
        out["final_norm.output"] = h
    return {"y": h, **out}


def encoder(x, mask=None, num_layers=1, num_heads=1, norm="post", eps=1e-5, activation="relu",
            params=None):
    return stack(encoder_layer, x, num_layers, norm, eps, params, mask=mask,
                 num_heads=num_heads, activation=activation)
