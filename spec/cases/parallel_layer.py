"""parallel_layer: the parallel-residual decoder layer of GPT-J, GPT-NeoX and Falcon,
y = x + Attn(LN_1(x)) + MLP(LN_2(x)) with one or two LayerNorms, RoPE "half", causal
grouped-query attention with biases, a GELU feed-forward with biases."""

from functools import partial

import numpy as np

from ..oracle.parallel_layer import parallel_layer as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances
from .llama import shifted

COMPONENT = Component("parallel_layer", {
    "parallel_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                         required=["num_heads"],
                         attributes={"num_kv_heads": None, "num_norms": 2, "eps": 1e-5,
                                     "activation": "gelu", "rope_base": 10000.0, "offset": 0},
                         added={"rotary_dim": None},
                         params=True, trace=True, oracle=oracle),
}, tolerances=tolerances("stack"))


def layer_params(rng, d, h, h_kv, k, f, num_norms=2, scale=0.5):
    """attn_norm (and ffn_norm with two norms), attn (w_q (D, H*K), w_k, w_v (D, H_kv*K),
    w_o (H*K, D), b_q, b_k, b_v, b_o), ffn (w1 (D, F), b1, w2 (F, D), b2); norm gains in
    [0.5, 1.5], every bias nonzero."""
    p = {"attn_norm.gamma": 1 + rng.weights((d,), 0.5), "attn_norm.beta": rng.weights((d,), 0.5)}
    if num_norms == 2:
        p.update({"ffn_norm.gamma": 1 + rng.weights((d,), 0.5),
                  "ffn_norm.beta": rng.weights((d,), 0.5)})
    p.update({"attn.w_q": rng.weights((d, h * k), scale), "attn.b_q": rng.weights((h * k,), scale),
              "attn.w_k": rng.weights((d, h_kv * k), scale),
              "attn.b_k": rng.weights((h_kv * k,), scale),
              "attn.w_v": rng.weights((d, h_kv * k), scale),
              "attn.b_v": rng.weights((h_kv * k,), scale),
              "attn.w_o": rng.weights((h * k, d), scale), "attn.b_o": rng.weights((d,), scale),
              "ffn.w1": rng.weights((d, f), scale), "ffn.b1": rng.weights((f,), scale),
              "ffn.w2": rng.weights((f, d), scale), "ffn.b2": rng.weights((d,), scale)})
    return p


def layer_case(r, h, h_kv=None, k=4, d=16, f=32, num_norms=2):
    """(attributes, params) of a layer with H = h query heads on h_kv (None: h) kv heads of
    width K = k, D = d, F = f, drawn from r."""
    a = {"num_heads": h, "num_kv_heads": h_kv, "num_norms": num_norms}
    return a, layer_params(r, d, h, h_kv or h, k, f, num_norms)


