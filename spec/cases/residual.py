"""residual: a feed-forward sublayer with its residual connection and LayerNorm,
post-norm LN(x + f(x)) or pre-norm x + f(LN(x))."""

import numpy as np

from ..oracle.residual import residual as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .feedforward import ffn_params

COMPONENT = Component("residual", {
    "residual": Fn(module="feedforward", inputs=["x"],
                   attributes={"position": "post", "eps": 1e-5, "activation": "relu"},
                   params=True, trace=True, returns=["y"], oracle=oracle),
})


def block_params(rng, d, f):
    p = {f"ffn.{k}": v for k, v in ffn_params(rng, d, f).items()}
    p["norm.gamma"] = 1.0 + rng.weights((d,), 0.5)
    p["norm.beta"] = rng.weights((d,), 1.0)
    return p


def cases(rng):
    for pos in ["post", "pre"]:
        for act in ["relu", "gelu"]:
            yield value(f"residual/{pos}-{act}-001", "residual",
                        f"position='{pos}', activation='{act}': a (2, 3, 4) input, D = 4, "
                        "F = 8; the intermediates name the sublayer output"
                        + (" and the LayerNorm output it reads." if pos == "pre" else "."),
                        inputs={"x": rng.uniform((2, 3, 4))},
                        attributes={"position": pos, "activation": act},
                        params=block_params(rng, 4, 8), flags=["basic", f"{pos}-norm", act])
    for pos in ["post", "pre"]:
        yield value(f"residual/{pos}-eps-001", "residual",
                    f"position='{pos}' with eps = 0.25 and small inputs: the eps attribute "
                    "must reach the LayerNorm.",
                    inputs={"x": rng.uniform((3, 4), -0.375, 0.375)},
                    attributes={"position": pos, "eps": 0.25},
                    params=block_params(rng, 4, 6), flags=["eps", f"{pos}-norm"])
    yield value("residual/pre-large-001", "residual",
                "position='pre' with x in [-8, 8], far from unit scale: the residual adds the "
                "raw x (not LN(x)) to f(LN(x)), so adding to the wrong tensor fails.",
                inputs={"x": rng.uniform((2, 4), -8, 8, step=2.0**-4)}, attributes={"position": "pre"},
                params=block_params(rng, 4, 8), flags=["pre-norm", "residual-source"])

    x = rng.uniform((2, 4))
    good = block_params(rng, 4, 8)
    yield error("residual/bad-position-001", "residual",
                "An unknown position ('sandwich'): positions are 'post' and 'pre'.",
                inputs={"x": x}, attributes={"position": "sandwich"}, params=good,
                error="ConfigError", mentions=["position", "sandwich"])
    yield error("residual/norm-missing-001", "residual",
                "norm.gamma is missing: the message names the full path.",
                inputs={"x": x}, params={k: v for k, v in good.items() if k != "norm.gamma"},
                error="ParameterError", mentions=["norm.gamma"])
    yield error("residual/ffn-shape-001", "residual",
                "ffn.w1 of shape (3, 8) for D = 4: the message names the full path.",
                inputs={"x": x}, params={**good, "ffn.w1": np.zeros((3, 8))},
                error="ParameterError", mentions=["ffn.w1", "(3, 8)"])
    yield error("residual/bad-activation-001", "residual", "An unknown activation ('tanh').",
                inputs={"x": x}, attributes={"activation": "tanh"}, params=good,
                error="ConfigError", mentions=["activation"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    d, f = 4, 8
    p = {"ffn.w1": rd.weights((d, f)), "ffn.b1": rd.uniform((f,), -2**-7, 2**-7, 2**-12),
         "ffn.w2": rd.weights((f, d)), "ffn.b2": rd.uniform((d,), -2**-7, 2**-7, 2**-12),
         "norm.gamma": 1.0 + rd.weights((d,), 0.5), "norm.beta": rd.weights((d,), 1.0)}
    yield value("residual/defaults-001", "residual",
                "position, eps and activation left out (post, 1e-5, relu): x and the biases in "
                "[-2**-7, 2**-7], so x + f(x) has a variance comparable to eps and half its "
                "pre-activations are negative: pre-norm, eps 1e-6 or 1e-3, or GELU fail.",
                inputs={"x": rd.uniform((2, 3, d), -2**-7, 2**-7, 2**-12)}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, pos in enumerate(["post", "pre"], 1):
        how = ("ds = LN^T dy, dx = ds + FFN^T ds" if pos == "post"
               else "dx = dy + LN^T (FFN^T dy)")
        yield gradient(f"residual/grad-00{n}", "residual",
                       f"position='{pos}', a (2, 3, 4) input, D = 4, F = 8: {how}; leaving out "
                       f"the skip path's gradient (dx without the identity term) fails.",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"position": pos},
                       params=block_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{pos}-norm", "relu"])
    for n, pos in enumerate(["post", "pre"], 3):
        yield gradient(f"residual/grad-00{n}", "residual",
                       f"position='{pos}', activation='gelu', eps = 0.25 and small inputs: the "
                       f"LayerNorm's backward sits {'after' if pos == 'post' else 'before'} the "
                       f"feed-forward's in the backward pass (the other order fails), with eps "
                       f"inside its root.",
                       inputs={"x": r.uniform((3, 4), -0.375, 0.375)},
                       attributes={"position": pos, "activation": "gelu", "eps": 0.25},
                       params=block_params(r, 4, 6), cotangents={"y": r.uniform((3, 4))},
                       flags=["gradient", f"{pos}-norm", "gelu", "eps"])
