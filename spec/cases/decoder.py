"""decoder: a stack of N decoder layers over one memory; pre-norm ends with final_norm."""

from ..oracle.decoder import decoder as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .decoder_layer import self_mask
from .encoder import STACK_FN
from .encoder_layer import causal, dec_layer_params, key_padding, quiet, stack_params, tiny, tolerances

COMPONENT = Component("decoder", {
    "decoder": Fn(module="layers", inputs=["x", "memory", "self_mask", "memory_mask"],
                  optional=["self_mask", "memory_mask"], returns=["y"], oracle=oracle,
                  **STACK_FN),
}, tolerances=tolerances("stack"))


def cases(rng):
    def params(n, d, f, final):
        return stack_params(rng, dec_layer_params, n, d, f, final)

    yield value("decoder/post-001", "decoder",
                "N=2 post-norm, ReLU, B=2, T=5, S=4, D=16, H=4, causal & padding self mask, "
                "memory padding.",
                inputs={"x": rng.uniform((2, 5, 16)), "memory": rng.uniform((2, 4, 16)),
                        "self_mask": self_mask([5, 3], 5), "memory_mask": key_padding([4, 2], 4)},
                attributes={"num_layers": 2, "num_heads": 4, "norm": "post"},
                params=params(2, 16, 32, False), flags=["basic", "post-norm", "padding"])
    yield value("decoder/pre-001", "decoder",
                "N=2 pre-norm with final_norm, GELU, T=4, S=6, D=8, H=2.",
                inputs={"x": rng.uniform((2, 4, 8)), "memory": rng.uniform((2, 6, 8)),
                        "self_mask": causal(4), "memory_mask": key_padding([6, 5], 6)},
                attributes={"num_layers": 2, "num_heads": 2, "norm": "pre",
                            "activation": "gelu"},
                params=params(2, 8, 16, True), flags=["pre-norm", "final-norm"])
    yield value("decoder/one-001", "decoder",
                "N=1 post-norm (equals decoder_layer), T=3, S=7, no masks.",
                inputs={"x": rng.uniform((1, 3, 12)), "memory": rng.uniform((1, 7, 12))},
                attributes={"num_layers": 1, "num_heads": 3, "norm": "post"},
                params=params(1, 12, 24, False), flags=["one-layer", "t-ne-s"])
    yield value("decoder/one-pre-001", "decoder",
                "N=1 pre-norm: LN_final(decoder_layer(...)), T=5, S=3, causal.",
                inputs={"x": rng.uniform((2, 5, 8)), "memory": rng.uniform((2, 3, 8)),
                        "self_mask": causal(5)},
                attributes={"num_layers": 1, "num_heads": 2, "norm": "pre"},
                params=params(1, 8, 16, True), flags=["one-layer", "final-norm"])
    yield value("decoder/pre-002", "decoder",
                "N=2 pre-norm, ReLU, D=16, H=2, T=6, S=5, causal & padding, memory padding.",
                inputs={"x": rng.uniform((2, 6, 16)), "memory": rng.uniform((2, 5, 16)),
                        "self_mask": self_mask([6, 4], 6), "memory_mask": key_padding([3, 5], 5)},
                attributes={"num_layers": 2, "num_heads": 2, "norm": "pre"},
                params=params(2, 16, 32, True), flags=["pre-norm", "padding"])
    yield value("decoder/post-002", "decoder",
                "N=2 post-norm, GELU, T=7, S=3, H=4 (K=2), causal.",
                inputs={"x": rng.uniform((1, 7, 8)), "memory": rng.uniform((1, 3, 8)),
                        "self_mask": causal(7)},
                attributes={"num_layers": 2, "num_heads": 4, "norm": "post",
                            "activation": "gelu"},
                params=params(2, 8, 16, False), flags=["post-norm", "t-ne-s"])
    p = params(2, 8, 16, False)
    p["layers.1.cross_attn.w_k"] = rng.weights((8, 4), 0.5)
    yield error("decoder/bad-param-001", "decoder",
                "layers.1.cross_attn.w_k has shape (8, 4) where (8, 8) is expected.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 8))},
                attributes={"num_layers": 2, "num_heads": 2}, params=p,
                error="ParameterError", mentions=["layers.1.cross_attn.w_k", "(8, 4)"])
    yield error("decoder/missing-layer-001", "decoder",
                "num_layers=2 but only layers.0.* is given.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 8))},
                attributes={"num_layers": 2, "num_heads": 2}, params=params(1, 8, 16, False),
                error="ParameterError", mentions=["layers.1."])
    yield error("decoder/width-001", "decoder",
                "memory width 16 != x width 8.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 16))},
                attributes={"num_layers": 1, "num_heads": 2}, params=params(1, 8, 16, False),
                error="ShapeError", mentions=["memory", "16"])
    yield error("decoder/heads-001", "decoder",
                "num_heads=3 does not divide D = 8.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 8))},
                attributes={"num_layers": 1, "num_heads": 3}, params=params(1, 8, 16, False),
                error="ConfigError", mentions=["num_heads"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("decoder/defaults-001", "decoder",
                "norm, eps and activation left out (post, 1e-5, relu), N = 2, H = 2, D = 8: a "
                "tiny x and no value/output biases, so the first LN1 sees a variance ~2e-5; a "
                "pre-norm default also lacks final_norm.*.",
                inputs={"x": tiny(rd, (2, 4, 8)), "memory": rd.uniform((2, 3, 8)),
                        "self_mask": causal(4)},
                attributes={"num_layers": 2, "num_heads": 2},
                params=quiet(stack_params(rd, dec_layer_params, 2, 8, 16, False)),
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, (norm, layers) in enumerate([("post", 2), ("pre", 2), ("post", 1), ("pre", 1)], 1):
        yield gradient(f"decoder/grad-00{n}", "decoder",
                       f"N = {layers}, norm='{norm}', x (2, 3, 4), memory (2, 4, 4), causal "
                       f"self-attention, memory row 1 padded after 2: dmemory sums every "
                       f"layer's cross-attention gradient.",
                       inputs={"x": r.uniform((2, 3, 4)), "memory": r.uniform((2, 4, 4)),
                               "self_mask": causal(3),
                               "memory_mask": key_padding([4, 2], 4)},
                       attributes={"num_layers": layers, "num_heads": 2, "norm": norm},
                       params=stack_params(r, dec_layer_params, layers, 4, 6, norm == "pre"),
                       cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"])
