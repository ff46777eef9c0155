"""gemma: the Gemma 2 / Gemma 3 decoder layer (sandwich (1 + w) RMSNorms, optional per-head
QK-norm, RoPE "half", GQA scaled by query_pre_attn_scalar^-1/2, logit soft-cap, sliding window,
GeGLU with the tanh GELU, no biases)."""

import numpy as np

from ..oracle.gemma import gemma_decoder_only as model_oracle
from ..oracle.gemma import gemma_layer as layer_oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tolerances
from .llama import shifted
from .transformer import ids

ATTRS = {"num_kv_heads": None, "eps": 1e-6, "rope_base": 10000.0, "window": None, "offset": 0,
         "query_pre_attn_scalar": None, "softcap": None, "qk_norm": False}
NORMS = ("input_norm", "post_attn_norm", "pre_ffn_norm", "post_ffn_norm")

COMPONENT = Component("gemma", {
    "gemma_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                      required=["num_heads"], attributes=dict(ATTRS), params=True, trace=True,
                      added={"rope_scaling": None}, oracle=layer_oracle),
    "gemma_decoder_only": Fn(module="models", inputs=["ids"], returns=["logits"],
                             required=["pad_id", "num_layers", "num_heads"],
                             attributes={k: v for k, v in {**ATTRS, "final_softcap": None}.items()
                                         if k != "offset"},
                             added={"rope_local_base": None, "rope_scaling": None,
                                    "sliding_window_pattern": 2},
                             params=True, trace=True, oracle=model_oracle),
}, tolerances=tolerances("stack"))


def layer_params(rng, d, h, h_kv, k, f, qk_norm=False, scale=0.5):
    """The four sandwich norms' w (around 0: Gemma stores w of y = x / rms * (1 + w)), attn
    (w_q (D, H*K), w_k, w_v (D, H_kv*K), w_o (H*K, D), q_norm, k_norm (K,) with qk_norm),
    ffn (w_gate, w_up (D, F), w_down (F, D))."""
    p = {f"{n}.gamma": rng.weights((d,), 0.5) for n in NORMS}
    p.update({"attn.w_q": rng.weights((d, h * k), scale),
              "attn.w_k": rng.weights((d, h_kv * k), scale),
              "attn.w_v": rng.weights((d, h_kv * k), scale),
              "attn.w_o": rng.weights((h * k, d), scale),
              "ffn.w_gate": rng.weights((d, f), scale),
              "ffn.w_up": rng.weights((d, f), scale),
              "ffn.w_down": rng.weights((f, d), scale)})
    if qk_norm:
        p.update({"attn.q_norm.gamma": rng.weights((k,), 0.5),
                  "attn.k_norm.gamma": rng.weights((k,), 0.5)})
    return p


def cases(rng):
    yield from layer_cases(Rng(f"{COMPONENT.id}/layer"))
    yield from error_cases(Rng(f"{COMPONENT.id}/errors"))
    yield from defaults_cases()
    yield from model_cases(Rng(f"{COMPONENT.id}/model"))
    yield from local_base_cases(Rng(f"{COMPONENT.id}/local-base"))
    yield from scaling_cases(Rng(f"{COMPONENT.id}/scaling"))
    yield from pattern_cases(Rng(f"{COMPONENT.id}/pattern"))


