"""decoder_layer: masked self-attention, cross-attention on memory, feed-forward."""

from ..oracle.decoder_layer import decoder_layer as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import LAYER_FN, causal, dec_layer_params, key_padding, quiet, tiny, tolerances, without

COMPONENT = Component("decoder_layer", {
    "decoder_layer": Fn(module="layers", inputs=["x", "memory", "self_mask", "memory_mask"],
                        optional=["self_mask", "memory_mask"], returns=["y"], oracle=oracle,
                        **LAYER_FN),
}, tolerances=tolerances())


def self_mask(lengths, t):
    """causal & target key padding, (B, 1, T, T)."""
    return key_padding(lengths, t) & causal(t)


def cases(rng):
    yield value("decoder_layer/post-001", "decoder_layer",
                "Post-norm, ReLU, B=2, T=5 target positions, S=3 memory positions, D=16, H=4; "
                "causal self mask, memory key padding (row 1 keeps 2 of 3).",
                inputs={"x": rng.uniform((2, 5, 16)), "memory": rng.uniform((2, 3, 16)),
                        "self_mask": causal(5), "memory_mask": key_padding([3, 2], 3)},
                attributes={"num_heads": 4, "norm": "post", "activation": "relu"},
                params=dec_layer_params(rng, 16, 32), flags=["basic", "post-norm", "cross"])
    yield value("decoder_layer/pre-001", "decoder_layer",
                "Pre-norm, GELU, T=4, S=6, D=8, H=2: the cross-attention query is LN2(r1), "
                "memory enters unnormalised.",
                inputs={"x": rng.uniform((2, 4, 8)), "memory": rng.uniform((2, 6, 8)),
                        "self_mask": causal(4), "memory_mask": key_padding([6, 4], 6)},
                attributes={"num_heads": 2, "norm": "pre", "activation": "gelu"},
                params=dec_layer_params(rng, 8, 16), flags=["pre-norm", "cross"])
    yield value("decoder_layer/cross-001", "decoder_layer",
                "No masks at all, T=3 queries over S=7 memory positions (T != S: using the "
                "memory as query, or x as memory, changes the shapes or the values).",
                inputs={"x": rng.uniform((1, 3, 12)), "memory": rng.uniform((1, 7, 12))},
                attributes={"num_heads": 3, "norm": "post", "activation": "relu"},
                params=dec_layer_params(rng, 12, 24), flags=["cross", "t-ne-s"])
    yield value("decoder_layer/pad-001", "decoder_layer",
                "Self mask = causal & target padding (B, 1, T, T) (row 1 has 2 pad positions), "
                "memory padding (B, 1, 1, S); pre-norm, D=16, H=4, T=6, S=5.",
                inputs={"x": rng.uniform((2, 6, 16)), "memory": rng.uniform((2, 5, 16)),
                        "self_mask": self_mask([6, 4], 6), "memory_mask": key_padding([5, 3], 5)},
                attributes={"num_heads": 4, "norm": "pre", "activation": "relu"},
                params=dec_layer_params(rng, 16, 32), flags=["mask", "padding", "causal"])
    yield value("decoder_layer/single-001", "decoder_layer",
                "One target position (T=1, the first decoding step) over S=4 memory positions, "
                "post-norm, GELU.",
                inputs={"x": rng.uniform((2, 1, 8)), "memory": rng.uniform((2, 4, 8)),
                        "self_mask": causal(1), "memory_mask": key_padding([4, 2], 4)},
                attributes={"num_heads": 2, "norm": "post", "activation": "gelu"},
                params=dec_layer_params(rng, 8, 16), flags=["single-query", "decoding"])
    yield value("decoder_layer/no-bias-001", "decoder_layer",
                "No attention biases, post-norm, H=4 (K=2), T=4, S=3, causal self mask.",
                inputs={"x": rng.uniform((2, 4, 8)), "memory": rng.uniform((2, 3, 8)),
                        "self_mask": causal(4)},
                attributes={"num_heads": 4, "norm": "post", "activation": "relu"},
                params=dec_layer_params(rng, 8, 16, bias=False), flags=["no-bias"])
    yield error("decoder_layer/width-001", "decoder_layer",
                "memory has width 12, x has width 8.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 12))},
                attributes={"num_heads": 2}, params=dec_layer_params(rng, 8, 16),
                error="ShapeError", mentions=["memory", "12", "8"])
    p = dec_layer_params(rng, 8, 16)
    p["cross_attn.w_k"] = rng.weights((8, 6), 0.5)
    yield error("decoder_layer/bad-param-001", "decoder_layer",
                "cross_attn.w_k has shape (8, 6) where (8, 8) is expected.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 8))},
                attributes={"num_heads": 2}, params=p,
                error="ParameterError", mentions=["cross_attn.w_k", "(8, 6)"])
    yield error("decoder_layer/missing-001", "decoder_layer",
                "norm3.beta is missing.",
                inputs={"x": rng.uniform((1, 3, 8)), "memory": rng.uniform((1, 4, 8))},
                attributes={"num_heads": 2},
                params=without(dec_layer_params(rng, 8, 16), "norm3.beta"),
                error="ParameterError", mentions=["norm3.beta"])
    yield error("decoder_layer/heads-001", "decoder_layer",
                "num_heads=5 does not divide D = 12.",
                inputs={"x": rng.uniform((1, 3, 12)), "memory": rng.uniform((1, 4, 12))},
                attributes={"num_heads": 5}, params=dec_layer_params(rng, 12, 24),
                error="ConfigError", mentions=["num_heads"])
    yield error("decoder_layer/batch-001", "decoder_layer",
                "x has batch 2, memory batch 3.",
                inputs={"x": rng.uniform((2, 3, 8)), "memory": rng.uniform((3, 4, 8))},
                attributes={"num_heads": 2}, params=dec_layer_params(rng, 8, 16),
                error="ShapeError", mentions=["memory", "batch"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("decoder_layer/defaults-001", "decoder_layer",
                "norm, eps and activation left out (post, 1e-5, relu), H = 2, D = 8, T = 4, "
                "S = 3: a tiny x and no value/output biases, so LN1 sees a variance ~2e-5: "
                "pre-norm, eps 1e-6 or 1e-3, or GELU fail.",
                inputs={"x": tiny(rd, (2, 4, 8)), "memory": rd.uniform((2, 3, 8)),
                        "self_mask": causal(4)},
                attributes={"num_heads": 2}, params=quiet(dec_layer_params(rd, 8, 16)),
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, norm in enumerate(["post", "pre"], 1):
        yield gradient(f"decoder_layer/grad-00{n}", "decoder_layer",
                       f"norm='{norm}', x (2, 3, 4), memory (2, 5, 4), causal self-attention, "
                       f"memory row 1 padded after 3, H = 2: dmemory = the cross-attention's "
                       f"dkey + dvalue, 0 on the padded memory positions.",
                       inputs={"x": r.uniform((2, 3, 4)), "memory": r.uniform((2, 5, 4)),
                               "self_mask": causal(3),
                               "memory_mask": key_padding([5, 3], 5)},
                       attributes={"num_heads": 2, "norm": norm},
                       params=dec_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"])
    yield gradient("decoder_layer/grad-003", "decoder_layer",
                   "norm='post', activation='gelu', T = 2 queries, S = 3 memory positions, "
                   "H = 1, no masks: dx and dmemory have different shapes.",
                   inputs={"x": r.uniform((1, 2, 4)), "memory": r.uniform((1, 3, 4))},
                   attributes={"num_heads": 1, "activation": "gelu"},
                   params=dec_layer_params(r, 4, 6), cotangents={"y": r.uniform((1, 2, 4))},
                   flags=["gradient", "post-norm", "gelu", "cross-attention"])
    yield gradient("decoder_layer/grad-004", "decoder_layer",
                   "norm='pre', eps = 0.25, no biases, a memory mask only (self-attention "
                   "unmasked).",
                   inputs={"x": r.uniform((2, 2, 4)), "memory": r.uniform((2, 4, 4)),
                           "memory_mask": key_padding([2, 4], 4)},
                   attributes={"num_heads": 2, "norm": "pre", "eps": 0.25},
                   params=dec_layer_params(r, 4, 6, bias=False),
                   cotangents={"y": r.uniform((2, 2, 4))},
                   flags=["gradient", "pre-norm", "eps", "no-bias", "padding"])
