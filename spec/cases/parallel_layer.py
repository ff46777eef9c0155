"""parallel_layer: the parallel-residual decoder layer of GPT-J, GPT-NeoX and Falcon,
y = x + Attn(LN_1(x)) + MLP(LN_2(x)) with one or two LayerNorms, RoPE "half", causal
grouped-query attention with biases, a GELU feed-forward with biases."""

from functools import partial

import numpy as np

from ..oracle.parallel_layer import parallel_decoder_only as model_oracle
from ..oracle.parallel_layer import parallel_layer as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances
from .llama import shifted
from .transformer import ids

COMPONENT = Component("parallel_layer", {
    "parallel_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                         required=["num_heads"],
                         attributes={"num_kv_heads": None, "num_norms": 2, "eps": 1e-5,
                                     "activation": "gelu", "rope_base": 10000.0, "offset": 0},
                         added={"rotary_dim": None},
                         params=True, trace=True, oracle=oracle),
    "parallel_decoder_only": Fn(module="models", inputs=["ids"], returns=["logits"],
                                required=["pad_id", "num_layers", "num_heads"],
                                attributes={"num_kv_heads": None, "num_norms": 2, "eps": 1e-5,
                                            "activation": "gelu", "rope_base": 10000.0,
                                            "rotary_dim": None, "tie_embeddings": False},
                                params=True, trace=True, oracle=model_oracle),
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
    yield from model_cases(Rng(f"{COMPONENT.id}/model"))


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
    yield from model_grad_cases(Rng(f"{COMPONENT.id}/grad-model"))


# -- parallel_decoder_only: GPT-NeoX's and Falcon's whole model (issue 25 item 6), their own
# streams (Rng("parallel_layer/model"), Rng("parallel_layer/grad-model")) ---------------------

def model_params(rng, n, d, h, h_kv, k, f, vocab, num_norms=2, tie=False):
    """embed.table (L, D) in [-1, 1], N parallel layers, final_norm (gamma in [0.5, 1.5],
    beta), lm_head.w (D, L) unless tie."""
    p = {"embed.table": rng.weights((vocab, d), 1.0)}
    for i in range(n):
        p.update({f"layers.{i}.{key}": v for key, v in
                  layer_params(rng, d, h, h_kv, k, f, num_norms).items()})
    p["final_norm.gamma"] = 1 + rng.weights((d,), 0.5)
    p["final_norm.beta"] = rng.weights((d,), 0.5)
    if not tie:
        p["lm_head.w"] = rng.weights((d, vocab), 0.5)
    return p


def model_cases(r):
    a = {"pad_id": 0, "num_layers": 2, "num_heads": 4}
    yield value("parallel_layer/model-neox-001", "parallel_decoder_only",
                "GPT-NeoX (GPTNeoXForCausalLM): N = 2 parallel layers with two LayerNorms, "
                "H = H_kv = 4, K = 4, D = 16, F = 32, vocabulary 20, T = 6, row 1 right-padded "
                "after 4; unscaled embedding without positions, the final LayerNorm "
                "(final_norm.gamma, beta) and an untied head without a bias (embed_out).",
                inputs={"ids": ids(r, 20, [6, 4], 6, bos_id=1)}, attributes=a,
                params=model_params(r, 2, 16, 4, 4, 4, 32, 20),
                flags=["basic", "parallel-residual", "two-layers", "padding", "final-norm"])
    yield value("parallel_layer/model-falcon-mq-001", "parallel_decoder_only",
                "Falcon-7B's shape (FalconForCausalLM, multi-query, one LayerNorm per layer, the "
                "head tied to the embedding): H = 4 on H_kv = 1, num_norms = 1, "
                "tie_embeddings, N = 2, D = 16, vocabulary 12, T = 7, row 0 right-padded "
                "after 5.",
                inputs={"ids": ids(r, 12, [5, 7], 7, bos_id=1)},
                attributes={**a, "num_kv_heads": 1, "num_norms": 1, "tie_embeddings": True},
                params=model_params(r, 2, 16, 4, 1, 4, 32, 12, num_norms=1, tie=True),
                flags=["mqa", "variant", "tied-embeddings", "two-layers", "padding"])
    yield value("parallel_layer/model-falcon-gqa-001", "parallel_decoder_only",
                "Falcon's new decoder architecture: GQA H = 4 on H_kv = 2, two LayerNorms "
                "(ln_attn, ln_mlp), tied head, N = 1, vocabulary 10 < D = 16, pad_id 3 inside "
                "row 0 (token 0 ordinary).",
                inputs={"ids": np.array([[1, 5, 3, 7, 9, 0], [1, 8, 6, 4, 3, 3]],
                                        dtype=np.int64)},
                attributes={**a, "num_layers": 1, "num_kv_heads": 2, "pad_id": 3,
                            "tie_embeddings": True},
                params=model_params(r, 1, 16, 4, 2, 4, 32, 10, tie=True),
                flags=["gqa", "tied-embeddings", "pad-id"])
    yield value("parallel_layer/model-rotary-001", "parallel_decoder_only",
                "GPT-NeoX's partial rotary in every layer: rotary_dim 2 of K = 4 "
                "(rotary_pct 0.5), rope_base 100, N = 2, H = 4, T = 6; rotating whole heads "
                "fails.",
                inputs={"ids": ids(r, 20, [6, 6], 6, bos_id=1)},
                attributes={**a, "rotary_dim": 2, "rope_base": 100.0},
                params=model_params(r, 2, 16, 4, 4, 4, 32, 20),
                flags=["rotary-dim", "two-layers", "base"])
    yield value("parallel_layer/model-eps-001", "parallel_decoder_only",
                "eps = 0.25 in every LayerNorm (the final one included), activation "
                "gelu_tanh, N = 1, H = 2, K = 8, T = 5: eps outside the root, or 1e-5 kept in "
                "the final norm, fails.",
                inputs={"ids": ids(r, 20, [5, 5], 5, bos_id=1)},
                attributes={**a, "num_layers": 1, "num_heads": 2, "eps": 0.25,
                            "activation": "gelu_tanh"},
                params=model_params(r, 1, 16, 2, 2, 8, 32, 20),
                flags=["eps", "eps-inside-sqrt", "final-norm"])
    rd = Rng(f"{COMPONENT.id}/model-defaults")
    p = model_params(rd, 1, 16, 2, 2, 8, 32, 12)
    p["embed.table"] = tiny(rd, (12, 16))
    yield value("parallel_layer/model-defaults-001", "parallel_decoder_only",
                "num_kv_heads, num_norms, eps, activation, rope_base, rotary_dim and "
                "tie_embeddings left out (H, 2, 1e-5, gelu, 10000, K, False): N = 1, H = 2, "
                "K = 8, T = 8, a tiny embed.table (variance ~2e-5) so eps 1e-6 fails; ffn_norm "
                "differs from attn_norm so one norm fails; positions up to 7.",
                inputs={"ids": ids(rd, 12, [8, 8], 8, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)

    p = model_params(r, 2, 8, 2, 2, 4, 16, 12)
    x = np.array([[1, 5, 4]], dtype=np.int64)
    a = {**a, "num_heads": 2}
    yield error("parallel_layer/model-oov-001", "parallel_decoder_only",
                "ids holds 12 with a 12-row embed.table.",
                inputs={"ids": np.array([[1, 12, 4]], dtype=np.int64)}, attributes=a, params=p,
                error="DomainError", mentions=["ids", "12"])
    yield error("parallel_layer/model-tied-head-001", "parallel_decoder_only",
                "tie_embeddings = True with an lm_head.w of shape (8, 12) given (refused, not "
                "ignored).",
                inputs={"ids": x}, attributes={**a, "tie_embeddings": True}, params=p,
                error="ParameterError", mentions=["lm_head.w", "(8, 12)"])
    yield error("parallel_layer/model-final-norm-missing-001", "parallel_decoder_only",
                "final_norm.beta is missing (the final norm is a LayerNorm with a bias).",
                inputs={"ids": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "final_norm.beta"},
                error="ParameterError", mentions=["final_norm.beta"])
    yield error("parallel_layer/model-num-norms-001", "parallel_decoder_only",
                "num_norms = 3.",
                inputs={"ids": x}, attributes={**a, "num_norms": 3}, params=p,
                error="ConfigError", mentions=["num_norms", "3"])


def model_grad_cases(r):
    a = {"pad_id": 0, "num_layers": 1, "num_heads": 2}
    yield gradient("parallel_layer/grad-006", "parallel_decoder_only",
                   "GPT-NeoX: N = 2, two norms, H = H_kv = 2, K = 4, D = 8, F = 12, vocabulary "
                   "7, T = 5, row 1 padded after 4: dE is the embedding's scatter-add, "
                   "dW_lm = LN(h_N)^T dlogits.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3], [1, 3, 5, 2, 0]], dtype=np.int64)},
                   attributes={**a, "num_layers": 2},
                   params=model_params(r, 2, 8, 2, 2, 4, 12, 7),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "parallel-residual", "two-layers", "padding"])
    yield gradient("parallel_layer/grad-007", "parallel_decoder_only",
                   "Falcon: MQA (H = 2, H_kv = 1), one norm, tied head, N = 1, vocabulary 6: dE "
                   "sums the head's dlogits^T LN(h_N) and the scatter-add.",
                   inputs={"ids": np.array([[1, 5, 2, 4], [1, 3, 3, 0]], dtype=np.int64)},
                   attributes={**a, "num_kv_heads": 1, "num_norms": 1, "tie_embeddings": True},
                   params=model_params(r, 1, 8, 2, 1, 4, 12, 6, num_norms=1, tie=True),
                   cotangents={"logits": r.uniform((2, 4, 6))},
                   flags=["gradient", "mqa", "tied-embeddings", "padding"])
    yield gradient("parallel_layer/grad-008", "parallel_decoder_only",
                   "rotary_dim 2 of K = 4, rope_base 100, activation gelu_tanh, N = 1, T = 6.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3, 2], [1, 3, 5, 2, 6, 5]],
                                           dtype=np.int64)},
                   attributes={**a, "rotary_dim": 2, "rope_base": 100.0,
                               "activation": "gelu_tanh"},
                   params=model_params(r, 1, 8, 2, 2, 4, 12, 7),
                   cotangents={"logits": r.uniform((2, 6, 7))},
                   flags=["gradient", "rotary-dim", "base"])
    p = model_params(r, 1, 8, 2, 2, 4, 12, 7)
    p["embed.table"] = r.uniform((7, 8), -0.125, 0.125, 2.0**-10)
    yield gradient("parallel_layer/grad-009", "parallel_decoder_only",
                   "num_kv_heads, num_norms, eps, activation, rope_base, rotary_dim and "
                   "tie_embeddings left out, N = 1, H = 2, K = 4, T = 5, an embed.table in "
                   "[-1/8, 1/8].",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3], [1, 3, 5, 0, 0]], dtype=np.int64)},
                   attributes=dict(a), params=p,
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "defaults"], omit_defaults=True)
