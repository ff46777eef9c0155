"""encoder_layer: self-attention and feed-forward sublayers, post- or pre-norm.

Also holds the parameter builders the other Transformer case modules share
(decoder_layer, encoder, decoder, transformer, encoder_only, decoder_only, greedy_decode).
"""

import math

import numpy as np

from ..oracle.encoder_layer import encoder_layer as oracle
from ._build import Component, Fn, Rng, error, gradient, value

# Deep composites accumulate rounding through several matmuls, softmaxes and LayerNorms.
# Each dtype keeps its default rtol; atol widens with depth. Measured (float64 compute with
# every op output rounded to the dtype) the vectors need at most: layers 1.4e-2 (bfloat16)
# and 2e-3 (float16); stacks and one-stack models 2.9e-2 / 3.5e-3; transformer 3.4e-2 /
# 4.2e-3; float32 3.5e-7. The values below leave about 2x head room.
TOLERANCES = {
    "layer": {"float64": {"rtol": 1e-10, "atol": 1e-12},
              "float32": {"rtol": 2e-5, "atol": 4e-6},
              "float16": {"rtol": 1e-2, "atol": 4e-3},
              "bfloat16": {"rtol": 4e-2, "atol": 3e-2}},
    "stack": {"float64": {"rtol": 1e-10, "atol": 1e-12},
              "float32": {"rtol": 2e-5, "atol": 1e-5},
              "float16": {"rtol": 1e-2, "atol": 8e-3},
              "bfloat16": {"rtol": 4e-2, "atol": 5e-2}},
    "transformer": {"float64": {"rtol": 1e-10, "atol": 1e-12},
                    "float32": {"rtol": 2e-5, "atol": 1e-5},
                    "float16": {"rtol": 1e-2, "atol": 1e-2},
                    "bfloat16": {"rtol": 4e-2, "atol": 7e-2}},
}


def tolerances(level="layer"):
    return {k: dict(v) for k, v in TOLERANCES[level].items()}


LAYER_FN = dict(required=["num_heads"], attributes={"num_heads": None, "norm": "post", "eps": 1e-5,
                            "activation": "relu"}, params=True, trace=True)

COMPONENT = Component("encoder_layer", {
    "encoder_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"],
                        returns=["y"], oracle=oracle, **LAYER_FN),
}, tolerances=tolerances())


def scale(fan_in: int) -> float:
    """About 2/sqrt(fan_in), rounded to a power of two: activations stay O(1)."""
    return 2.0 ** round(math.log2(2 / math.sqrt(fan_in)))


def scoped(prefix: str, params: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in params.items()}


def attn_params(rng, d, bias=True):
    """w_q, w_k, w_v, w_o all (D, D) (H*K = H*V = D), biases (D,) when asked."""
    s, p = scale(d), {}
    for name in ("q", "k", "v", "o"):
        p[f"w_{name}"] = rng.weights((d, d), s)
        if bias:
            p[f"b_{name}"] = rng.weights((d,), 0.25)
    return p


def ln_params(rng, d):
    return {"gamma": 1 + rng.weights((d,), 0.25), "beta": rng.weights((d,), 0.25)}


def ffn_params(rng, d, f):
    return {"w1": rng.weights((d, f), scale(d)), "b1": rng.weights((f,), 0.25),
            "w2": rng.weights((f, d), scale(f)), "b2": rng.weights((d,), 0.25)}


def enc_layer_params(rng, d, f, bias=True):
    return {**scoped("self_attn", attn_params(rng, d, bias)), **scoped("norm1", ln_params(rng, d)),
            **scoped("ffn", ffn_params(rng, d, f)), **scoped("norm2", ln_params(rng, d))}


def dec_layer_params(rng, d, f, bias=True):
    return {**scoped("self_attn", attn_params(rng, d, bias)), **scoped("norm1", ln_params(rng, d)),
            **scoped("cross_attn", attn_params(rng, d, bias)),
            **scoped("norm2", ln_params(rng, d)), **scoped("ffn", ffn_params(rng, d, f)),
            **scoped("norm3", ln_params(rng, d))}


def stack_params(rng, layer, n, d, f, final: bool):
    """layers.<i>.* for i < n (layer: enc_layer_params or dec_layer_params), final_norm.*."""
    p = {}
    for i in range(n):
        p.update(scoped(f"layers.{i}", layer(rng, d, f)))
    if final:
        p.update(scoped("final_norm", ln_params(rng, d)))
    return p


