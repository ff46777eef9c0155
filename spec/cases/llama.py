"""llama: a Llama-style decoder layer and language model (pre-RMSNorm, RoPE "half",
grouped-query causal attention with an optional sliding window, SwiGLU, no biases)."""

import numpy as np

from ..oracle.llama import llama_decoder_only as model_oracle
from ..oracle.llama import llama_layer as layer_oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances
from .transformer import ids

ATTRS = {"num_kv_heads": None, "eps": 1e-6, "rope_base": 10000.0, "window": None}

COMPONENT = Component("llama", {
    "llama_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                      required=["num_heads"], attributes={**ATTRS, "offset": 0}, params=True,
                      added={"attention_bias": False, "rope_scaling": None, "rotary_dim": None},
                      trace=True, oracle=layer_oracle),
    "llama_decoder_only": Fn(module="models", inputs=["ids"], returns=["logits"],
                             required=["pad_id", "num_layers", "num_heads"],
                             attributes=dict(ATTRS), params=True, trace=True,
                             added={"rope_scaling": None, "rotary_dim": None,
                                    "attention_bias": False, "tie_embeddings": False},
                             oracle=model_oracle),
}, tolerances=tolerances("stack"))


def layer_params(rng, d, h, h_kv, k, f, scale=0.5):
    """attn_norm, attn (w_q (D, H*K), w_k, w_v (D, H_kv*K), w_o (H*K, D)), ffn_norm, ffn;
    norm gains in [0.5, 1.5] (not all 1, so a missing gamma shows)."""
    return {"attn_norm.gamma": 1 + rng.weights((d,), 0.5),
            "attn.w_q": rng.weights((d, h * k), scale),
            "attn.w_k": rng.weights((d, h_kv * k), scale),
            "attn.w_v": rng.weights((d, h_kv * k), scale),
            "attn.w_o": rng.weights((h * k, d), scale),
            "ffn_norm.gamma": 1 + rng.weights((d,), 0.5),
            "ffn.w_gate": rng.weights((d, f), scale),
            "ffn.w_up": rng.weights((d, f), scale),
            "ffn.w_down": rng.weights((f, d), scale)}


