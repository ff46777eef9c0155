"""A sublayer with its residual connection and LayerNorm (canonical variant):

    post-norm (Vaswani et al. 2017):  y = LayerNorm(x + f(x))
    pre-norm  (Xiong et al. 2020):    y = x + f(LayerNorm(x))

f is the position-wise feed-forward network (params ``ffn.*``), the LayerNorm
has params ``norm.gamma``, ``norm.beta``. Intermediates: ``norm.output`` (pre
only), ``sublayer.output`` = f(.).
"""

from .core import add, mpa, prefixed, sub
from .feedforward import feedforward, feedforward_vjp
from .layer_norm import layer_norm, layer_norm_vjp


def residual(x, position="post", eps=1e-5, activation="relu", params=None):
    x = mpa(x)
    ffn, norm = sub(params, "ffn"), sub(params, "norm")
    if position == "post":
        f = feedforward(x, activation=activation, params=ffn)["y"]
        y = layer_norm(add(x, f), eps=eps, params=norm)["y"]
        return {"y": y, "sublayer.output": f}
    if position == "pre":
        n = layer_norm(x, eps=eps, params=norm)["y"]
        f = feedforward(n, activation=activation, params=ffn)["y"]
        return {"y": add(x, f), "norm.output": n, "sublayer.output": f}
    raise ValueError(f"unknown position {position!r}")


def residual_vjp(cot, x, position="post", eps=1e-5, activation="relu", params=None):
    """post: s = x + f(x), y = LN(s):  ds = LN^T dy,  dx = ds + f^T ds
    pre:  n = LN(x), y = x + f(n):    dn = f^T dy,   dx = dy + LN^T dn
    (f^T, LN^T: the feed-forward's and the LayerNorm's VJPs; ffn.*, norm.* their params)."""

    x, dy = mpa(x), mpa(cot["y"])
    ffn, norm = sub(params, "ffn"), sub(params, "norm")
    if position == "post":
        s = add(x, feedforward(x, activation=activation, params=ffn)["y"])
        gs, gnorm = layer_norm_vjp({"y": dy}, s, eps=eps, params=norm)
        gx, gffn = feedforward_vjp({"y": gs["x"]}, x, activation=activation, params=ffn)
        dx = gs["x"] + gx["x"]
    else:
        n = layer_norm(x, eps=eps, params=norm)["y"]
        gn, gffn = feedforward_vjp({"y": dy}, n, activation=activation, params=ffn)
        gx, gnorm = layer_norm_vjp({"y": gn["x"]}, x, eps=eps, params=norm)
        dx = dy + gx["x"]
    return {"x": dx}, {**prefixed("ffn", gffn), **prefixed("norm", gnorm)}


VJPS = {"residual": residual_vjp}