def key_padding(lengths, s):
    """(B, 1, 1, S) True for the first lengths[b] keys of row b."""
    return np.array([[[[j < n for j in range(s)]]] for n in lengths], dtype=bool)


def causal(t):
    return np.tril(np.ones((t, t), dtype=bool))


def without(params: dict, *names) -> dict:
    return {k: v for k, v in params.items() if k not in names}


def cases(rng):
    yield value("encoder_layer/post-001", "encoder_layer",
                "Post-norm (the paper), ReLU, B=2, T=5, D=16, H=4, F=32, no mask: "
                "r1 = LN1(x + MHA(x)), y = LN2(r1 + FFN(r1)).",
                inputs={"x": rng.uniform((2, 5, 16))},
                attributes={"num_heads": 4, "norm": "post", "activation": "relu"},
                params=enc_layer_params(rng, 16, 32), flags=["basic", "post-norm"])
    yield value("encoder_layer/pre-001", "encoder_layer",
                "Pre-norm (GPT-2), GELU, B=2, T=4, D=8, H=2, F=16: r1 = x + MHA(LN1(x)), "
                "y = r1 + FFN(LN2(r1)); no final norm inside a layer.",
                inputs={"x": rng.uniform((2, 4, 8))},
                attributes={"num_heads": 2, "norm": "pre", "activation": "gelu"},
                params=enc_layer_params(rng, 8, 16), flags=["pre-norm", "gelu"])
    yield value("encoder_layer/mask-001", "encoder_layer",
                "Key padding mask (B, 1, 1, T): row 0 keeps 4 of 6 keys, row 1 keeps 3; "
                "post-norm, D=12, H=3 (K=4).",
                inputs={"x": rng.uniform((2, 6, 12)), "mask": key_padding([4, 3], 6)},
                attributes={"num_heads": 3, "norm": "post", "activation": "relu"},
                params=enc_layer_params(rng, 12, 24), flags=["mask", "padding", "post-norm"])
    yield value("encoder_layer/causal-001", "encoder_layer",
                "A causal (T, T) mask broadcast over batch and heads, pre-norm, D=16, H=2, T=7.",
                inputs={"x": rng.uniform((1, 7, 16)), "mask": causal(7)},
                attributes={"num_heads": 2, "norm": "pre", "activation": "relu"},
                params=enc_layer_params(rng, 16, 32), flags=["mask", "causal", "pre-norm"])
    yield value("encoder_layer/no-bias-001", "encoder_layer",
                "Attention without biases (b_q, b_k, b_v, b_o absent), post-norm, GELU (tanh), "
                "D=8, H=4 (K=2), T=3.",
                inputs={"x": rng.uniform((2, 3, 8))},
                attributes={"num_heads": 4, "norm": "post", "activation": "gelu_tanh"},
                params=enc_layer_params(rng, 8, 16, bias=False), flags=["no-bias", "gelu_tanh"])
    mask = key_padding([5, 0], 5)
    yield value("encoder_layer/fully-masked-001", "encoder_layer",
                "Row 1 has no key to attend to: its attention weights and head outputs are 0, "
                "so self_attn.output is b_o (pre-norm, D=8, H=2).",
                inputs={"x": rng.uniform((2, 5, 8)), "mask": mask},
                attributes={"num_heads": 2, "norm": "pre", "activation": "gelu"},
                params=enc_layer_params(rng, 8, 16), flags=["mask", "fully-masked"])
    yield value("encoder_layer/eps-001", "encoder_layer",
                "eps = 0.25 (not the default 1e-5), post-norm, inputs in [-0.5, 0.5] so eps "
                "is comparable to the variance.",
                inputs={"x": rng.uniform((1, 4, 8), -0.5, 0.5)},
                attributes={"num_heads": 2, "norm": "post", "eps": 0.25, "activation": "relu"},
                params=enc_layer_params(rng, 8, 16), flags=["eps"])
    yield error("encoder_layer/heads-001", "encoder_layer",
                "num_heads=3 does not divide D = H*K = 16.",
                inputs={"x": rng.uniform((1, 3, 16))}, attributes={"num_heads": 3},
                params=enc_layer_params(rng, 16, 32), error="ConfigError",
                mentions=["num_heads", "16"])
    yield error("encoder_layer/missing-001", "encoder_layer",
                "norm2.gamma is missing.",
                inputs={"x": rng.uniform((1, 3, 8))}, attributes={"num_heads": 2},
                params=without(enc_layer_params(rng, 8, 16), "norm2.gamma"),
                error="ParameterError", mentions=["norm2.gamma"])
    p = enc_layer_params(rng, 8, 16)
    p["ffn.w1"] = rng.weights((16, 16), 0.5)
    yield error("encoder_layer/bad-param-001", "encoder_layer",
                "ffn.w1 has shape (16, 16) for D=8 (expected (8, F)).",
                inputs={"x": rng.uniform((1, 3, 8))}, attributes={"num_heads": 2},
                params=p, error="ParameterError", mentions=["ffn.w1", "(16, 16)"])
    yield error("encoder_layer/bad-norm-001", "encoder_layer",
                "norm='sandwich' is not one of post, pre.",
                inputs={"x": rng.uniform((1, 3, 8))},
                attributes={"num_heads": 2, "norm": "sandwich"},
                params=enc_layer_params(rng, 8, 16), error="ConfigError", mentions=["norm"])
    yield error("encoder_layer/rank-001", "encoder_layer",
                "x of rank 2 (T, D) without a batch axis.",
                inputs={"x": rng.uniform((3, 8))}, attributes={"num_heads": 2},
                params=enc_layer_params(rng, 8, 16), error="ShapeError", mentions=["x", "(3, 8)"])
    yield from defaults_cases()
    yield from gpt2_cases(Rng(f"{COMPONENT.id}/gpt2"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------


def quiet(p: dict) -> dict:
    """Zero the value and output biases of every attention block: then x + MHA(x) is as
    small as a tiny x, and the first LayerNorm sees a variance comparable to eps."""
    return {k: 0 * a if k.split(".")[-1] in ("b_v", "b_o") else a for k, a in p.items()}


def tiny(rd, shape):
    """Multiples of 2**-12 in [-2**-7, 2**-7] (variance ~2e-5; exact in every dtype)."""
    return rd.uniform(shape, -2**-7, 2**-7, 2**-12)


def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("encoder_layer/defaults-001", "encoder_layer",
                "norm, eps and activation left out (post, 1e-5, relu), H = 2, D = 8: a tiny x "
                "and no value/output biases, so LN1 sees a variance ~2e-5: pre-norm, eps 1e-6 "
                "or 1e-3, or GELU fail.",
                inputs={"x": tiny(rd, (2, 4, 8))}, attributes={"num_heads": 2},
                params=quiet(enc_layer_params(rd, 8, 16)), flags=["defaults", "default-eps"],
                omit_defaults=True)


def grad_cases(r):
    yield from _grad_cases(r)
    yield from gpt2_grad_cases(Rng(f"{COMPONENT.id}/gpt2-grad"))


def _grad_cases(r):
    for n, norm in enumerate(["post", "pre"], 1):
        yield gradient(f"encoder_layer/grad-00{n}", "encoder_layer",
                       f"norm='{norm}', a (2, 3, 4) input, H = 2, F = 8, row 1 key-padded after "
                       f"2: dx sums the self-attention's dquery, dkey and dvalue (x is all "
                       f"three) and the skip paths of both residual blocks.",
                       inputs={"x": r.uniform((2, 3, 4)), "mask": key_padding([3, 2], 3)},
                       attributes={"num_heads": 2, "norm": norm},
                       params=enc_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", f"{norm}-norm", "padding"])
    yield gradient("encoder_layer/grad-003", "encoder_layer",
                   "norm='post', activation='gelu', a causal (4, 4) mask, H = 1, no biases in "
                   "the attention (no b_* gradients expected).",
                   inputs={"x": r.uniform((1, 4, 4)), "mask": causal(4)},
                   attributes={"num_heads": 1, "activation": "gelu"},
                   params=enc_layer_params(r, 4, 6, bias=False),
                   cotangents={"y": r.uniform((1, 4, 4))},
                   flags=["gradient", "post-norm", "gelu", "causal", "no-bias"])
    yield gradient("encoder_layer/grad-004", "encoder_layer",
                   "norm='pre', eps = 0.25, a single token (T = 1): the attention weights are "
                   "1 and its gradient reaches x through the value projection only.",
                   inputs={"x": r.uniform((2, 1, 4))},
                   attributes={"num_heads": 2, "norm": "pre", "eps": 0.25},
                   params=enc_layer_params(r, 4, 8), cotangents={"y": r.uniform((2, 1, 4))},
                   flags=["gradient", "pre-norm", "eps", "single-query"])


# -- GPT-2 blocks (issue 25): pre-norm, GELU tanh (gelu_new), causal mask, every bias -------

GPT2 = {"norm": "pre", "eps": 1e-5, "activation": "gelu_tanh"}


def gpt2_cases(r):
    """GPT2Block as GPT2Model calls it: LN1 -> causal MHA (c_attn, c_proj with biases) ->
    residual, LN2 -> c_fc -> gelu_new (the tanh GELU) -> c_proj -> residual; F = 4D."""
    yield value("encoder_layer/gpt2-001", "encoder_layer",
                "GPT2Block: pre-norm, GELU tanh (gelu_new), eps 1e-5, every bias, a causal "
                "(7, 7) mask, D = 16, H = 4 (K = 4), F = 64 = 4D, B = 2.",
                inputs={"x": r.uniform((2, 7, 16)), "mask": causal(7)},
                attributes={"num_heads": 4, **GPT2}, params=enc_layer_params(r, 16, 64),
                flags=["pre-norm", "gelu_tanh", "causal", "bias"])
    yield value("encoder_layer/gpt2-002", "encoder_layer",
                "GPT2Block with H = 3 heads of K = 4 (D = 12), F = 48, T = 5, causal: the "
                "tanh GELU's inputs reach |u| ~ 3, where erf and tanh GELUs differ most.",
                inputs={"x": r.uniform((1, 5, 12), -2, 2), "mask": causal(5)},
                attributes={"num_heads": 3, **GPT2}, params=enc_layer_params(r, 12, 48),
                flags=["gelu_tanh", "gelu-variant", "causal", "heads"])
    keep = causal(6)[None, None] & key_padding([6, 4], 6)
    yield value("encoder_layer/gpt2-003", "encoder_layer",
                "GPT2Block under GPT2Model's mask for a right-padded batch: causal AND key "
                "padding, (2, 1, 6, 6), row 1 has 4 real tokens; D = 8, H = 2, F = 32.",
                inputs={"x": r.uniform((2, 6, 8)), "mask": keep},
                attributes={"num_heads": 2, **GPT2}, params=enc_layer_params(r, 8, 32),
                flags=["causal", "padding", "pre-norm", "gelu_tanh"])
    yield value("encoder_layer/gpt2-004", "encoder_layer",
                "GPT2Block, one head (H = 1, K = D = 8), T = 4, causal: the scale is "
                "1/sqrt(8).",
                inputs={"x": r.uniform((2, 4, 8)), "mask": causal(4)},
                attributes={"num_heads": 1, **GPT2}, params=enc_layer_params(r, 8, 32),
                flags=["one-head", "causal", "gelu_tanh"])


def gpt2_grad_cases(r):
    yield gradient("encoder_layer/grad-005", "encoder_layer",
                   "GPT2Block (pre-norm, GELU tanh, every bias), a causal (4, 4) mask, D = 4, "
                   "H = 2, F = 16 = 4D: the tanh GELU's derivative "
                   "(1 + tanh) / 2 + u sech^2 ... differs from the erf GELU's.",
                   inputs={"x": r.uniform((2, 4, 4), -2, 2), "mask": causal(4)},
                   attributes={"num_heads": 2, **GPT2}, params=enc_layer_params(r, 4, 16),
                   cotangents={"y": r.uniform((2, 4, 4))},
                   flags=["gradient", "pre-norm", "gelu_tanh", "causal"])
    keep = causal(5)[None, None] & key_padding([5, 3], 5)
    yield gradient("encoder_layer/grad-006", "encoder_layer",
                   "GPT2Block under causal AND key padding (2, 1, 5, 5), D = 6, H = 3 (K = 2), "
                   "F = 24: the padded keys get no gradient from the rows that cannot see them.",
                   inputs={"x": r.uniform((2, 5, 6)), "mask": keep},
                   attributes={"num_heads": 3, **GPT2}, params=enc_layer_params(r, 6, 24),
                   cotangents={"y": r.uniform((2, 5, 6))},
                   flags=["gradient", "causal", "padding", "gelu_tanh"])