def model_params(rng, n, d, h, h_kv, f, vocab, lm_scale=0.5):
    p = {"embed.table": rng.weights((vocab, d), 1.0)}
    for i in range(n):
        p.update({f"layers.{i}.{k}": v for k, v in layer_params(rng, d, h, h_kv, d // h, f).items()})
    p["norm.gamma"] = 1 + rng.weights((d,), 0.5)
    p["lm_head.w"] = rng.weights((d, vocab), lm_scale)
    return p


def shifted(rng, shape):
    """Inputs in [-1, 3] (multiples of 2**-6): rows with a clear nonzero mean, so a LayerNorm
    (mean subtracted) in place of the RMSNorm fails."""
    return rng.uniform(shape, -1.0, 3.0)


def cases(rng):
    yield from layer_cases(Rng(f"{COMPONENT.id}/layer"))
    yield from model_cases(Rng(f"{COMPONENT.id}/model"))
    yield from defaults_cases()
    yield from bias_cases(Rng(f"{COMPONENT.id}/bias"))
    yield from scaling_cases(Rng(f"{COMPONENT.id}/scaling"))
    yield from qwen2_model_cases(Rng(f"{COMPONENT.id}/model-qwen2"))


def layer_cases(r):
    def gqa(h, h_kv, k=4, d=16, f=24):
        return {"num_heads": h, "num_kv_heads": h_kv}, layer_params(r, d, h, h_kv, k, f)

    a, p = gqa(4, 2)
    yield value("llama/layer-gqa-001", "llama_layer",
                "GQA: H = 4 query heads share H_kv = 2 key/value heads (head h reads kv head "
                "h // 2), K = 4, D = 16, F = 24, B = 2, T = 5, causal, no window; inputs with a "
                "nonzero row mean (RMSNorm subtracts none).",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["basic", "gqa", "head-grouping", "causal", "no-mean-subtraction"])
    a, p = gqa(4, 1)
    yield value("llama/layer-mqa-001", "llama_layer",
                "MQA: H = 4 query heads, H_kv = 1 key/value head (w_k, w_v of shape (16, 4)), "
                "T = 6.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p, flags=["mqa"])
    a, p = gqa(2, 2, k=8)
    yield value("llama/layer-mha-001", "llama_layer",
                "H_kv = H = 2 (plain multi-head attention), K = 8, T = 5.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["heads"])
    a, p = gqa(4, 2)
    yield value("llama/layer-window-001", "llama_layer",
                "window = 2 < T = 7 (Mistral's sliding window): query i sees keys i-1 and i "
                "only; window 1 or 3, or a window counted without the query itself, fail.",
                inputs={"x": shifted(r, (2, 7, 16))}, attributes={**a, "window": 2}, params=p,
                flags=["sliding-window", "off-by-one"])
    a, p = gqa(4, 2, k=8, d=16)
    yield value("llama/layer-offset-001", "llama_layer",
                "offset = 7: RoPE positions 7..10, K = 8. RoPE scores depend on i - j only, so "
                "y equals offset 0's (a backend that adds offset elsewhere, e.g. to the mask, "
                "fails); the rotation is 'half' (pairs (i, i + K/2)), so the interleaved "
                "pairing fails.",
                inputs={"x": shifted(r, (1, 4, 16))}, attributes={**a, "offset": 7}, params=p,
                flags=["offset", "half"])
    a, p = gqa(4, 2, k=8)
    yield value("llama/layer-base-001", "llama_layer",
                "rope_base = 500000 (Llama 3), K = 8, T = 6: theta_i = 500000^(-2i/8).",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes={**a, "rope_base": 500000.0},
                params=p, flags=["base"])
    a, p = gqa(4, 2)
    mask = np.ones((2, 1, 1, 6), dtype=bool)
    mask[1, 0, 0, 4:] = False
    mask[0, 0, 0, 2] = False
    yield value("llama/layer-padding-001", "llama_layer",
                "A padding mask (2, 1, 1, 6) ANDed with the causal mask: row 0 hides key 2 "
                "(interior), row 1 keys 4 and 5 (right padding; the padded queries still see "
                "the real prefix).",
                inputs={"x": shifted(r, (2, 6, 16)), "mask": mask}, attributes=a, params=p,
                flags=["padding", "mask", "interior-padding"])
    a, p = gqa(4, 2)
    yield value("llama/layer-eps-001", "llama_layer",
                "eps = 0.5, inputs in [-1, 1]: rms = sqrt(mean(x^2) + eps) differs clearly from "
                "sqrt(mean(x^2)) + eps (eps outside the root).",
                inputs={"x": r.uniform((2, 4, 16), -1.0, 1.0)}, attributes={**a, "eps": 0.5},
                params=p, flags=["eps", "eps-inside-sqrt"])

    a, p = gqa(4, 2)
    x = shifted(r, (1, 3, 16))
    yield error("llama/layer-kv-heads-001", "llama_layer",
                "num_kv_heads = 3 does not divide num_heads = 4.",
                inputs={"x": x}, attributes={**a, "num_kv_heads": 3}, params=p,
                error="ConfigError", mentions=["num_kv_heads", "3"])
    yield error("llama/layer-bad-param-001", "llama_layer",
                "attn.w_k has shape (16, 12) where H_kv = 2 heads of K = 4 need (16, 8).",
                inputs={"x": x}, attributes=a, params={**p, "attn.w_k": r.weights((16, 12))},
                error="ParameterError", mentions=["attn.w_k", "(16, 12)"])
    yield error("llama/layer-window-zero-001", "llama_layer",
                "window = 0 (a query would not see itself).",
                inputs={"x": x}, attributes={**a, "window": 0}, params=p,
                error="ConfigError", mentions=["window", "0"])
    yield error("llama/layer-odd-k-001", "llama_layer",
                "K = 3 (w_q (12, 12), H = 4): RoPE needs an even head width.",
                inputs={"x": shifted(r, (1, 3, 12))}, attributes={"num_heads": 4,
                                                                   "num_kv_heads": 2},
                params=layer_params(r, 12, 4, 2, 3, 8), error="ShapeError",
                mentions=["attn.w_q", "3"])
    yield error("llama/layer-ffn-missing-001", "llama_layer",
                "ffn.w_up is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "ffn.w_up"},
                error="ParameterError", mentions=["ffn.w_up"])
    yield error("llama/layer-offset-negative-001", "llama_layer",
                "offset = -1.",
                inputs={"x": x}, attributes={**a, "offset": -1}, params=p,
                error="ConfigError", mentions=["offset", "-1"])


def model_cases(r):
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2}
    yield value("llama/model-basic-001", "llama_decoder_only",
                "N = 1, D = 16, H = 4, H_kv = 2, F = 32, vocabulary 20, B = 2, T = 6, no "
                "padding: embedding (unscaled, no positional table), one layer, the final "
                "RMSNorm norm.gamma and lm_head.w (no bias).",
                inputs={"ids": ids(r, 20, [6, 6], 6, bos_id=1)}, attributes=attrs,
                params=model_params(r, 1, 16, 4, 2, 32, 20),
                flags=["basic", "gqa", "causal", "final-norm"])
    yield value("llama/model-deep-001", "llama_decoder_only",
                "N = 2, MQA (H = 4, H_kv = 1), D = 16, T = 7, row 1 right-padded after 4.",
                inputs={"ids": ids(r, 20, [7, 4], 7, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "num_kv_heads": 1},
                params=model_params(r, 2, 16, 4, 1, 32, 20),
                flags=["two-layers", "mqa", "padding"])
    yield value("llama/model-window-001", "llama_decoder_only",
                "N = 2, window = 3 < T = 8 in every layer (Mistral's sliding_window); through "
                "two layers a position still reads further back.",
                inputs={"ids": ids(r, 16, [8, 8], 8, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "window": 3},
                params=model_params(r, 2, 16, 4, 2, 32, 16),
                flags=["sliding-window", "two-layers"])
    yield value("llama/model-mha-001", "llama_decoder_only",
                "num_kv_heads = num_heads = 2 (Llama 2 7B's plain multi-head), D = 16, K = 8, "
                "T = 5, rope_base = 500000.",
                inputs={"ids": ids(r, 20, [5, 5], 5, bos_id=1)},
                attributes={**attrs, "num_heads": 2, "rope_base": 500000.0},
                params=model_params(r, 1, 16, 2, 2, 32, 20), flags=["heads", "base"])
    yield value("llama/model-pad-id-001", "llama_decoder_only",
                "pad_id = 4 inside the sequence (token 0 is ordinary): key 4 is masked even "
                "mid-sequence; D = 8, H = 2, H_kv = 1.",
                inputs={"ids": np.array([[1, 0, 4, 7, 0, 9], [1, 8, 8, 4, 4, 4]],
                                        dtype=np.int64)},
                attributes={**attrs, "pad_id": 4, "num_heads": 2, "num_kv_heads": 1},
                params=model_params(r, 1, 8, 2, 1, 16, 10), flags=["pad-id", "padding"])
    yield value("llama/model-single-001", "llama_decoder_only",
                "T = 1 (only BOS): RoPE at position 0 is the identity and every mask agrees; "
                "checks the embedding, the norms, SwiGLU and the head; window = 1.",
                inputs={"ids": np.array([[1], [7]], dtype=np.int64)},
                attributes={**attrs, "window": 1},
                params=model_params(r, 1, 16, 4, 2, 32, 20), flags=["single-query"])

    p = model_params(r, 2, 8, 2, 1, 16, 12)
    yield error("llama/model-oov-001", "llama_decoder_only",
                "ids holds 12 with a 12-row embed.table.",
                inputs={"ids": np.array([[1, 12, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 2, "num_kv_heads": 1, "num_layers": 2},
                params=p, error="DomainError", mentions=["ids", "12"])
    bad = {**p, "layers.1.ffn.w_down": r.weights((16, 4))}
    yield error("llama/model-bad-param-001", "llama_decoder_only",
                "layers.1.ffn.w_down has shape (16, 4) where (16, 8) is expected.",
                inputs={"ids": np.array([[1, 5, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 2, "num_kv_heads": 1, "num_layers": 2},
                params=bad, error="ParameterError", mentions=["layers.1.ffn.w_down", "(16, 4)"])
    yield error("llama/model-kv-heads-001", "llama_decoder_only",
                "num_kv_heads = 2 does not divide num_heads = 3.",
                inputs={"ids": np.array([[1, 5, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 3, "num_kv_heads": 2, "num_layers": 2},
                params=p, error="ConfigError", mentions=["num_kv_heads", "2"])
    yield error("llama/model-window-zero-001", "llama_decoder_only",
                "window = 0.",
                inputs={"ids": np.array([[1, 5, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 2, "num_kv_heads": 1, "num_layers": 2,
                            "window": 0},
                params=p, error="ConfigError", mentions=["window"])


# -- defaults: vectors that leave every defaulted attribute out ----------------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    p = layer_params(rd, 16, 2, 2, 8, 24)
    yield value("llama/layer-defaults-001", "llama_layer",
                "num_kv_heads, eps, rope_base, window and offset left out (H, 1e-6, 10000, "
                "None, 0): H = 2 heads of K = 8 with w_k, w_v of H heads, T = 8, a tiny x "
                "(mean square ~2e-5) so eps 1e-5 fails, positions up to 7 where base 500000 "
                "rotates pair 1 by 0.26 rad instead of 0.7.",
                inputs={"x": tiny(rd, (2, 8, 16))}, attributes={"num_heads": 2}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)
    p = model_params(rd, 1, 16, 2, 2, 32, 12)
    p["embed.table"] = tiny(rd, (12, 16))
    yield value("llama/model-defaults-001", "llama_decoder_only",
                "num_kv_heads, eps, rope_base and window left out, N = 1, H = 2, K = 8, T = 8: "
                "a tiny embed.table, so the first RMSNorm sees a mean square ~2e-5 (eps 1e-5 "
                "fails).",
                inputs={"ids": ids(rd, 12, [8, 8], 8, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)


# -- attention_bias (Qwen2): llama/layer-bias-*, their own stream (Rng("llama/bias")) ----------

def bias_params(rng, d, h, h_kv, k, f, lo=-1.0, hi=1.0):
    """layer_params plus attn.b_q (H*K,), attn.b_k, attn.b_v (H_kv*K,) in [lo, hi]: no b_o."""
    p = layer_params(rng, d, h, h_kv, k, f)
    p["attn.b_q"] = rng.uniform((h * k,), lo, hi)
    p["attn.b_k"] = rng.uniform((h_kv * k,), lo, hi)
    p["attn.b_v"] = rng.uniform((h_kv * k,), lo, hi)
    return p


def bias_cases(r):
    def biased(h, h_kv, k=4, d=16, f=24, **kw):
        return ({"num_heads": h, "num_kv_heads": h_kv, "attention_bias": True},
                bias_params(r, d, h, h_kv, k, f, **kw))

    a, p = biased(4, 2)
    yield value("llama/layer-bias-gqa-001", "llama_layer",
                "attention_bias (Qwen2): q, k, v projections with biases b_q (16,), b_k, b_v (8,) "
                "in [-1, 1], no output bias; GQA H = 4 on H_kv = 2, K = 4, D = 16 = H*K, T = 5. "
                "A layer that drops a bias, adds an output bias, or adds the bias after RoPE "
                "fails.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["bias", "gqa", "projection-order"])
    a, p = biased(4, 1)
    yield value("llama/layer-bias-mqa-001", "llama_layer",
                "attention_bias with MQA (H_kv = 1: b_k, b_v of shape (4,)), T = 6.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p,
                flags=["bias", "mqa"])
    a, p = biased(2, 2, k=8, lo=-4.0, hi=4.0)
    yield value("llama/layer-bias-large-001", "llama_layer",
                "attention_bias with biases in [-4, 4] (Qwen2's key biases are large), H = H_kv = "
                "2, K = 8, T = 5: the bias dominates the keys, so one on the wrong side of RoPE "
                "or left out fails clearly.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["bias", "heads"])
    a, p = biased(4, 2, k=8, d=32)
    yield value("llama/layer-bias-offset-001", "llama_layer",
                "attention_bias with offset = 5, K = 8: the biases are added before RoPE "
                "(transformers' Qwen2Attention), so the scores still depend on i - j only; "
                "rotating n W and adding b after fails.",
                inputs={"x": shifted(r, (1, 4, 32))}, attributes={**a, "offset": 5}, params=p,
                flags=["bias", "offset", "projection-order"])
    a, p = biased(4, 2)
    yield value("llama/layer-bias-window-001", "llama_layer",
                "attention_bias with window = 3 < T = 7 (Qwen2's sliding window).",
                inputs={"x": shifted(r, (1, 7, 16))}, attributes={**a, "window": 3}, params=p,
                flags=["bias", "sliding-window"])
    a, p = biased(4, 2)
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[0, 0, 0, 1] = False
    mask[1, 0, 0, 3:] = False
    yield value("llama/layer-bias-padding-001", "llama_layer",
                "attention_bias with a padding mask (2, 1, 1, 5): row 0 hides key 1, row 1 keys 3 "
                "and 4; a hidden key's bias reaches no query.",
                inputs={"x": shifted(r, (2, 5, 16)), "mask": mask}, attributes=a, params=p,
                flags=["bias", "padding", "interior-padding"])

    a, p = biased(4, 2)
    x = shifted(r, (1, 3, 16))
    yield error("llama/layer-bias-missing-001", "llama_layer",
                "attention_bias = True but attn.b_k is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "attn.b_k"},
                error="ParameterError", mentions=["attn.b_k"])
    yield error("llama/layer-bias-shape-001", "llama_layer",
                "attn.b_v has shape (16,) where H_kv = 2 heads of K = 4 need (8,).",
                inputs={"x": x}, attributes=a, params={**p, "attn.b_v": r.uniform((16,))},
                error="ParameterError", mentions=["attn.b_v", "(16,)"])
    yield error("llama/layer-bias-flag-001", "llama_layer",
                "attention_bias = 1 (not a boolean).",
                inputs={"x": x}, attributes={**a, "attention_bias": 1}, params=p,
                error="ConfigError", mentions=["attention_bias"])


# -- gradients: llama/grad-*, their own stream (Rng("llama/grad")) -----------------------------

def grad_cases(r):
    def layer(h, h_kv, k, d=8, f=6):
        return {"num_heads": h, "num_kv_heads": h_kv}, layer_params(r, d, h, h_kv, k, f)

    a, p = layer(4, 2, 2)
    yield gradient("llama/grad-001", "llama_layer",
                   "GQA: H = 4 query heads on H_kv = 2 key/value heads, K = 2, D = 8, F = 6, "
                   "B = 2, T = 4, causal: dx and every parameter through both RMSNorms, RoPE "
                   "(the backward rotates by -angle), sdpa (a kv head's dk, dv summed over its 2 "
                   "query heads) and SwiGLU; each residual passes dy to both branches.",
                   inputs={"x": shifted(r, (2, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "gqa", "head-grouping", "causal"])
    a, p = layer(2, 1, 4)
    yield gradient("llama/grad-002", "llama_layer",
                   "window = 2 < T = 5, MQA (H = 2, H_kv = 1), K = 4: query i reads keys i-1 and "
                   "i only, so key j gets gradient through the scores of queries j and j+1 only.",
                   inputs={"x": shifted(r, (1, 5, 8))}, attributes={**a, "window": 2}, params=p,
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "sliding-window", "mqa"])
    a, p = layer(2, 1, 4)
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[0, 0, 0, 2] = False
    mask[1, 0, 0, 0] = False
    yield gradient("llama/grad-003", "llama_layer",
                   "A padding mask (2, 1, 1, 4) ANDed with the causal mask: row 0 hides key 2 "
                   "(interior), row 1 key 0, so row 1's query 0 sees no key at all: its "
                   "attention output is 0 and its dx comes through the residuals and the FFN "
                   "only; a hidden key's k and v get no gradient from any query. The mask has "
                   "no gradient.",
                   inputs={"x": shifted(r, (2, 4, 8)), "mask": mask}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "padding", "fully-masked", "interior-padding"])
    a, p = layer(2, 2, 4)
    yield gradient("llama/grad-004", "llama_layer",
                   "offset = 5 (RoPE positions 5..7), rope_base = 100, eps = 0.25, H_kv = H = 2, "
                   "K = 4, T = 3: scores depend on i - j only, so the gradients equal offset 0's; "
                   "a backward that rotates by +angle (R dy for R^T dy) fails.",
                   inputs={"x": shifted(r, (2, 3, 8))},
                   attributes={**a, "offset": 5, "rope_base": 100.0, "eps": 0.25}, params=p,
                   cotangents={"y": r.uniform((2, 3, 8))},
                   flags=["gradient", "offset", "base", "eps"])
    p = layer_params(r, 8, 2, 2, 4, 6)
    yield gradient("llama/grad-005", "llama_layer",
                   "num_kv_heads, eps, rope_base, window and offset left out (H, 1e-6, 10000, "
                   "None, 0), H = 2, K = 4, T = 5, x in [-1/8, 1/8] (mean square ~5e-3; a smaller "
                   "one overflows float16's (mean square)^-1.5 in a correct backward): eps 1e-5 "
                   "and base 500000 (pair 1 rotated by p/707, not p/100) fail at float32 (2e3 "
                   "and 9e3 times its tolerance) but not at float16/bfloat16; window 2 fails at "
                   "every dtype.",
                   inputs={"x": r.uniform((2, 5, 8), -0.125, 0.125, 2.0**-10)},
                   attributes={"num_heads": 2}, params=p,
                   cotangents={"y": r.uniform((2, 5, 8))},
                   flags=["gradient", "defaults", "default-eps"], omit_defaults=True)
    yield gradient("llama/grad-006", "llama_decoder_only",
                   "N = 2, H = 2, H_kv = 1, D = 8, F = 6, vocabulary 7, T = 4, window = 3, row 1 "
                   "right-padded after 3, id 4 repeated (its embed.table row sums the gradients "
                   "of its positions): lm_head.w, the final norm, both layers, embed.table; the "
                   "ids get none.",
                   inputs={"ids": np.array([[1, 4, 5, 4], [1, 6, 4, 0]], dtype=np.int64)},
                   attributes={"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
                               "window": 3},
                   params=model_params(r, 2, 8, 2, 1, 6, 7),
                   cotangents={"logits": r.uniform((2, 4, 7))},
                   flags=["gradient", "two-layers", "mqa", "padding", "repeat", "sliding-window"])
    model = {"pad_id": 0, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2}
    yield gradient("llama/grad-007", "llama_decoder_only",
                   "N = 1, GQA (H = 4 on H_kv = 2, K = 2), D = 8, F = 6, vocabulary 7, T = 4, no "
                   "padding, rope_base = 500000, eps = 1e-5.",
                   inputs={"ids": np.array([[1, 3, 6, 5], [1, 5, 5, 3]], dtype=np.int64)},
                   attributes={**model, "rope_base": 500000.0, "eps": 1e-5},
                   params=model_params(r, 1, 8, 4, 2, 6, 7),
                   cotangents={"logits": r.uniform((2, 4, 7))},
                   flags=["gradient", "gqa", "base", "eps"])
    yield gradient("llama/grad-008", "llama_decoder_only",
                   "Left padding: row 0 is [0, 0, 1, 5] with pad_id 0, so its queries 0 and 1 see "
                   "no key (zero attention output, no NaN), yet their logits have cotangents: "
                   "embed.table row 0 gets gradient through the residual stream and the FFN. "
                   "H = 2, H_kv = 1, D = 8, N = 1.",
                   inputs={"ids": np.array([[0, 0, 1, 5], [1, 4, 6, 3]], dtype=np.int64)},
                   attributes={**model, "num_heads": 2, "num_kv_heads": 1},
                   params=model_params(r, 1, 8, 2, 1, 6, 7),
                   cotangents={"logits": r.uniform((2, 4, 7))},
                   flags=["gradient", "left-padding", "fully-masked", "mqa"])
    p = model_params(r, 1, 8, 2, 2, 6, 7)
    p["embed.table"] = r.uniform((7, 8), -0.125, 0.125, 2.0**-10)
    yield gradient("llama/grad-009", "llama_decoder_only",
                   "num_kv_heads, eps, rope_base and window left out (H, 1e-6, 10000, None), "
                   "N = 1, H = 2, K = 4, T = 5, an embed.table in [-1/8, 1/8] (the first "
                   "RMSNorm's mean square ~5e-3, as llama/grad-005): eps 1e-5 fails at float32 "
                   "(5e2 times its tolerance) only, base 500000 at float32 and float16, window 2 "
                   "at every dtype.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3], [1, 3, 5, 0, 0]], dtype=np.int64)},
                   attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "defaults", "default-eps", "padding"], omit_defaults=True)
    yield from bias_grad_cases(Rng(f"{COMPONENT.id}/grad-bias"))
    yield from scaling_grad_cases(Rng(f"{COMPONENT.id}/grad-scaling"))
    yield from qwen2_model_grad_cases(Rng(f"{COMPONENT.id}/grad-model-qwen2"))


def bias_grad_cases(r):
    def biased(h, h_kv, k, d=8, f=6):
        return ({"num_heads": h, "num_kv_heads": h_kv, "attention_bias": True},
                bias_params(r, d, h, h_kv, k, f))

    a, p = biased(4, 2, 2)
    yield gradient("llama/grad-010", "llama_layer",
                   "attention_bias, GQA H = 4 on H_kv = 2, K = 2, D = 8, T = 4: db_q, db_k, db_v "
                   "are the projections' cotangents summed over (B, T) (db_k, db_v before the "
                   "sum over the query heads that read them); no b_o.",
                   inputs={"x": shifted(r, (2, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "bias", "gqa"])
    a, p = biased(2, 1, 4)
    yield gradient("llama/grad-011", "llama_layer",
                   "attention_bias, MQA (H = 2, H_kv = 1), K = 4, window = 2 < T = 5.",
                   inputs={"x": shifted(r, (1, 5, 8))}, attributes={**a, "window": 2}, params=p,
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "bias", "mqa", "sliding-window"])
    a, p = biased(2, 2, 4)
    yield gradient("llama/grad-012", "llama_layer",
                   "attention_bias, offset = 3, rope_base = 100: the q and k biases sit before "
                   "RoPE, so db_q = sum over positions of R_-theta dQ (the rotated-back cotangent).",
                   inputs={"x": shifted(r, (2, 3, 8))},
                   attributes={**a, "offset": 3, "rope_base": 100.0}, params=p,
                   cotangents={"y": r.uniform((2, 3, 8))},
                   flags=["gradient", "bias", "offset", "base"])
    a, p = biased(2, 1, 4)
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[1, 0, 0, 0] = False
    yield gradient("llama/grad-013", "llama_layer",
                   "attention_bias with a padding mask hiding key 0 of row 1: that row's query 0 "
                   "sees no key, so its q (and its share of db_q) gets no gradient; key 0's k "
                   "and v bias shares get none either.",
                   inputs={"x": shifted(r, (2, 4, 8)), "mask": mask}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "bias", "padding", "fully-masked"])


# -- RoPE scaling and partial rotary (issue 25 item 1): llama/layer-<rule>-*, their own stream -----
# (Rng("llama/scaling")). The scaling is rope's `scaling` (transformers' rope_parameters less
# rope_theta), at positions past a small original context L0, where the rules differ.

L0 = 16
LINEAR = {"rope_type": "linear", "factor": 4.0}
DYNAMIC = {"rope_type": "dynamic", "factor": 8.0, "max_position_embeddings": L0 // 2}
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": L0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 4 * L0}
LONGROPE = {"rope_type": "longrope", "original_max_position_embeddings": L0,
            "max_position_embeddings": 4 * L0, "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [1.0, 4.0, 16.0, 64.0]}


def scaling_cases(r):
    def gqa(h=2, h_kv=1, k=8, d=16, f=24):
        return {"num_heads": h, "num_kv_heads": h_kv}, layer_params(r, d, h, h_kv, k, f)

    a, p = gqa()
    yield value("llama/layer-linear-001", "llama_layer",
                "rope_scaling linear (factor 4), positions 20..24 (offset 20), H = 2 on H_kv = 1, "
                "K = 8: theta_i / 4 in the queries and the keys; a layer that ignores the scaling "
                "or scales the positions of the queries only fails.",
                inputs={"x": shifted(r, (2, 5, 16))},
                attributes={**a, "offset": 20, "rope_scaling": LINEAR},
                params=p, flags=["rope-scaling", "offset", "gqa"])
    a, p = gqa()
    yield value("llama/layer-dynamic-001", "llama_layer",
                "rope_scaling dynamic (factor 8, max_position_embeddings 8), positions 14..19: "
                "seq_len = offset + T = 20 > 8, so base' = 10000 (8 * 20 / 8 - 7)^(8/6) = "
                "10000 * 30.6; seq_len taken as T = 6 (<= 8: the base unchanged) fails.",
                inputs={"x": shifted(r, (2, 6, 16))},
                attributes={**a, "offset": 14, "rope_scaling": DYNAMIC},
                params=p, flags=["rope-scaling", "offset"])
    a, p = gqa()
    yield value("llama/layer-yarn-001", "llama_layer",
                "rope_scaling yarn (factor 8, L0 16), positions 20..24: the ramped frequencies "
                "and the attention factor m = 0.1 ln 8 + 1 = 1.208 multiplying cos and sin of "
                "both q and k (the scores carry m^2 = 1.459); dropping m, or applying it once to "
                "the scores, fails.",
                inputs={"x": shifted(r, (2, 5, 16))},
                attributes={**a, "offset": 20, "rope_scaling": YARN},
                params=p, flags=["rope-scaling", "attention-factor", "offset"])
    a, p = gqa(h=4, h_kv=2, k=8, d=32)
    yield value("llama/layer-llama3-001", "llama_layer",
                "rope_scaling llama3 (factor 8, low 1, high 4, L0 64), K = 8, positions 30..34: "
                "pair 0 kept (wavelength 6.3 < 64/4), pair 1 in the smooth band (62.8), pairs 2, 3 "
                "divided by 8; yarn's or linear's rule in its place fails.",
                inputs={"x": shifted(r, (1, 5, 32))},
                attributes={**a, "offset": 30, "rope_scaling": LLAMA3},
                params=p, flags=["rope-scaling", "offset", "gqa"])
    a, p = gqa()
    yield value("llama/layer-longrope-001", "llama_layer",
                "rope_scaling longrope (L0 16, max_position_embeddings 64), positions 14..17: "
                "seq_len = 18 > 16 picks long_factor [1, 4, 16, 64] for every row, and m = "
                "sqrt(1 + ln 4 / ln 16) = 1.225 multiplies cos and sin; short_factor, or no m, "
                "fails.",
                inputs={"x": shifted(r, (2, 4, 16))},
                attributes={**a, "offset": 14, "rope_scaling": LONGROPE},
                params=p, flags=["rope-scaling", "attention-factor", "offset"])
    a, p = gqa()
    yield value("llama/layer-longrope-002", "llama_layer",
                "rope_scaling longrope at positions 0..5 (seq_len 6 <= L0 16): short_factor "
                "[1, 1.5, 2, 3], still with m = 1.225 (transformers applies it in both regimes); "
                "the long factors fail.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes={**a, "rope_scaling": LONGROPE},
                params=p, flags=["rope-scaling", "attention-factor"])
    a, p = gqa()
    yield value("llama/layer-rotary-dim-001", "llama_layer",
                "rotary_dim 4 of K = 8 (partial rotary, Phi-3's partial_rotary_factor 0.5), no "
                "scaling, rope_base 100, positions 3..8: pairs (i, i + 2) of each head's first 4 "
                "features with theta_i = 100^(-2i/4), features 4..7 unrotated; rotating every "
                "feature, or theta from K (100^(-2i/8)), fails.",
                inputs={"x": shifted(r, (2, 6, 16))},
                attributes={**a, "offset": 3, "rotary_dim": 4, "rope_base": 100.0},
                params=p, flags=["rotary-dim", "offset"])
    a, p = gqa()
    yield value("llama/layer-yarn-rotary-dim-001", "llama_layer",
                "rope_scaling yarn with mscale 1 and mscale_all_dim 0.5 (DeepSeek's spelling: "
                "m = (0.1 ln 8 + 1) / (0.05 ln 8 + 1) = 1.094) and rotary_dim 6 of K = 8, "
                "positions 18..22: the frequencies of R = 6 and m on the rotated features only.",
                inputs={"x": shifted(r, (1, 5, 16))},
                attributes={**a, "offset": 18, "rotary_dim": 6,
                            "rope_scaling": {**YARN, "mscale": 1.0, "mscale_all_dim": 0.5}},
                params=p, flags=["rope-scaling", "rotary-dim", "attention-factor"])
    a, p = gqa()
    yield value("llama/layer-longrope-rotary-dim-001", "llama_layer",
                "rope_scaling longrope with rotary_dim 4 of K = 8 (Phi-3 / Phi-4-mini: "
                "partial_rotary_factor 0.5 with longrope), positions 15..18 (seq_len 19 > L0 "
                "16: long factors [1, 8] over R = 4), m = 1.225 on the rotated features only.",
                inputs={"x": shifted(r, (2, 4, 16))},
                attributes={**a, "offset": 15, "rotary_dim": 4,
                            "rope_scaling": {**LONGROPE, "short_factor": [1.0, 2.0],
                                             "long_factor": [1.0, 8.0]}},
                params=p, flags=["rope-scaling", "rotary-dim", "attention-factor"])
    p = layer_params(r, 16, 2, 2, 8, 24)
    yield value("llama/layer-scaling-defaults-001", "llama_layer",
                "Only num_heads and rope_scaling (llama3) given: num_kv_heads, eps, rope_base, "
                "window, offset and rotary_dim left out (H, 1e-6, 10000, None, 0, K), H = 2, "
                "K = 8, T = 8, a tiny x so eps 1e-5 fails.",
                inputs={"x": tiny(r, (2, 8, 16))},
                attributes={"num_heads": 2, "rope_scaling": {**LLAMA3,
                                                             "original_max_position_embeddings": 8}},
                params=p, flags=["defaults", "rope-scaling", "default-eps"], omit_defaults=True)

    mattrs = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield value("llama/model-yarn-001", "llama_decoder_only",
                "N = 2, rope_scaling yarn (factor 4, L0 4), T = 8 (positions past L0), D = 16, "
                "H = 2, H_kv = 1, K = 8, row 1 right-padded after 6: every layer's q and k "
                "rotated with the yarn frequencies and m = 1.139.",
                inputs={"ids": ids(r, 20, [8, 6], 8, bos_id=1)},
                attributes={**mattrs, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 4}},
                params=model_params(r, 2, 16, 2, 1, 32, 20),
                flags=["rope-scaling", "attention-factor", "two-layers", "padding"])
    yield value("llama/model-dynamic-001", "llama_decoder_only",
                "N = 1, rope_scaling dynamic (factor 4, max_position_embeddings 4) with "
                "rotary_dim 4 of K = 8, T = 7: seq_len 7 > 4, base' = 10000 (4 * 7 / 4 - 3)^(4/2) "
                "= 160000 over the first 4 features of each head.",
                inputs={"ids": ids(r, 20, [7, 7], 7, bos_id=1)},
                attributes={**mattrs, "num_layers": 1, "rotary_dim": 4,
                            "rope_scaling": {"rope_type": "dynamic", "factor": 4.0,
                                             "max_position_embeddings": 4}},
                params=model_params(r, 1, 16, 2, 1, 32, 20), flags=["rope-scaling", "rotary-dim"])

    a, p = gqa()
    x = shifted(r, (1, 3, 16))
    yield error("llama/layer-rope-scaling-key-001", "llama_layer",
                "rope_scaling = {'type': 'linear', 'factor': 2}: 'type' is transformers' old "
                "spelling of rope_type, not a key of the spec's scaling.",
                inputs={"x": x}, attributes={**a, "rope_scaling": {"type": "linear", "factor": 2.0}},
                params=p, error="ConfigError", mentions=["rope_scaling", "type"])
    yield error("llama/layer-rope-scaling-type-001", "llama_layer",
                "rope_scaling rope_type = 'proportional' (a transformers 5 rule the spec does not "
                "state).",
                inputs={"x": x},
                attributes={**a, "rope_scaling": {"rope_type": "proportional", "factor": 2.0}},
                params=p, error="ConfigError", mentions=["rope_type", "proportional"])
    yield error("llama/layer-rotary-dim-odd-001", "llama_layer", "rotary_dim = 5 is odd.",
                inputs={"x": x}, attributes={**a, "rotary_dim": 5}, params=p,
                error="ConfigError", mentions=["rotary_dim", "5"])
    yield error("llama/layer-rotary-dim-wide-001", "llama_layer",
                "rotary_dim = 16 > K = 8 (w_q (16, 16), H = 2).",
                inputs={"x": x}, attributes={**a, "rotary_dim": 16}, params=p,
                error="ConfigError", mentions=["rotary_dim", "16"])
    yield error("llama/model-rope-scaling-001", "llama_decoder_only",
                "rope_scaling = 'linear', a string where a dict of rope_parameters is expected.",
                inputs={"ids": np.array([[1, 5, 4]], dtype=np.int64)},
                attributes={**mattrs, "rope_scaling": "linear"},
                params=model_params(r, 2, 16, 2, 1, 32, 20), error="ConfigError",
                mentions=["rope_scaling", "linear"])


def scaling_grad_cases(r):
    def layer(h=2, h_kv=1, k=4, d=8, f=6):
        return {"num_heads": h, "num_kv_heads": h_kv}, layer_params(r, d, h, h_kv, k, f)

    a, p = layer()
    yield gradient("llama/grad-014", "llama_layer",
                   "rope_scaling yarn (factor 8, L0 16), positions 20..23, H = 2 on H_kv = 1, K = 4: "
                   "dQ and dK go back through m R^T (m = 1.208), so dW_q and dW_k carry m; a "
                   "backward without m fails.",
                   inputs={"x": shifted(r, (2, 4, 8))},
                   attributes={**a, "offset": 20, "rope_scaling": YARN}, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "rope-scaling", "attention-factor", "offset"])
    a, p = layer(k=8, d=16)
    yield gradient("llama/grad-015", "llama_layer",
                   "rope_scaling llama3 (factor 8, L0 64) with rotary_dim 6 of K = 8, positions "
                   "30..33: the unrotated features 6, 7 of dQ, dK pass straight back.",
                   inputs={"x": shifted(r, (1, 4, 16))},
                   attributes={**a, "offset": 30, "rotary_dim": 6, "rope_scaling": LLAMA3},
                   params=p, cotangents={"y": r.uniform((1, 4, 16))},
                   flags=["gradient", "rope-scaling", "rotary-dim", "offset"])
    a, p = layer(k=8, d=16)
    yield gradient("llama/grad-016", "llama_layer",
                   "rope_scaling longrope (L0 16), positions 14..17 (long factors), m = 1.225.",
                   inputs={"x": shifted(r, (1, 4, 16))},
                   attributes={**a, "offset": 14, "rope_scaling": LONGROPE}, params=p,
                   cotangents={"y": r.uniform((1, 4, 16))},
                   flags=["gradient", "rope-scaling", "attention-factor"])
    yield gradient("llama/grad-017", "llama_decoder_only",
                   "N = 1, rope_scaling linear (factor 4), positions 0..4, H = 2, "
                   "H_kv = 1, K = 4, D = 8, vocabulary 7.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3], [1, 3, 5, 2, 0]], dtype=np.int64)},
                   attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                               "rope_scaling": LINEAR},
                   params=model_params(r, 1, 8, 2, 1, 6, 7),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "rope-scaling", "padding"])
    yield gradient("llama/grad-018", "llama_decoder_only",
                   "N = 1, rope_scaling dynamic (factor 2, max_position_embeddings 4), T = 6 > 4: "
                   "base' = 10000 (2 * 6 / 4 - 1)^(4/2) = 40000.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3, 2], [1, 3, 5, 2, 6, 5]], dtype=np.int64)},
                   attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                               "rope_scaling": {"rope_type": "dynamic", "factor": 2.0,
                                                "max_position_embeddings": 4}},
                   params=model_params(r, 1, 8, 2, 1, 6, 7),
                   cotangents={"logits": r.uniform((2, 6, 7))},
                   flags=["gradient", "rope-scaling"])


# -- the Qwen2 model (issue 25 item 6): llama_decoder_only's attention_bias and tie_embeddings,
# llama/model-bias-*, model-tied-*, model-qwen2-*, their own stream (Rng("llama/model-qwen2")).

def qwen2_model_params(rng, n, d, h, h_kv, f, vocab, bias=True, tie=False, lo=-1.0, hi=1.0):
    """model_params with every layer's attn.b_q (H*K,), b_k, b_v (H_kv*K,) in [lo, hi]
    (bias) and without lm_head.w (tie: the head is embed.table^T)."""
    p = model_params(rng, n, d, h, h_kv, f, vocab)
    k = d // h
    if bias:
        for i in range(n):
            p[f"layers.{i}.attn.b_q"] = rng.uniform((h * k,), lo, hi)
            p[f"layers.{i}.attn.b_k"] = rng.uniform((h_kv * k,), lo, hi)
            p[f"layers.{i}.attn.b_v"] = rng.uniform((h_kv * k,), lo, hi)
    if tie:
        del p["lm_head.w"]
    return p


def qwen2_model_cases(r):
    attrs = {"pad_id": 0, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}
    yield value("llama/model-bias-001", "llama_decoder_only",
                "attention_bias (Qwen2's q, k, v biases in every layer, no output bias), N = 2, "
                "D = 16, H = 4, H_kv = 2, F = 32, vocabulary 20, T = 6, row 1 right-padded after "
                "4; biases in [-2, 2], so a model that drops them, or biases one layer only, "
                "fails.",
                inputs={"ids": ids(r, 20, [6, 4], 6, bos_id=1)},
                attributes={**attrs, "attention_bias": True},
                params=qwen2_model_params(r, 2, 16, 4, 2, 32, 20, lo=-2.0, hi=2.0),
                flags=["bias", "two-layers", "gqa", "padding"])
    yield value("llama/model-tied-001", "llama_decoder_only",
                "tie_embeddings (small Qwen2 configs, tie_word_embeddings): logits = "
                "RMSNorm(h_N) embed.table^T, no lm_head.w and no bias; N = 1, D = 16, H = 4, "
                "H_kv = 2, vocabulary 12, T = 5. A head that scales the table by sqrt(D) or "
                "reads it untransposed fails.",
                inputs={"ids": ids(r, 12, [5, 5], 5, bos_id=1)},
                attributes={**attrs, "num_layers": 1, "tie_embeddings": True},
                params=qwen2_model_params(r, 1, 16, 4, 2, 32, 12, bias=False, tie=True),
                flags=["tied-embeddings", "lm-head", "no-bias"])
    yield value("llama/model-qwen2-001", "llama_decoder_only",
                "A whole Qwen2 (Qwen2ForCausalLM with tie_word_embeddings and a sliding window): "
                "attention_bias and tie_embeddings together, window = 3 < T = 7, MQA (H = 4, "
                "H_kv = 1), N = 2, D = 16, rope_base 1000000 (Qwen2's rope_theta), row 1 "
                "right-padded after 5.",
                inputs={"ids": ids(r, 16, [7, 5], 7, bos_id=1)},
                attributes={**attrs, "num_kv_heads": 1, "window": 3, "rope_base": 1000000.0,
                            "attention_bias": True, "tie_embeddings": True},
                params=qwen2_model_params(r, 2, 16, 4, 1, 32, 16, tie=True),
                flags=["bias", "tied-embeddings", "sliding-window", "mqa", "two-layers",
                       "padding", "base"])
    yield value("llama/model-qwen2-002", "llama_decoder_only",
                "attention_bias and tie_embeddings with H = H_kv = 2 heads of K = 8, N = 1, "
                "vocabulary 10 < D = 16 (a head read as E rather than E^T has the wrong width), "
                "pad_id 3 inside row 0.",
                inputs={"ids": np.array([[1, 5, 3, 7, 9, 2], [1, 8, 6, 4, 3, 3]],
                                        dtype=np.int64)},
                attributes={**attrs, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2,
                            "pad_id": 3, "attention_bias": True, "tie_embeddings": True},
                params=qwen2_model_params(r, 1, 16, 2, 2, 24, 10, tie=True),
                flags=["bias", "tied-embeddings", "pad-id", "heads"])

    x = np.array([[1, 5, 4]], dtype=np.int64)
    p = qwen2_model_params(r, 2, 8, 2, 1, 16, 12)
    a = {**attrs, "num_heads": 2, "num_kv_heads": 1, "attention_bias": True}
    yield error("llama/model-bias-missing-001", "llama_decoder_only",
                "attention_bias = True but layers.1.attn.b_q is missing.",
                inputs={"ids": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "layers.1.attn.b_q"},
                error="ParameterError", mentions=["layers.1.attn.b_q"])
    yield error("llama/model-tied-head-001", "llama_decoder_only",
                "tie_embeddings = True with an lm_head.w of shape (8, 12) given: the tied head "
                "is embed.table^T alone, the extra parameter is refused, not ignored.",
                inputs={"ids": x}, attributes={**a, "tie_embeddings": True}, params=p,
                error="ParameterError", mentions=["lm_head.w", "(8, 12)"])
    yield error("llama/model-tie-flag-001", "llama_decoder_only",
                "tie_embeddings = 'yes' (not a boolean).",
                inputs={"ids": x}, attributes={**a, "tie_embeddings": "yes"},
                params={k: v for k, v in p.items() if k != "lm_head.w"},
                error="ConfigError", mentions=["tie_embeddings"])
    yield value("llama/model-phi3-001", "llama_decoder_only",
                "A whole Phi-3 (Phi3ForCausalLM: partial_rotary_factor 0.5, untied head): "
                "rotary_dim 4 of K = 8 in every layer, no scaling, rope_base 100, N = 2, H = 2, "
                "H_kv = 1, D = 16, T = 7, row 1 right-padded after 5; rotating whole heads, or "
                "theta from K rather than rotary_dim, fails.",
                inputs={"ids": ids(r, 20, [7, 5], 7, bos_id=1)},
                attributes={**attrs, "num_heads": 2, "num_kv_heads": 1, "rotary_dim": 4,
                            "rope_base": 100.0},
                params=model_params(r, 2, 16, 2, 1, 32, 20),
                flags=["rotary-dim", "two-layers", "padding", "base"])


def qwen2_model_grad_cases(r):
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1}
    yield gradient("llama/grad-019", "llama_decoder_only",
                   "attention_bias and tie_embeddings, N = 1, H = 2, H_kv = 1, K = 4, D = 8, "
                   "vocabulary 7: d embed.table is the head's dlogits^T RMSNorm(h_N) plus the "
                   "embedding's scatter-add (one of the two alone fails); db_q, db_k, db_v sum "
                   "the pre-RoPE cotangents over (B, T).",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3], [1, 3, 5, 2, 0]], dtype=np.int64)},
                   attributes={**attrs, "attention_bias": True, "tie_embeddings": True},
                   params=qwen2_model_params(r, 1, 8, 2, 1, 6, 7, tie=True),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "bias", "tied-embeddings", "padding"])
    yield gradient("llama/grad-020", "llama_decoder_only",
                   "attention_bias, N = 2 (untied head), H = 2, H_kv = 1, K = 4, D = 8, window 3 "
                   "< T = 6: each layer's biases get their own gradient.",
                   inputs={"ids": np.array([[1, 4, 6, 4, 3, 2], [1, 3, 5, 2, 6, 0]],
                                           dtype=np.int64)},
                   attributes={**attrs, "num_layers": 2, "window": 3, "attention_bias": True},
                   params=qwen2_model_params(r, 2, 8, 2, 1, 6, 7),
                   cotangents={"logits": r.uniform((2, 6, 7))},
                   flags=["gradient", "bias", "two-layers", "sliding-window", "padding"])
    yield gradient("llama/grad-021", "llama_decoder_only",
                   "tie_embeddings alone, N = 1, H = H_kv = 2, K = 4, D = 8, vocabulary 6.",
                   inputs={"ids": np.array([[1, 5, 2, 4], [1, 3, 3, 0]], dtype=np.int64)},
                   attributes={**attrs, "num_kv_heads": 2, "tie_embeddings": True},
                   params=qwen2_model_params(r, 1, 8, 2, 2, 6, 6, bias=False, tie=True),
                   cotangents={"logits": r.uniform((2, 4, 6))},
                   flags=["gradient", "tied-embeddings", "padding"])