def layer_cases(r):
    def gqa(h, h_kv, k=4, d=16, f=24, qk_norm=False, **attrs):
        a = {"num_heads": h, "num_kv_heads": h_kv, **attrs}
        if qk_norm:
            a["qk_norm"] = True
        return a, layer_params(r, d, h, h_kv, k, f, qk_norm)

    a, p = gqa(4, 2, query_pre_attn_scalar=16.0, softcap=2.0)
    yield value("gemma/layer-gemma2-001", "gemma_layer",
                "Gemma 2's layer: H = 4 on H_kv = 2, K = 4, D = 16, F = 24, B = 2, T = 5, causal; "
                "query_pre_attn_scalar = 16 (scale 1/4, not K^-1/2 = 1/2), softcap = 2 on the "
                "scaled scores; the four sandwich norms with (1 + w), w in [-0.5, 0.5].",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["basic", "gqa", "sandwich-norm", "unit-offset", "query-pre-attn-scalar",
                       "softcap", "causal"])
    a, p = gqa(4, 2, qk_norm=True, rope_base=1000000.0, query_pre_attn_scalar=4.0)
    yield value("gemma/layer-gemma3-001", "gemma_layer",
                "Gemma 3's layer: qk_norm (a (1 + w) RMSNorm over each head's K = 4 features of "
                "q and k, before RoPE), rope_base = 1e6 (a global layer), "
                "query_pre_attn_scalar = K = 4, no softcap, T = 6.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p,
                flags=["basic", "qk-norm", "sandwich-norm", "unit-offset", "base"])
    a, p = gqa(4, 2, window=2, softcap=2.0, query_pre_attn_scalar=16.0)
    yield value("gemma/layer-window-001", "gemma_layer",
                "A local (sliding) layer: window = 2 < T = 7, so query i sees keys i-1 and i; "
                "window 1 or 3 fail; softcap = 2.",
                inputs={"x": shifted(r, (1, 7, 16))}, attributes=a, params=p,
                flags=["sliding-window", "off-by-one", "softcap"])
    a, p = gqa(4, 1, k=8, qk_norm=True, offset=5, query_pre_attn_scalar=32.0)
    yield value("gemma/layer-mqa-001", "gemma_layer",
                "MQA (H = 4, H_kv = 1), K = 8, qk_norm, offset = 5 (positions 5..8), "
                "query_pre_attn_scalar = 32: QK-norm over the model width (16) instead of each "
                "head's 8 features, or after RoPE, fails.",
                inputs={"x": shifted(r, (2, 4, 16))}, attributes=a, params=p,
                flags=["mqa", "qk-norm", "offset", "query-pre-attn-scalar"])
    a, p = gqa(4, 2, softcap=1.5, query_pre_attn_scalar=16.0)
    mask = np.ones((2, 1, 1, 6), dtype=bool)
    mask[1, 0, 0, 4:] = False
    mask[0, 0, 0, 2] = False
    yield value("gemma/layer-padding-001", "gemma_layer",
                "A padding mask (2, 1, 1, 6) ANDed with the causal mask, softcap = 1.5: the cap "
                "applies before the mask (a capped -inf would be -1.5, not masked).",
                inputs={"x": shifted(r, (2, 6, 16)), "mask": mask}, attributes=a, params=p,
                flags=["padding", "mask", "softcap", "interior-padding"])
    a, p = gqa(2, 2, k=8, qk_norm=True, eps=0.5)
    yield value("gemma/layer-eps-001", "gemma_layer",
                "eps = 0.5 in all six norms (the four sandwich norms and QK-norm), inputs in "
                "[-1, 1]: eps outside the root, or 1e-6 kept in one of the norms, fails.",
                inputs={"x": r.uniform((2, 4, 16), -1.0, 1.0)}, attributes=a, params=p,
                flags=["eps", "eps-inside-sqrt", "qk-norm"])


def error_cases(r):
    p = layer_params(r, 16, 4, 2, 4, 24, qk_norm=True)
    x = shifted(r, (1, 3, 16))
    a = {"num_heads": 4, "num_kv_heads": 2}
    yield error("gemma/layer-qk-norm-missing-001", "gemma_layer",
                "qk_norm = True without attn.q_norm.gamma.",
                inputs={"x": x}, attributes={**a, "qk_norm": True},
                params={k: v for k, v in p.items() if k != "attn.q_norm.gamma"},
                error="ParameterError", mentions=["attn.q_norm.gamma"])
    yield error("gemma/layer-qk-norm-width-001", "gemma_layer",
                "attn.k_norm.gamma of the model width (16,) where QK-norm is per head (K = 4).",
                inputs={"x": x}, attributes={**a, "qk_norm": True},
                params={**p, "attn.k_norm.gamma": r.weights((16,), 0.5)},
                error="ParameterError", mentions=["attn.k_norm.gamma", "(16,)"])
    yield error("gemma/layer-scalar-zero-001", "gemma_layer",
                "query_pre_attn_scalar = 0 (the scale would be 0^-1/2).",
                inputs={"x": x}, attributes={**a, "query_pre_attn_scalar": 0.0}, params=p,
                error="ConfigError", mentions=["query_pre_attn_scalar", "0"])
    yield error("gemma/layer-softcap-negative-001", "gemma_layer",
                "softcap = -1 (a cap must be > 0).",
                inputs={"x": x}, attributes={**a, "softcap": -1.0}, params=p,
                error="ConfigError", mentions=["softcap", "-1"])
    yield error("gemma/layer-qk-norm-type-001", "gemma_layer",
                "qk_norm = 'yes', not a bool.",
                inputs={"x": x}, attributes={**a, "qk_norm": "yes"}, params=p,
                error="ConfigError", mentions=["qk_norm", "yes"])
    yield error("gemma/layer-post-norm-missing-001", "gemma_layer",
                "post_ffn_norm.gamma is missing (a sandwich norm left out).",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "post_ffn_norm.gamma"},
                error="ParameterError", mentions=["post_ffn_norm.gamma"])


