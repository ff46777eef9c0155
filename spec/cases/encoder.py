"""encoder: a stack of N encoder layers; pre-norm stacks end with a final LayerNorm."""

from ..oracle.encoder import encoder as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import (
    LAYER_FN,
    causal,
    enc_layer_params,
    key_padding,
    quiet,
    stack_params,
    tiny,
    tolerances,
    without,
)

STACK_FN = dict(LAYER_FN, required=["num_layers", "num_heads"],
                attributes={"num_layers": None, **LAYER_FN["attributes"]})

COMPONENT = Component("encoder", {
    "encoder": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                  oracle=oracle, **STACK_FN),
}, tolerances=tolerances("stack"))


def cases(rng):
    def params(n, d, f, final):
        return stack_params(rng, enc_layer_params, n, d, f, final)

    yield value("encoder/post-001", "encoder",
                "N=2 post-norm layers, ReLU, B=2, T=5, D=16, H=4, key padding (row 1 keeps 3); "
                "no final norm.",
                inputs={"x": rng.uniform((2, 5, 16)), "mask": key_padding([5, 3], 5)},
                attributes={"num_layers": 2, "num_heads": 4, "norm": "post"},
                params=params(2, 16, 32, False), flags=["basic", "post-norm", "padding"])
    yield value("encoder/pre-001", "encoder",
                "N=2 pre-norm layers then final_norm, GELU, D=8, H=2, T=6, key padding.",
                inputs={"x": rng.uniform((2, 6, 8)), "mask": key_padding([4, 6], 6)},
                attributes={"num_layers": 2, "num_heads": 2, "norm": "pre",
                            "activation": "gelu"},
                params=params(2, 8, 16, True), flags=["pre-norm", "final-norm", "padding"])
    yield value("encoder/one-001", "encoder",
                "N=1 post-norm: equals encoder_layer with params layers.0.*.",
                inputs={"x": rng.uniform((1, 4, 12))},
                attributes={"num_layers": 1, "num_heads": 3, "norm": "post"},
                params=params(1, 12, 24, False), flags=["one-layer"])
    yield value("encoder/one-pre-001", "encoder",
                "N=1 pre-norm: LN_final(encoder_layer(x)).",
                inputs={"x": rng.uniform((2, 3, 8))},
                attributes={"num_layers": 1, "num_heads": 4, "norm": "pre"},
                params=params(1, 8, 16, True), flags=["one-layer", "final-norm"])
    yield value("encoder/causal-001", "encoder",
                "N=2 post-norm under a causal (T, T) mask, T=7, D=8, H=2.",
                inputs={"x": rng.uniform((1, 7, 8)), "mask": causal(7)},
                attributes={"num_layers": 2, "num_heads": 2, "norm": "post"},
                params=params(2, 8, 16, False), flags=["causal"])
    yield value("encoder/pre-002", "encoder",
                "N=2 pre-norm, ReLU, D=16, H=2, T=3, no mask: the final norm is what makes "
                "the output O(1) again.",
                inputs={"x": rng.uniform((2, 3, 16))},
                attributes={"num_layers": 2, "num_heads": 2, "norm": "pre"},
                params=params(2, 16, 32, True), flags=["pre-norm", "final-norm"])
    p = params(1, 8, 16, False)
    yield error("encoder/missing-layer-001", "encoder",
                "num_layers=2 but only layers.0.* is given.",
                inputs={"x": rng.uniform((1, 3, 8))},
                attributes={"num_layers": 2, "num_heads": 2}, params=p,
                error="ParameterError", mentions=["layers.1."])
    p = params(2, 8, 16, False)
    p["layers.1.ffn.w2"] = rng.weights((16, 4), 0.5)
    yield error("encoder/bad-param-001", "encoder",
                "layers.1.ffn.w2 has shape (16, 4) for D=8.",
                inputs={"x": rng.uniform((1, 3, 8))},
                attributes={"num_layers": 2, "num_heads": 2}, params=p,
                error="ParameterError", mentions=["layers.1.ffn.w2", "(16, 4)"])
    yield error("encoder/final-norm-001", "encoder",
                "norm='pre' needs final_norm.*; it is missing.",
                inputs={"x": rng.uniform((1, 3, 8))},
                attributes={"num_layers": 1, "num_heads": 2, "norm": "pre"},
                params=without(params(1, 8, 16, True), "final_norm.gamma"),
                error="ParameterError", mentions=["final_norm.gamma"])
    yield error("encoder/num-layers-001", "encoder",
                "num_layers=0 is refused (a stack has at least one layer).",
                inputs={"x": rng.uniform((1, 3, 8))},
                attributes={"num_layers": 0, "num_heads": 2}, params=params(1, 8, 16, False),
                error="ConfigError", mentions=["num_layers"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("encoder/defaults-001", "encoder",
                "norm, eps and activation left out (post, 1e-5, relu), N = 2, H = 2, D = 8: a "
                "tiny x and no value/output biases, so the first LN1 sees a variance ~2e-5; a "
                "pre-norm default also lacks final_norm.*.",
                inputs={"x": tiny(rd, (2, 4, 8)), "mask": key_padding([4, 3], 4)},
                attributes={"num_layers": 2, "num_heads": 2},
                params=quiet(stack_params(rd, enc_layer_params, 2, 8, 16, False)),
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, (norm, layers) in enumerate([("post", 2), ("pre", 2), ("post", 1), ("pre", 3)], 1):
        final = " and final_norm" if norm == "pre" else ""
        yield gradient(f"encoder/grad-00{n}", "encoder",
                       f"N = {layers}, norm='{norm}', a (2, 3, 4) input, row 1 key-padded after "
                       f"2: dh_i = layer_i^T dh_(i+1), parameters layers.<i>.*{final} each get "
                       f"their own layer's gradient (swapping two layers' fails).",
                       inputs={"x": r.uniform((2, 3, 4)), "mask": key_padding([3, 2], 3)},
                       attributes={"num_layers": layers, "num_heads": 2, "norm": norm,
                                   "activation": "gelu" if n == 3 else "relu"},
                       params=stack_params(r, enc_layer_params, layers, 4, 6, norm == "pre"),
                       cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "padding"])
