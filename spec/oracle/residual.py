"""A sublayer with its residual connection and LayerNorm (canonical variant):

    post-norm (Vaswani et al. 2017):  y = LayerNorm(x + f(x))
    pre-norm  (Xiong et al. 2020):    y = x + f(LayerNorm(x))

f is the position-wise feed-forward network (params ``ffn.*``), the LayerNorm
has params ``norm.gamma``, ``norm.beta``. Intermediates: ``norm.output`` (pre
only), ``sublayer.output`` = f(.).
"""

from .core import add, mpa, sub
from .feedforward import feedforward
from .layer_norm import layer_norm


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