def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("gemma/layer-defaults-001", "gemma_layer",
                "num_kv_heads, eps, rope_base, window, offset, query_pre_attn_scalar, softcap "
                "and qk_norm left out (H, 1e-6, 10000, None, 0, None = K, None, False): H = 2, "
                "K = 8, T = 6; no q_norm/k_norm parameters (a default qk_norm = True fails); "
                "scores up to ~4, so a default cap such as Gemma 2's 50 changes little but "
                "one of 1 fails, and a default scalar other than K fails.",
                inputs={"x": shifted(rd, (2, 6, 16))}, attributes={"num_heads": 2},
                params=layer_params(rd, 16, 2, 2, 8, 24, scale=0.75),
                flags=["defaults", "query-pre-attn-scalar"], omit_defaults=True)
    p = layer_params(rd, 16, 2, 2, 8, 24)
    p["attn.w_q"], p["attn.w_k"] = rd.uniform((16, 16), -2, 2), rd.uniform((16, 16), -2, 2)
    yield value("gemma/layer-defaults-002", "gemma_layer",
                "Every defaulted attribute left out, with w_q, w_k in [-2, 2] so the scaled "
                "scores reach tens: a default softcap (Gemma 2's 50) moves them by ~10% and "
                "fails; no cap is the default.",
                inputs={"x": shifted(rd, (1, 6, 16))}, attributes={"num_heads": 2}, params=p,
                flags=["defaults", "softcap"], omit_defaults=True)
    yield value("gemma/layer-defaults-003", "gemma_layer",
                "Every defaulted attribute left out on a tiny x (multiples of 2**-12 in "
                "[-2**-7, 2**-7], mean square ~2e-5): the input norm's eps 1e-5 in place of "
                "1e-6 scales q and k by ~0.8 and fails.",
                inputs={"x": rd.uniform((2, 5, 16), -2**-7, 2**-7, 2**-12)},
                attributes={"num_heads": 2}, params=layer_params(rd, 16, 2, 2, 8, 24),
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    def layer(h, h_kv, k, d=8, f=6, qk_norm=False, **attrs):
        a = {"num_heads": h, "num_kv_heads": h_kv, **attrs}
        if qk_norm:
            a["qk_norm"] = True
        return a, layer_params(r, d, h, h_kv, k, f, qk_norm)

    a, p = layer(4, 2, 2, query_pre_attn_scalar=8.0, softcap=1.5)
    yield gradient("gemma/grad-001", "gemma_layer",
                   "Gemma 2: H = 4 on H_kv = 2, K = 2, D = 8, F = 6, B = 2, T = 4, "
                   "query_pre_attn_scalar = 8, softcap = 1.5: dx and every parameter through "
                   "the four (1 + w) norms (dw = sum dy x / r), GeGLU-tanh, the cap's "
                   "1 - tanh^2 and RoPE.",
                   inputs={"x": shifted(r, (2, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "gqa", "sandwich-norm", "unit-offset", "softcap"])
    a, p = layer(2, 1, 4, qk_norm=True, window=2)
    yield gradient("gemma/grad-002", "gemma_layer",
                   "Gemma 3: qk_norm (the per-head norms' dq_norm, dk_norm), MQA (H = 2, "
                   "H_kv = 1), K = 4, window = 2 < T = 4.",
                   inputs={"x": shifted(r, (1, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((1, 4, 8))},
                   flags=["gradient", "qk-norm", "sliding-window", "mqa"])
    a, p = layer(2, 2, 4, qk_norm=True, softcap=1.0, query_pre_attn_scalar=2.0, offset=3)
    mask = np.ones((2, 1, 1, 4), dtype=bool)
    mask[1, 0, 0, 3] = False
    yield gradient("gemma/grad-003", "gemma_layer",
                   "A padding mask, qk_norm, softcap = 1 (strongly capped), "
                   "query_pre_attn_scalar = 2, offset = 3.",
                   inputs={"x": shifted(r, (2, 4, 8)), "mask": mask}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "qk-norm", "softcap", "padding", "offset"])
    yield gradient("gemma/grad-004", "gemma_layer",
                   "Every defaulted attribute left out, H = 2, K = 4, T = 3.",
                   inputs={"x": shifted(r, (1, 3, 8))}, attributes={"num_heads": 2},
                   params=layer_params(r, 8, 2, 2, 4, 6),
                   cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
    yield from model_grad_cases(Rng(f"{COMPONENT.id}/model-grad"))
    yield from local_base_grad_cases(Rng(f"{COMPONENT.id}/grad-local-base"))
    yield from scaling_grad_cases(Rng(f"{COMPONENT.id}/grad-scaling"))
    yield from pattern_grad_cases(Rng(f"{COMPONENT.id}/grad-pattern"))


# -- the Gemma 2 model (gemma_decoder_only) -------------------------------------------------------

def model_params(rng, n, d, h, h_kv, k, f, vocab, qk_norm=False):
    """embed.table (tied head), layers.<i>.* as layer_params, norm.gamma (w of 1 + w)."""
    p = {"embed.table": rng.weights((vocab, d), 0.5)}
    for i in range(n):
        p.update({f"layers.{i}.{key}": v
                  for key, v in layer_params(rng, d, h, h_kv, k, f, qk_norm).items()})
    p["norm.gamma"] = rng.weights((d,), 0.5)
    return p


def model_cases(r):
    base = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield value("gemma/model-basic-001", "gemma_decoder_only",
                "Gemma 2's model, N = 2, H = 2 on H_kv = 1, K = 4, D = 8, F = 12, vocabulary "
                "12, B = 2, T = 6 (row 1 padded after 4): embeddings times sqrt(8), the final "
                "(1 + w) norm, the head tied to embed.table; a head of its own or no sqrt(D) "
                "fails.",
                inputs={"ids": ids(r, 12, [6, 4], 6, bos_id=1)},
                attributes={**base, "query_pre_attn_scalar": 4.0},
                params=model_params(r, 2, 8, 2, 1, 4, 12, 12),
                flags=["basic", "padding", "sandwich-norm", "unit-offset", "tied-embeddings",
                       "sqrt-d-scale"])
    yield value("gemma/model-alternating-001", "gemma_decoder_only",
                "window = 2 < T = 7 on layer 0 only (Gemma 2's local layers are the even ones), "
                "N = 2: the window on every layer, or on the odd ones, fails.",
                inputs={"ids": ids(r, 12, [7, 7], 7, bos_id=1)},
                attributes={**base, "window": 2, "softcap": 2.0},
                params=model_params(r, 2, 8, 2, 1, 4, 12, 12),
                flags=["sliding-window", "softcap"])
    p = model_params(r, 1, 8, 2, 1, 4, 12, 12)
    p["embed.table"] = r.uniform((12, 8), -2, 2)
    yield value("gemma/model-final-softcap-001", "gemma_decoder_only",
                "final_softcap = 3 (Gemma 2's final_logit_softcapping, 30 in its config) on "
                "logits of size ~10 (embed.table in [-2, 2]): c tanh(z / c) after the tied head.",
                inputs={"ids": ids(r, 12, [5, 5], 5, bos_id=1)},
                attributes={**base, "num_layers": 1, "final_softcap": 3.0}, params=p,
                flags=["softcap"])
    yield value("gemma/model-qk-norm-001", "gemma_decoder_only",
                "qk_norm in both layers (Gemma 3's layer in Gemma 2's alternation), window = 3, "
                "T = 6, query_pre_attn_scalar = 8.",
                inputs={"ids": ids(r, 12, [6, 5], 6, bos_id=1)},
                attributes={**base, "qk_norm": True, "window": 3, "query_pre_attn_scalar": 8.0},
                params=model_params(r, 2, 8, 2, 1, 4, 12, 12, qk_norm=True),
                flags=["qk-norm", "sliding-window"])
    yield value("gemma/model-three-layers-001", "gemma_decoder_only",
                "N = 3: layers 0 and 2 local (window 2), layer 1 global, T = 5, H = H_kv = 2.",
                inputs={"ids": ids(r, 12, [5, 3], 5, bos_id=1)},
                attributes={**base, "num_layers": 3, "num_kv_heads": 2, "window": 2},
                params=model_params(r, 3, 8, 2, 2, 4, 12, 12),
                flags=["sliding-window", "two-layers"])
    yield value("gemma/model-eps-001", "gemma_decoder_only",
                "eps = 0.25 in every norm, N = 1: eps outside the root, or 1e-6 kept in the "
                "final norm, fails.",
                inputs={"ids": ids(r, 12, [4, 4], 4, bos_id=1)},
                attributes={**base, "num_layers": 1, "eps": 0.25},
                params=model_params(r, 1, 8, 2, 1, 4, 12, 12),
                flags=["eps", "eps-inside-sqrt"])
    p = model_params(r, 2, 8, 2, 1, 4, 12, 12)
    x = ids(r, 12, [4, 4], 4, bos_id=1)
    yield error("gemma/model-layer-missing-001", "gemma_decoder_only",
                "num_layers = 3 with parameters for 2: layers.2.input_norm.gamma is missing.",
                inputs={"ids": x}, attributes={**base, "num_layers": 3}, params=p,
                error="ParameterError", mentions=["layers.2"])
    yield error("gemma/model-final-softcap-zero-001", "gemma_decoder_only",
                "final_softcap = 0 (a cap must be > 0).",
                inputs={"ids": x}, attributes={**base, "final_softcap": 0.0}, params=p,
                error="ConfigError", mentions=["final_softcap", "0"])
    yield error("gemma/model-ids-range-001", "gemma_decoder_only",
                "An id of 12 with a vocabulary of 12 (embed.table has 12 rows).",
                inputs={"ids": np.array([[1, 12, 3]])}, attributes=base, params=p,
                error="DomainError", mentions=["ids", "12"])
    yield error("gemma/model-num-layers-001", "gemma_decoder_only",
                "num_layers = 0.",
                inputs={"ids": x}, attributes={**base, "num_layers": 0}, params=p,
                error="ConfigError", mentions=["num_layers", "0"])
    rd = Rng(f"{COMPONENT.id}/model-defaults")
    yield value("gemma/model-defaults-001", "gemma_decoder_only",
                "num_kv_heads, eps, rope_base, window, query_pre_attn_scalar, softcap, "
                "final_softcap and qk_norm left out, N = 2, H = 2, K = 4, T = 6: a default "
                "window or cap, or qk_norm on (no q_norm parameters), fails.",
                inputs={"ids": ids(rd, 12, [6, 6], 6, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 2, "num_heads": 2},
                params=model_params(rd, 2, 8, 2, 2, 4, 12, 12),
                flags=["defaults"], omit_defaults=True)


def model_grad_cases(r):
    base = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield gradient("gemma/grad-model-001", "gemma_decoder_only",
                   "N = 2, window = 2 on layer 0, D = 8, K = 4, vocabulary 7, T = 4, row 1 "
                   "padded after 3: embed.table's gradient sums the tied head's and the "
                   "sqrt(D)-scaled embedding's.",
                   inputs={"ids": ids(r, 7, [4, 3], 4, bos_id=1)},
                   attributes={**base, "window": 2}, params=model_params(r, 2, 8, 2, 1, 4, 6, 7),
                   cotangents={"logits": r.uniform((2, 4, 7))},
                   flags=["gradient", "sliding-window", "padding"])
    yield gradient("gemma/grad-model-002", "gemma_decoder_only",
                   "final_softcap = 2 and softcap = 1.5, N = 1: through c tanh(z / c) twice.",
                   inputs={"ids": ids(r, 7, [4, 4], 4, bos_id=1)},
                   attributes={**base, "num_layers": 1, "final_softcap": 2.0, "softcap": 1.5},
                   params=model_params(r, 1, 8, 2, 1, 4, 6, 7),
                   cotangents={"logits": r.uniform((2, 4, 7))}, flags=["gradient", "softcap"])
    yield gradient("gemma/grad-model-003", "gemma_decoder_only",
                   "qk_norm, query_pre_attn_scalar = 2, N = 1, T = 3.",
                   inputs={"ids": ids(r, 7, [3], 3, bos_id=1)},
                   attributes={**base, "num_layers": 1, "qk_norm": True,
                               "query_pre_attn_scalar": 2.0},
                   params=model_params(r, 1, 8, 2, 1, 4, 6, 7, qk_norm=True),
                   cotangents={"logits": r.uniform((1, 3, 7))}, flags=["gradient", "qk-norm"])
    yield gradient("gemma/grad-model-004", "gemma_decoder_only",
                   "Every defaulted attribute left out, N = 1, H = 2, T = 3.",
                   inputs={"ids": ids(r, 7, [3], 3, bos_id=1)},
                   attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                   params=model_params(r, 1, 8, 2, 2, 4, 6, 7),
                   cotangents={"logits": r.uniform((1, 3, 7))},
                   flags=["gradient", "defaults"], omit_defaults=True)


# -- separate RoPE bases for the local and the global layers (issue 25 item 1): Gemma 3's
# rope_local_base_freq; their own streams (Rng("gemma/local-base"), Rng("gemma/grad-local-base"))

def local_base_cases(r):
    base = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield value("gemma/model-local-base-001", "gemma_decoder_only",
                "rope_local_base = 100 on the local layer 0 (window 2), rope_base = 10000 on the "
                "global layer 1 (Gemma 3: rope_local_base_freq 10000, rope_theta 1e6; bases "
                "far apart here so that the frequencies differ within T = 7), K = 8: one base "
                "for both layers, or the two swapped, fails.",
                inputs={"ids": ids(r, 12, [7, 6], 7, bos_id=1)},
                attributes={**base, "window": 2, "rope_local_base": 100.0},
                params=model_params(r, 2, 16, 2, 1, 8, 12, 12),
                flags=["base", "sliding-window", "padding"])
    yield value("gemma/model-local-base-002", "gemma_decoder_only",
                "N = 3, rope_local_base = 100 on layers 0 and 2 and rope_base = 1e6 on layer 1, "
                "no window: a local layer takes its base even without a window (its layer "
                "type, not its mask), qk_norm on, T = 6.",
                inputs={"ids": ids(r, 12, [6, 6], 6, bos_id=1)},
                attributes={**base, "num_layers": 3, "rope_base": 1000000.0,
                            "rope_local_base": 100.0, "qk_norm": True},
                params=model_params(r, 3, 16, 2, 1, 8, 12, 12, qk_norm=True),
                flags=["base", "qk-norm"])
    yield error("gemma/model-local-base-zero-001", "gemma_decoder_only",
                "rope_local_base = 0 (a base must be > 0).",
                inputs={"ids": ids(r, 12, [4, 4], 4, bos_id=1)},
                attributes={**base, "rope_local_base": 0.0},
                params=model_params(r, 2, 8, 2, 1, 4, 12, 12),
                error="ConfigError", mentions=["rope_local_base", "0"])


def local_base_grad_cases(r):
    yield gradient("gemma/grad-model-005", "gemma_decoder_only",
                   "rope_local_base = 100 (layer 0, window 2), rope_base = 10000 (layer 1), "
                   "N = 2, K = 8, D = 16, T = 5: each layer's RoPE transpose with its own base.",
                   inputs={"ids": ids(r, 7, [5, 4], 5, bos_id=1)},
                   attributes={"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
                               "window": 2, "rope_local_base": 100.0},
                   params=model_params(r, 2, 16, 2, 1, 8, 12, 7),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "base", "sliding-window"])


# -- RoPE scaling (issue 25 item 1): Gemma 3's rope_scaling (linear, factor 8, on its 4B/12B/27B
# configs) on the global layers only. gemma_layer applies the scaling it is given whatever its
# window; gemma_decoder_only gives it to the odd (global) layers only. Their own streams
# (Rng("gemma/scaling"), Rng("gemma/grad-scaling")).

LINEAR8 = {"rope_type": "linear", "factor": 8.0}  # Gemma 3 4B/12B/27B's rope_scaling
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 8}


def scaling_cases(r):
    def gqa(h=2, h_kv=1, k=8, d=16, f=24, qk_norm=False, **attrs):
        a = {"num_heads": h, "num_kv_heads": h_kv, **attrs}
        if qk_norm:
            a["qk_norm"] = True
        return a, layer_params(r, d, h, h_kv, k, f, qk_norm)

    a, p = gqa(qk_norm=True, rope_base=1000000.0, query_pre_attn_scalar=8.0, offset=20,
               rope_scaling=LINEAR8)
    yield value("gemma/layer-linear-001", "gemma_layer",
                "Gemma 3's global layer with its rope_scaling (linear, factor 8; the 4B/12B/27B "
                "configs), rope_base 1e6, qk_norm, positions 20..25, H = 2 on H_kv = 1, K = 8: "
                "theta_i / 8 in q and k (pair 0 turns by 1/8 rad a position, not 1); the "
                "scaling ignored, or the factor applied to the base (base 8e6: pair 0 "
                "unchanged), fails.",
                inputs={"x": shifted(r, (2, 6, 16))}, attributes=a, params=p,
                flags=["rope-scaling", "qk-norm", "offset", "base"])
    a, p = gqa(h=4, h_kv=2, k=4, window=3, softcap=2.0, query_pre_attn_scalar=16.0, offset=20,
               rope_scaling=YARN)
    yield value("gemma/layer-window-yarn-001", "gemma_layer",
                "rope_scaling yarn (factor 8, L0 16) on a layer with window = 3 (the rule for "
                "one layer: it applies the scaling it is given whatever its window; which "
                "layers are scaled is the model's choice), softcap = 2, positions 20..26, "
                "K = 4: the ramped frequencies and m = 1.208 on cos and sin; a layer that "
                "drops the scaling because it is windowed fails.",
                inputs={"x": shifted(r, (1, 7, 16))}, attributes=a, params=p,
                flags=["rope-scaling", "attention-factor", "sliding-window", "softcap",
                       "layer-type-rope"])
    a, p = gqa(softcap=2.0, query_pre_attn_scalar=16.0, offset=12, rope_base=100.0,
               rope_scaling=DYNAMIC)
    yield value("gemma/layer-dynamic-001", "gemma_layer",
                "Gemma 2's layer (no qk_norm, softcap 2) with rope_scaling dynamic (factor 4, "
                "max_position_embeddings 8), rope_base 100, positions 12..16: seq_len = "
                "offset + T = 17 > 8, base' = 100 (4 * 17 / 8 - 3)^(8/6); seq_len taken as "
                "T = 5 (<= 8: the base unchanged) fails.",
                inputs={"x": shifted(r, (2, 5, 16))}, attributes=a, params=p,
                flags=["rope-scaling", "offset", "softcap"])

    base = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield value("gemma/model-linear-001", "gemma_decoder_only",
                "Gemma 3's model: rope_base 1e6 and rope_scaling linear (factor 8) on the global "
                "layer 1, rope_local_base 10000 unscaled on the local layer 0 (window 3), "
                "qk_norm, query_pre_attn_scalar 8, N = 2, K = 8, T = 7: the scaling on both "
                "layers (pair 0 of layer 0 at 1/8 rad a position), or on none, fails.",
                inputs={"ids": ids(r, 12, [7, 6], 7, bos_id=1)},
                attributes={**base, "rope_base": 1000000.0, "rope_local_base": 10000.0,
                            "rope_scaling": LINEAR8, "window": 3, "qk_norm": True,
                            "query_pre_attn_scalar": 8.0},
                params=model_params(r, 2, 16, 2, 1, 8, 12, 12, qk_norm=True),
                flags=["rope-scaling", "layer-type-rope", "qk-norm", "sliding-window",
                       "padding"])
    p = model_params(r, 3, 16, 2, 1, 8, 12, 12)
    p["layers.2.attn.w_q"], p["layers.2.attn.w_k"] = r.uniform((16, 16), -2, 2), r.uniform((16, 8), -2, 2)
    yield value("gemma/model-yarn-001", "gemma_decoder_only",
                "N = 3, rope_scaling yarn (factor 4, L0 4) on layer 1 only (layers 0 and 2 "
                "local, rope_local_base 100, no window), T = 8 (positions past L0), K = 8, "
                "layer 2's w_q, w_k in [-2, 2] (sharp, position-dependent attention): m = "
                "1.139 on layer 1's q and k; the scaling on layer 2 too (every layer after the "
                "first global one), or on the even layers, fails.",
                inputs={"ids": ids(r, 12, [8, 8], 8, bos_id=1)},
                attributes={**base, "num_layers": 3, "rope_local_base": 100.0,
                            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 4}},
                params=p, flags=["rope-scaling", "attention-factor", "layer-type-rope"])
    yield value("gemma/model-dynamic-001", "gemma_decoder_only",
                "N = 2, rope_scaling dynamic (factor 4, max_position_embeddings 4) on the global "
                "layer 1 with rope_base 10000, rope_local_base 100 on layer 0 (no window), "
                "qk_norm (Gemma 3's layer, so Gemma3ForCausalLM can hold it), T = 7: seq_len "
                "7 > 4 on layer 1 only; the dynamic base on the local base, or seq_len = 1, "
                "fails.",
                inputs={"ids": ids(r, 12, [7, 5], 7, bos_id=1)},
                attributes={**base, "rope_local_base": 100.0, "qk_norm": True,
                            "rope_scaling": {**DYNAMIC, "max_position_embeddings": 4}},
                params=model_params(r, 2, 16, 2, 1, 8, 12, 12, qk_norm=True),
                flags=["rope-scaling", "layer-type-rope", "padding", "qk-norm"])
    rd = Rng(f"{COMPONENT.id}/scaling-defaults")
    yield value("gemma/model-scaling-defaults-001", "gemma_decoder_only",
                "Only pad_id, num_layers = 2, num_heads = 2 and rope_scaling (linear, factor 8) "
                "given: num_kv_heads, eps, rope_base, window, query_pre_attn_scalar, softcap, "
                "final_softcap, qk_norm and rope_local_base left out, K = 8, T = 7; layer 0 "
                "(local) unscaled at base 10000, layer 1 scaled.",
                inputs={"ids": ids(rd, 12, [7, 7], 7, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 2, "num_heads": 2,
                            "rope_scaling": LINEAR8},
                params=model_params(rd, 2, 16, 2, 2, 8, 12, 12),
                flags=["defaults", "rope-scaling", "layer-type-rope"], omit_defaults=True)

    a, p = gqa()
    x = shifted(r, (1, 3, 16))
    yield error("gemma/layer-rope-scaling-number-001", "gemma_layer",
                "rope_scaling = 8.0 (the factor alone, where a dict of rope_parameters is "
                "expected).",
                inputs={"x": x}, attributes={**a, "rope_scaling": 8.0}, params=p,
                error="ConfigError", mentions=["rope_scaling", "8.0"])
    yield error("gemma/layer-rope-scaling-theta-001", "gemma_layer",
                "rope_scaling with rope_theta in it (transformers' rope_parameters passed "
                "whole: the base is rope_base, not a key of the scaling).",
                inputs={"x": x},
                attributes={**a, "rope_scaling": {**LINEAR8, "rope_theta": 1000000.0}}, params=p,
                error="ConfigError", mentions=["rope_scaling", "rope_theta"])
    mp = model_params(r, 2, 16, 2, 1, 8, 12, 12)
    x = ids(r, 12, [4, 4], 4, bos_id=1)
    yield error("gemma/model-rope-scaling-factor-001", "gemma_decoder_only",
                "rope_scaling linear with factor 0 (a factor must be > 0), N = 2.",
                inputs={"ids": x}, attributes={**base, "rope_scaling": {**LINEAR8, "factor": 0.0}},
                params=mp, error="ConfigError", mentions=["factor", "0"])
    yield error("gemma/model-rope-scaling-type-001", "gemma_decoder_only",
                "rope_scaling = 'linear' with N = 1 (no global layer): the model checks it is a "
                "dict before any layer runs.",
                inputs={"ids": x}, attributes={**base, "num_layers": 1, "rope_scaling": "linear"},
                params=mp, error="ConfigError", mentions=["rope_scaling", "linear"])


def scaling_grad_cases(r):
    def layer(h=2, h_kv=1, k=4, d=8, f=6, qk_norm=False, scale=0.5, **attrs):
        a = {"num_heads": h, "num_kv_heads": h_kv, **attrs}
        if qk_norm:
            a["qk_norm"] = True
        return a, layer_params(r, d, h, h_kv, k, f, qk_norm, scale)

    a, p = layer(qk_norm=True, rope_base=1000000.0, offset=20, rope_scaling=LINEAR8)
    yield gradient("gemma/grad-scaling-001", "gemma_layer",
                   "rope_scaling linear (factor 8), rope_base 1e6, qk_norm, positions 20..23, "
                   "H = 2 on H_kv = 1, K = 4, D = 8: RoPE^T with the scaled angles.",
                   inputs={"x": shifted(r, (2, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((2, 4, 8))},
                   flags=["gradient", "rope-scaling", "qk-norm", "offset"])
    a, p = layer(window=3, offset=20, rope_scaling=YARN, scale=1.0)
    yield gradient("gemma/grad-scaling-002", "gemma_layer",
                   "rope_scaling yarn (factor 8, L0 16) with window 3, positions 20..23, "
                   "weights in [-1, 1] (an attention output of unit size, so the sandwich "
                   "norm's backward does not dwarf dW_q, dW_k): "
                   "m = 1.208 in RoPE^T of q and k (dW_q, dW_k carry it; dropping m from the "
                   "backward moves them by 17%).",
                   inputs={"x": shifted(r, (1, 4, 8))}, attributes=a, params=p,
                   cotangents={"y": r.uniform((1, 4, 8))},
                   flags=["gradient", "rope-scaling", "attention-factor", "sliding-window"])
    base = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1}
    yield gradient("gemma/grad-model-scaling-001", "gemma_decoder_only",
                   "Gemma 3's RoPE: rope_base 1e6 with linear factor 8 on layer 1, "
                   "rope_local_base 10000 unscaled on layer 0 (window 2), N = 2, K = 8, D = 16, "
                   "T = 5: each layer's RoPE transpose with its own angles.",
                   inputs={"ids": ids(r, 7, [5, 4], 5, bos_id=1)},
                   attributes={**base, "window": 2, "rope_base": 1000000.0,
                               "rope_local_base": 10000.0, "rope_scaling": LINEAR8},
                   params=model_params(r, 2, 16, 2, 1, 8, 12, 7),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "rope-scaling", "layer-type-rope", "sliding-window"])
    yield gradient("gemma/grad-model-scaling-002", "gemma_decoder_only",
                   "rope_scaling dynamic (factor 2, max_position_embeddings 4) on layer 1, "
                   "qk_norm, N = 2, K = 8, T = 6 > 4.",
                   inputs={"ids": ids(r, 7, [6, 6], 6, bos_id=1)},
                   attributes={**base, "qk_norm": True,
                               "rope_scaling": {"rope_type": "dynamic", "factor": 2.0,
                                                "max_position_embeddings": 4}},
                   params=model_params(r, 2, 16, 2, 1, 8, 12, 7, qk_norm=True),
                   cotangents={"logits": r.uniform((2, 6, 7))},
                   flags=["gradient", "rope-scaling", "layer-type-rope", "qk-norm"])


# -- Gemma 3's layer pattern (sliding_window_pattern): layer i global where (i + 1) % pattern
# == 0 (2, the default: Gemma 2's alternation; Gemma 3: 6); their own streams
# (Rng("gemma/pattern"), Rng("gemma/grad-pattern")).

def pattern_cases(r):
    base = {"pad_id": 0, "num_heads": 2, "num_kv_heads": 1}
    gemma3 = {"rope_base": 1000000.0, "rope_local_base": 10000.0, "rope_scaling": LINEAR8,
              "qk_norm": True, "query_pre_attn_scalar": 8.0}
    yield value("gemma/model-pattern-001", "gemma_decoder_only",
                "Gemma 3 in miniature: sliding_window_pattern = 3, N = 3: layers 0 and 1 local "
                "(window 2, rope_local_base 10000, unscaled), layer 2 global (rope_base 1e6, "
                "linear factor 8), qk_norm, K = 8, T = 7: Gemma 2's alternation (layer 1 "
                "global), or the first layer of each group global ((i % 3) == 0), fails.",
                inputs={"ids": ids(r, 12, [7, 6], 7, bos_id=1)},
                attributes={**base, "num_layers": 3, "sliding_window_pattern": 3, "window": 2,
                            **gemma3},
                params=model_params(r, 3, 16, 2, 1, 8, 12, 12, qk_norm=True),
                flags=["layer-type-rope", "rope-scaling", "sliding-window", "qk-norm"])
    yield value("gemma/model-pattern-002", "gemma_decoder_only",
                "sliding_window_pattern = 1: every layer global (no window, rope_base 1e6 and "
                "the linear factor 8 on both), N = 2, window 2 given and unused, T = 6.",
                inputs={"ids": ids(r, 12, [6, 6], 6, bos_id=1)},
                attributes={**base, "num_layers": 2, "sliding_window_pattern": 1, "window": 2,
                            **gemma3},
                params=model_params(r, 2, 16, 2, 1, 8, 12, 12, qk_norm=True),
                flags=["layer-type-rope", "rope-scaling", "qk-norm"])
    yield value("gemma/model-pattern-003", "gemma_decoder_only",
                "sliding_window_pattern = 6 (Gemma 3's) with N = 2: no global layer, both "
                "local (window 2, rope_local_base 100), rope_scaling unused, K = 8, T = 7.",
                inputs={"ids": ids(r, 12, [7, 7], 7, bos_id=1)},
                attributes={**base, "num_layers": 2, "sliding_window_pattern": 6, "window": 2,
                            "rope_local_base": 100.0, "rope_scaling": LINEAR8},
                params=model_params(r, 2, 16, 2, 1, 8, 12, 12),
                flags=["layer-type-rope", "sliding-window"])
    yield error("gemma/model-pattern-zero-001", "gemma_decoder_only",
                "sliding_window_pattern = 0 (an integer >= 1: one global layer every that many).",
                inputs={"ids": ids(r, 12, [4, 4], 4, bos_id=1)},
                attributes={**base, "num_layers": 2, "sliding_window_pattern": 0},
                params=model_params(r, 2, 8, 2, 1, 4, 12, 12),
                error="ConfigError", mentions=["sliding_window_pattern", "0"])


def pattern_grad_cases(r):
    yield gradient("gemma/grad-model-pattern-001", "gemma_decoder_only",
                   "sliding_window_pattern = 3, N = 3: layers 0, 1 local (window 2, base 10000), "
                   "layer 2 global (base 1e6, linear factor 8), K = 8, D = 16, T = 5.",
                   inputs={"ids": ids(r, 7, [5, 4], 5, bos_id=1)},
                   attributes={"pad_id": 0, "num_layers": 3, "num_heads": 2, "num_kv_heads": 1,
                               "sliding_window_pattern": 3, "window": 2,
                               "rope_base": 1000000.0, "rope_local_base": 10000.0,
                               "rope_scaling": LINEAR8},
                   params=model_params(r, 3, 16, 2, 1, 8, 12, 7),
                   cotangents={"logits": r.uniform((2, 5, 7))},
                   flags=["gradient", "layer-type-rope", "rope-scaling", "sliding-window"])
