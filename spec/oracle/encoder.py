"""A stack of N encoder layers (Vaswani et al. 2017, §3.1).

    h_0 = x,  h_{i+1} = EncoderLayer_i(h_i, mask)     parameters layers.<i>.*
    y = h_N                      (norm = "post")
    y = LN_final(h_N)            (norm = "pre": final_norm.*, as GPT-2 and torch's
                                  TransformerEncoder(norm=LayerNorm) with norm_first)
"""

from .core import merge, mpa, prefixed, sub
from .encoder_layer import encoder_layer, encoder_layer_vjp, ln
from .layer_norm import layer_norm_vjp


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


def stack_vjp(layer, layer_vjp, dy, x, num_layers, norm, eps, params, **kw):
    """h_{i+1} = layer_i(h_i), y = h_N or LN_final(h_N):  dh_N = dy or LN_final^T dy,
    dh_i = layer_i^T dh_{i+1}; returns (dx, dmemory or None, grads)."""

    hs = [mpa(x)]
    for i in range(int(num_layers)):
        hs.append(layer(hs[-1], norm=norm, eps=eps, params=sub(params, f"layers.{i}"), **kw)["y"])
    grads, dmem = {}, None
    if norm == "pre":
        gi, gn = layer_norm_vjp({"y": dy}, hs[-1], eps=eps, params=sub(params, "final_norm"))
        dy, grads = gi["x"], prefixed("final_norm", gn)
    for i in reversed(range(int(num_layers))):
        gi, gp = layer_vjp({"y": dy}, hs[i], norm=norm, eps=eps,
                           params=sub(params, f"layers.{i}"), **kw)
        dy, grads = gi["x"], merge(grads, prefixed(f"layers.{i}", gp))
        if "memory" in gi:
            dmem = gi["memory"] if dmem is None else dmem + gi["memory"]
    return dy, dmem, grads


def encoder_vjp(cot, x, mask=None, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                activation="relu", params=None):

    dx, _, grads = stack_vjp(encoder_layer, encoder_layer_vjp, mpa(cot["y"]), x, num_layers,
                              norm, eps, params, mask=mask, num_heads=num_heads,
                              activation=activation)
    return {"x": dx}, grads


VJPS = {"encoder": encoder_vjp}
