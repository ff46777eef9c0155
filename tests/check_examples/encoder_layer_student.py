"""A post/pre-norm encoder layer written by a student, recording the spec's named
intermediates in ``trace``. One step is wrong: 'gelu' uses the tanh approximation, so only
the GELU vectors fail, and the first intermediate to diverge is the feed-forward output."""

import numpy as np
from attnspec.backends.numpy.multihead import mha


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def gelu_tanh(h):
    return 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h**3)))


ACTIVATIONS = {"relu": lambda h: np.maximum(h, 0.0), "gelu": gelu_tanh,  # bug: not erf
               "gelu_tanh": gelu_tanh}


def encoder_layer(x, mask=None, *, num_heads, norm="post", eps=1e-5, activation="relu",
                  params, trace=None):
    def p(prefix):
        return {k.removeprefix(prefix + "."): a for k, a in params.items()
                if k.startswith(prefix + ".")}

    def ln(name, h):
        return layer_norm(h, p(name)["gamma"], p(name)["beta"], eps)

    def attention(h):
        out, weights = mha(h, h, h, mask, num_heads=num_heads, params=p("self_attn"))
        if trace is not None:
            trace.record("self_attn.weights", weights)
            trace.record("self_attn.output", out)
        return out

    def ffn(h):
        f = p("ffn")
        out = ACTIVATIONS[activation](h @ f["w1"] + f["b1"]) @ f["w2"] + f["b2"]
        if trace is not None:
            trace.record("ffn.output", out)
        return out

    def sublayer(h, fn, norm_name):
        return ln(norm_name, h + fn(h)) if norm == "post" else h + fn(ln(norm_name, h))

    r1 = sublayer(x, attention, "norm1")
    r2 = sublayer(r1, ffn, "norm2")
    if trace is not None:
        trace.record("residual1.output", r1)
        trace.record("residual2.output", r2)
    return r2