def cases(rng):
    r = Rng(f"{COMPONENT.id}/layer")

    layer = partial(layer_case, r)

    a, p = layer(4)
    yield value("parallel_layer/basic-001", "parallel_layer",
                "GPT-NeoX (use_parallel_residual): two LayerNorms, H = H_kv = 4, K = 4, D = 16, "
                "F = 32, B = 2, T = 5, GELU, every projection with a bias: y = x + A(LN_1(x)) + "
                "F(LN_2(x)). Computing it sequentially (F on x + A), or with LN_1 for both "
                "branches, fails.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["basic", "parallel-residual", "causal", "heads", "bias"])
    a, p = layer(4, num_norms=1)
    yield value("parallel_layer/one-norm-001", "parallel_layer",
                "num_norms = 1 (GPT-J, Falcon-7B's input_layernorm): one LayerNorm attn_norm "
                "feeds both branches; no ffn_norm parameters. H = 4, K = 4, T = 6.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p,
                flags=["parallel-residual", "variant"])
    a, p = layer(4, 1, num_norms=1)
    yield value("parallel_layer/mqa-001", "parallel_layer",
                "Falcon-7B's multi-query attention: H = 4 query heads, H_kv = 1 key/value head "
                "(w_k, w_v (16, 4)), one norm, T = 5.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["mqa", "parallel-residual"])
    a, p = layer(4, 2)
    yield value("parallel_layer/gqa-001", "parallel_layer",
                "Falcon's new_decoder_architecture: H = 4 on H_kv = 2 (head h reads kv head "
                "h // 2), two norms (ln_attn, ln_mlp), T = 6.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p,
                flags=["gqa", "head-grouping", "parallel-residual"])
    a, p = layer(2, k=8)
    yield value("parallel_layer/offset-001", "parallel_layer",
                "offset = 6, rope_base = 100, K = 8, T = 4: RoPE 'half' at positions 6..9 (the "
                "scores depend on i - j only, but the pairing (i, i + K/2) and the base show).",
                inputs={"x": shifted(r, (1, 4, 16))},
                attributes={**a, "offset": 6, "rope_base": 100.0}, params=p,
                flags=["offset", "half", "base"])
    a, p = layer(4, 2)
    mask = np.ones((2, 1, 1, 6), dtype=bool)
    mask[0, 0, 0, 2] = False
    mask[1, 0, 0, 4:] = False
    yield value("parallel_layer/padding-001", "parallel_layer",
                "A padding mask (2, 1, 1, 6) ANDed with the causal mask: row 0 hides key 2, row 1 "
                "keys 4 and 5.",
                inputs={"x": shifted(r, (2, 6, 16)), "mask": mask}, attributes=a, params=p,
                flags=["padding", "interior-padding", "mask"])
    a, p = layer(4)
    yield value("parallel_layer/gelu-tanh-001", "parallel_layer",
                "activation = gelu_tanh (GPT-J's gelu_new), eps = 0.25 on inputs in [-1, 1]: the "
                "tanh approximation and eps inside the root both show.",
                inputs={"x": r.uniform((2, 4, 16), -1.0, 1.0)},
                attributes={**a, "activation": "gelu_tanh", "eps": 0.25}, params=p,
                flags=["gelu_tanh", "eps", "eps-inside-sqrt"])

    a, p = layer(4, 2)
    x = shifted(r, (1, 3, 16))
    yield error("parallel_layer/kv-heads-001", "parallel_layer",
                "num_kv_heads = 3 does not divide num_heads = 4.",
                inputs={"x": x}, attributes={**a, "num_kv_heads": 3}, params=p,
                error="ConfigError", mentions=["num_kv_heads", "3"])
    yield error("parallel_layer/num-norms-001", "parallel_layer",
                "num_norms = 3 (one or two LayerNorms only).",
                inputs={"x": x}, attributes={**a, "num_norms": 3}, params=p,
                error="ConfigError", mentions=["num_norms", "3"])
    yield error("parallel_layer/ffn-norm-missing-001", "parallel_layer",
                "num_norms = 2 but ffn_norm.beta is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "ffn_norm.beta"},
                error="ParameterError", mentions=["ffn_norm.beta"])
    yield error("parallel_layer/bad-bias-001", "parallel_layer",
                "attn.b_o has shape (8,) where D = 16 needs (16,).",
                inputs={"x": x}, attributes=a, params={**p, "attn.b_o": r.weights((8,))},
                error="ParameterError", mentions=["attn.b_o", "(8,)"])

    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("parallel_layer/defaults-001", "parallel_layer",
                "num_kv_heads, num_norms, eps, activation, rope_base and offset left out (H, 2, "
                "1e-5, gelu, 10000, 0): H = 2, K = 8, T = 8, a tiny x (variance ~2e-5) so eps "
                "1e-6 fails; ffn_norm differs from attn_norm so one norm fails; positions up to "
                "7 where another base rotates pair 1 differently.",
                inputs={"x": tiny(rd, (2, 8, 16))}, attributes={"num_heads": 2},
                params=layer_params(rd, 16, 2, 2, 8, 32), flags=["defaults", "default-eps"],
                omit_defaults=True)
    yield from rotary_cases(Rng(f"{COMPONENT.id}/rotary"))


def rotary_cases(r):
    """rotary_dim (added in 1.4.0): GPT-NeoX's rotary_pct (0.25 by default in transformers'
    GPTNeoXConfig): only the first R features of each query and key head rotate, with the
    frequencies of an R-wide head, theta_i = base^(-2i/R); the other K - R pass through."""
    layer = partial(layer_case, r, k=8)

    a, p = layer(2)
    yield value("parallel_layer/rotary-dim-001", "parallel_layer",
                "rotary_dim 2 of K = 8 (GPT-NeoX's default rotary_pct 0.25), H = 2, two norms, "
                "T = 7, rope_base 100: pair (0, 1) rotates by p radians, features 2..7 pass "
                "through. Rotating the whole head fails.",
                inputs={"x": shifted(r, (2, 7, 16))},
                attributes={**a, "rotary_dim": 2, "rope_base": 100.0}, params=p,
                flags=["rotary-dim", "parallel-residual"])
    a, p = layer(4, 2, num_norms=1)
    yield value("parallel_layer/rotary-dim-002", "parallel_layer",
                "rotary_dim 4 of K = 8, one norm, GQA (H = 4 on H_kv = 2), offset 5, T = 5, "
                "rope_base 100: theta = (1, 100^-1/2) from the R-wide head, not (1, 100^-1/4) "
                "from K; features 4..7 pass through.",
                inputs={"x": shifted(r, (2, 5, 16))},
                attributes={**a, "rotary_dim": 4, "rope_base": 100.0, "offset": 5}, params=p,
                flags=["rotary-dim", "gqa", "offset"])
    a, p = layer(2)
    yield value("parallel_layer/rotary-dim-zero-001", "parallel_layer",
                "rotary_dim 0: nothing rotates (the attention sees no positions but through the "
                "causal mask), offset 9, T = 6.",
                inputs={"x": shifted(r, (1, 6, 16))},
                attributes={**a, "rotary_dim": 0, "offset": 9}, params=p,
                flags=["rotary-dim", "edge", "offset"])
    x = shifted(r, (1, 4, 16))
    yield error("parallel_layer/rotary-dim-odd-001", "parallel_layer", "rotary_dim = 3 is odd.",
                inputs={"x": x}, attributes={**a, "rotary_dim": 3}, params=p,
                error="ConfigError", mentions=["rotary_dim", "3"])
    yield error("parallel_layer/rotary-dim-wide-001", "parallel_layer",
                "rotary_dim = 10 > K = 8 (w_q (16, 16), H = 2).",
                inputs={"x": x}, attributes={**a, "rotary_dim": 10}, params=p,
                error="ConfigError", mentions=["rotary_dim", "10"])


def grad_cases(r):
    layer = partial(layer_case, r, k=2, d=8, f=12)

    a, p = layer(4, 2)
    yield gradient("parallel_layer/grad-001", "parallel_layer",
                   "Two norms, GQA (H = 4 on H_kv = 2, K = 2), D = 8, F = 12, B = 2, T = 4: dy "
                   "reaches x, A and F at once (dx = dy + LN_1^T A^T dy + LN_2^T F^T dy), "
                   "db_o = sum dy.",
                   inputs={"x": shifted(r, (2, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "parallel-residual", "gqa"])
    a, p = layer(2, 1, k=4, num_norms=1)
    yield gradient("parallel_layer/grad-002", "parallel_layer",
                   "One norm, MQA (H = 2, H_kv = 1, K = 4), T = 5: the shared LayerNorm gets the "
                   "sum of both branches' cotangents.",
                   inputs={"x": shifted(r, (1, 5, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "parallel-residual", "mqa", "variant"])
    a, p = layer(2, k=4)
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[1, 0, 0, 0] = False
    yield gradient("parallel_layer/grad-003", "parallel_layer",
                   "A padding mask hiding key 0 of row 1 (its query 0 sees no key: zero attention "
                   "weights, the output bias b_o alone), offset = 3, rope_base = 100, "
                   "activation = gelu_tanh.",
                   inputs={"x": shifted(r, (2, 4, 8)), "mask": mask},
                   attributes={**a, "offset": 3, "rope_base": 100.0, "activation": "gelu_tanh"},
                   params=p, cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "padding", "fully-masked", "offset"])
    yield gradient("parallel_layer/grad-004", "parallel_layer",
                   "num_kv_heads, num_norms, eps, activation, rope_base and offset left out, H = 2, "
                   "K = 4, T = 5, x in [-1/8, 1/8].",
                   inputs={"x": r.uniform((2, 5, 8), -0.125, 0.125, 2.0**-10)},
                   attributes={"num_heads": 2}, params=layer_params(r, 8, 2, 2, 4, 12),
                   cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
    rg = Rng(f"{COMPONENT.id}/grad-rotary")
    yield gradient("parallel_layer/grad-005", "parallel_layer",
                   "rotary_dim 2 of K = 4 (rotary_pct 0.5), GQA (H = 4 on H_kv = 2), offset 2, "
                   "rope_base 100, T = 5: dq and dk rotate back on features 0..1 only.",
                   inputs={"x": shifted(rg, (2, 5, 8))},
                   attributes={"num_heads": 4, "num_kv_heads": 2, "num_norms": 2,
                               "rotary_dim": 2, "offset": 2, "rope_base": 100.0},
                   params=layer_params(rg, 8, 4, 2, 4, 12), cotangents={"y": rg.uniform((2, 5, 8))},
                   flags=["gradient", "rotary-dim", "gqa"])
