"""moe_layers: mixture-of-experts decoder layers: mixtral_layer (Mixtral, Qwen2-MoE: the Llama
attention then moe), deepseek_layer (DeepSeek-V3: mla then a dense SwiGLU or moe) and
deepseek_decoder_only (first_k_dense_replace dense layers, then MoE layers)."""

import numpy as np

from ..oracle import moe_layers as O
from ..oracle.core import add, sub
from ..oracle.mla import mla as mla_oracle
from ..oracle.rms_norm import rms_norm
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances
from .llama import layer_params as llama_params
from .llama import shifted
from .mla import dims, mla_params
from .moe import _robust, shared
from .transformer import ids as token_ids

MIXTRAL = {"num_kv_heads": None, "eps": 1e-6, "rope_base": 10000.0, "window": None, "offset": 0,
           "attention_bias": False, "renormalize": True}
ROUTER = {"scoring": "sigmoid", "renormalize": True, "n_group": 1, "topk_group": 1,
          "routed_scaling_factor": 1.0}
MLA = {"eps": 1e-6, "rope_base": 10000.0, "rope_convention": "interleaved", "yarn_factor": 1.0,
       "mscale_all_dim": 0.0}
DIMS = ["num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]

COMPONENT = Component("moe_layers", {
    "mixtral_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                        required=["num_heads", "top_k"], attributes=dict(MIXTRAL), params=True,
                        oracle=O.mixtral_layer),
    "deepseek_layer": Fn(module="layers", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                         required=DIMS, attributes={"top_k": None, **MLA, "offset": 0, **ROUTER},
                         added={"rope_scaling": None, "group_score": "sum_top2"}, params=True,
                         oracle=O.deepseek_layer),
    "deepseek_decoder_only": Fn(module="models", inputs=["ids"], returns=["logits"],
                                required=["pad_id", "num_layers", "first_k_dense_replace", *DIMS],
                                attributes={"top_k": None, **MLA, **ROUTER},
                                added={"rope_scaling": None, "group_score": "sum_top2"},
                                params=True,
                                oracle=O.deepseek_decoder_only),
}, tolerances=tolerances("stack"))

MARGIN = 0.25


def _float(a):
    return np.asarray(a, dtype=object).astype(np.float64)


def experts(r, d, e, f):
    return {"experts.w_gate": r.weights((e, d, f)), "experts.w_up": r.weights((e, d, f)),
            "experts.w_down": r.weights((e, f, d))}


def router_for(r, n2, e, attrs, bias=None, scale=2.0):
    """router.w (D, E) redrawn until every token of n2 (B, T, D) keeps its experts under
    +-MARGIN on its logits (so no dtype's rounding moves a token to another expert)."""
    flat = _float(n2).reshape(-1, n2.shape[-1])
    a = {"scoring": "softmax", "renormalize": False, "n_group": 1, "topk_group": 1, **attrs}
    for _ in range(500):
        w = r.weights((n2.shape[-1], e), scale)
        if _robust(flat, w, bias, a, MARGIN):
            return w
    raise RuntimeError("no robust router found")


def moe_params(r, n2, e, f, attrs, bias=None, shared_f=None, gate=True, scale=2.0):
    """moe.* for the normed input n2 of the layer's second sublayer (router robust on it)."""
    d = n2.shape[-1]
    p = {"router.w": router_for(r, n2, e, attrs, bias, scale), **experts(r, d, e, f)}
    if bias is not None:
        p["router.correction_bias"] = bias
    if shared_f is not None:
        p.update(shared(r, d, shared_f, gate))
    return {f"moe.{k}": v for k, v in p.items()}


# -- mixtral_layer ----------------------------------------------------------------------------

def mixtral_case(r, x, a, h, h_kv, k, e=4, f=4, mask=None, shared_f=None, bias=False):
    """(params) of a mixtral_layer on x with a router robust on its own RMSNorm(r1)."""
    d = x.shape[-1]
    p = llama_params(r, d, h, h_kv, k, 4)
    del p["ffn.w_gate"], p["ffn.w_up"], p["ffn.w_down"]
    if bias:
        for n, w in (("b_q", h * k), ("b_k", h_kv * k), ("b_v", h_kv * k)):
            p[f"attn.{n}"] = r.weights((w,), 0.5)
    full = {**MIXTRAL, **a}
    _, _, att = O._mixtral_attention(x, mask, h, full["num_kv_heads"], full["eps"],
                                     full["rope_base"], full["window"], full["offset"],
                                     full["attention_bias"], p)
    r1 = add(x, att)
    n2 = rms_norm(r1, eps=full["eps"], params=sub(p, "ffn_norm"))["y"]
    router = {"top_k": a["top_k"], "renormalize": full["renormalize"], "scoring": "softmax"}
    return {**p, **moe_params(r, n2, e, f, router, shared_f=shared_f)}


def mixtral_cases(r):
    a = {"num_heads": 4, "num_kv_heads": 2, "top_k": 2}
    x = shifted(r, (2, 4, 8))
    yield value("moe_layers/mixtral-001", "mixtral_layer",
                "Mixtral: RMSNorm, GQA (H = 4, H_kv = 2, K = 4, D = 8), RoPE 'half', causal; "
                "RMSNorm, then moe over the B T = 8 tokens: softmax over 4 experts, top 2, "
                "renormalised, SwiGLU experts (F = 4).",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 4, 2, 4),
                flags=["basic", "gqa", "causal", "no-mean-subtraction"])
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2, "attention_bias": True,
         "renormalize": False}
    x = shifted(r, (2, 4, 8))
    yield value("moe_layers/qwen2-moe-001", "mixtral_layer",
                "Qwen2-MoE: q/k/v biases (attention_bias), MQA (H = 2, H_kv = 1, K = 4), top 2 "
                "of 4 not renormalised (norm_topk_prob False), plus a shared expert (F = 6) "
                "times sigmoid(n W_shared_gate).",
                inputs={"x": x}, attributes=a,
                params=mixtral_case(r, x, a, 2, 1, 4, shared_f=6, bias=True),
                flags=["bias", "optional-params", "mqa", "unnormalised"])
    a = {"num_heads": 2, "num_kv_heads": 2, "top_k": 2, "window": 2}
    x = shifted(r, (1, 6, 8))
    yield value("moe_layers/window-001", "mixtral_layer",
                "Mixtral's sliding window = 2 < T = 6: query i sees keys i-1 and i; H = H_kv = 2.",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 2, 4),
                flags=["sliding-window", "off-by-one"])
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2}
    x = shifted(r, (2, 5, 8))
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[0, 0, 0, 1] = False
    mask[1, 0, 0, 3:] = False
    yield value("moe_layers/padding-001", "mixtral_layer",
                "A padding mask (2, 1, 1, 5) ANDed with the causal mask; every token, padded or "
                "not, still goes through the router and its experts.",
                inputs={"x": x, "mask": mask}, attributes=a,
                params=mixtral_case(r, x, a, 2, 1, 4, mask=mask),
                flags=["padding", "mask", "interior-padding"])
    a = {"num_heads": 2, "top_k": 1, "renormalize": False, "offset": 3}
    x = shifted(r, (2, 3, 8))
    yield value("moe_layers/top-1-001", "mixtral_layer",
                "top_k = 1 not renormalised (Switch): each token's expert times its softmax "
                "probability; offset = 3 (RoPE positions 3..5).",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 2, 4),
                flags=["top-1", "offset", "unnormalised"])
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 4, "rope_base": 500000.0}
    x = shifted(r, (2, 4, 8))
    yield value("moe_layers/top-all-001", "mixtral_layer",
                "top_k = E = 4 renormalised (the full softmax mixture), rope_base = 500000.",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 1, 4),
                flags=["top-all", "base"])
    a = {"num_heads": 4, "num_kv_heads": 2, "top_k": 2, "eps": 0.5}
    x = r.uniform((2, 3, 8), -1.0, 1.0)
    yield value("moe_layers/eps-001", "mixtral_layer",
                "eps = 0.5 in both RMSNorms (inside the root), x in [-1, 1].",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 4, 2, 4),
                flags=["eps", "eps-inside-sqrt"])
    a = {"num_heads": 4, "top_k": 2}
    x = shifted(r, (2, 4, 8))
    yield value("moe_layers/mixtral-defaults-001", "mixtral_layer",
                "Only num_heads and top_k: renormalised top 2 (Mixtral's default; not "
                "renormalising fails), H_kv = H = 4, no window, no biases, offset 0.",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 4, 4, 2),
                omit_defaults=True, flags=["defaults"])

    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2}
    x = shifted(r, (1, 3, 8))
    p = mixtral_case(r, x, a, 2, 1, 4)
    yield error("moe_layers/mixtral-top-k-001", "mixtral_layer", "top_k = 5 of 4 experts.",
                inputs={"x": x}, attributes={**a, "top_k": 5}, params=p, error="ConfigError",
                mentions=["top_k", "5"])
    yield error("moe_layers/mixtral-router-missing-001", "mixtral_layer",
                "moe.router.w is missing (a layer with a dense FFN is llama_layer).",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "moe.router.w"},
                error="ParameterError", mentions=["moe.router.w"])
    yield error("moe_layers/mixtral-expert-shape-001", "mixtral_layer",
                "moe.experts.w_up of shape (4, 8, 5) where moe.experts.w_gate gives F = 4.",
                inputs={"x": x}, attributes=a,
                params={**p, "moe.experts.w_up": r.weights((4, 8, 5))},
                error="ParameterError", mentions=["moe.experts.w_up", "(4, 8, 5)"])
    yield error("moe_layers/mixtral-kv-heads-001", "mixtral_layer",
                "num_kv_heads = 3 does not divide num_heads = 2.",
                inputs={"x": x}, attributes={**a, "num_kv_heads": 3}, params=p,
                error="ConfigError", mentions=["num_kv_heads", "3"])


# -- deepseek_layer ---------------------------------------------------------------------------

def deepseek_case(r, x, a, moe=True, e=4, f=4, mask=None, bias=None, shared_f=4, r_q=None,
                  r_kv=6):
    d = x.shape[-1]
    full = {**MLA, "offset": 0, **ROUTER, **a}
    h, dn, dr, dv = (a[k] for k in DIMS)
    p = {"attn_norm.gamma": 1 + r.weights((d,), 0.5), "ffn_norm.gamma": 1 + r.weights((d,), 0.5)}
    p.update({f"attn.{k}": v for k, v in mla_params(r, d, h, dn, dr, dv, r_kv, r_q).items()})
    if not moe:
        p.update({"ffn.w_gate": r.weights((d, 8), 0.5), "ffn.w_up": r.weights((d, 8), 0.5),
                  "ffn.w_down": r.weights((8, d), 0.5)})
        return p
    n2 = deepseek_router_input(x, mask, full, p)
    router = {k: full[k] for k in ROUTER if k != "routed_scaling_factor"}
    router["top_k"] = a["top_k"]
    return {**p, **moe_params(r, n2, e, f, router, bias=bias, shared_f=shared_f, gate=False)}


def deepseek_router_input(x, mask, full, p):
    n1 = rms_norm(x, eps=full["eps"], params=sub(p, "attn_norm"))["y"]
    mla_a = {k: full[k] for k in O.MLA if k in full}
    r1 = add(x, mla_oracle(n1, mask, params=sub(p, "attn"), **mla_a)["y"])
    return rms_norm(r1, eps=full["eps"], params=sub(p, "ffn_norm"))["y"]


def deepseek_cases(r):
    a = dims(2, 4, 4, 4)
    x = r.uniform((2, 4, 8))
    yield value("moe_layers/deepseek-dense-001", "deepseek_layer",
                "A dense DeepSeek-V3 layer (one of the first first_k_dense_replace): RMSNorm, "
                "mla (H = 2, Dn = 4, Dr = 4, Dv = 4, latent R = 6, D = 8), RMSNorm, SwiGLU "
                "(ffn.*, F = 8); no moe.* parameters.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a, moe=False),
                flags=["basic", "causal", "interleaved"])
    a = {**dims(2, 2, 4, 4), "top_k": 2, "n_group": 2, "topk_group": 1,
         "routed_scaling_factor": 2.5}
    x = r.uniform((2, 4, 8))
    bias = np.array([0.25, -0.25, 0.0, 0.5])
    yield value("moe_layers/deepseek-moe-001", "deepseek_layer",
                "A DeepSeek-V3 MoE layer: mla with a query latent (R_q = 6), then moe: sigmoid "
                "scores, a selection-only correction bias, 4 experts in 2 groups, the best "
                "group, top 2, renormalised, times 2.5, plus an ungated shared expert (F = 4).",
                inputs={"x": x}, attributes=a,
                params=deepseek_case(r, x, a, bias=bias, r_q=6),
                flags=["basic", "optional-params", "bias", "projection-order"])
    a = {**dims(2, 4, 4, 2), "top_k": 2, "scoring": "softmax", "renormalize": False}
    x = r.uniform((2, 4, 8))
    yield value("moe_layers/deepseek-v2-001", "deepseek_layer",
                "DeepSeek-V2 routing: softmax scores, top 2 of 4, not renormalised; Dv = 2.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                flags=["unnormalised", "k-ne-v"])
    a = {**dims(2, 2, 4, 4), "top_k": 2, "rope_convention": "half", "offset": 2,
         "rope_base": 100.0}
    x = r.uniform((2, 5, 8))
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[0, 0, 0, 2] = False
    mask[1, 0, 0, 4] = False
    yield value("moe_layers/deepseek-padding-001", "deepseek_layer",
                "A padding mask ANDed with mla's causal mask, rope_convention 'half', offset "
                "2, rope_base 100; sigmoid top 2 of 4 renormalised.",
                inputs={"x": x, "mask": mask}, attributes=a,
                params=deepseek_case(r, x, a, mask=mask),
                flags=["padding", "half", "offset", "base", "interior-padding"])
    a = {**dims(2, 4, 4, 4), "top_k": 1, "renormalize": False, "yarn_factor": 40.0,
         "mscale_all_dim": 1.0}
    x = r.uniform((1, 5, 8))
    yield value("moe_layers/deepseek-mscale-001", "deepseek_layer",
                "YaRN's mscale on mla's softmax scale (factor 40, mscale_all_dim 1); top 1 of "
                "4 by sigmoid score, not renormalised (the weight is the sigmoid itself).",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                flags=["scale", "top-1", "unnormalised"])
    a = {**dims(2, 2, 2, 4), "top_k": 3, "eps": 0.25}
    x = r.uniform((2, 3, 8))
    yield value("moe_layers/deepseek-eps-001", "deepseek_layer",
                "eps = 0.25 in every RMSNorm (the layer's two and mla's latent one); top 3 of "
                "4; no shared expert.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a, shared_f=None),
                flags=["eps", "eps-inside-sqrt"])
    a = {**dims(2, 4, 4, 4), "top_k": 2}
    x = r.uniform((2, 4, 8))
    yield value("moe_layers/deepseek-defaults-001", "deepseek_layer",
                "Only the mla widths and top_k: sigmoid scoring, renormalised (DeepSeek-V3's), "
                "one group, scale 1, interleaved RoPE base 10000, offset 0.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                omit_defaults=True, flags=["defaults"])

    a = {**dims(2, 4, 4, 4), "top_k": 2}
    x = r.uniform((1, 3, 8))
    p = deepseek_case(r, x, a)
    dense = {"ffn.w_gate": r.weights((8, 8)), "ffn.w_up": r.weights((8, 8)),
             "ffn.w_down": r.weights((8, 8))}
    yield error("moe_layers/deepseek-both-001", "deepseek_layer",
                "Both moe.* and ffn.* given: a layer is dense or MoE.",
                inputs={"x": x}, attributes=a, params={**p, **dense},
                error="ParameterError", mentions=["moe.router.w", "ffn.w_gate"])
    yield error("moe_layers/deepseek-top-k-none-001", "deepseek_layer",
                "moe.* given but top_k left None.",
                inputs={"x": x}, attributes=dims(2, 4, 4, 4), params=p,
                error="ConfigError", mentions=["top_k"])
    yield error("moe_layers/deepseek-neither-001", "deepseek_layer",
                "Neither moe.* nor ffn.*: the dense FFN's ffn.w_gate is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if not k.startswith("moe.")},
                error="ParameterError", mentions=["ffn.w_gate"])
    yield error("moe_layers/deepseek-bad-mla-001", "deepseek_layer",
                "attn.w_kv_b of shape (6, 10) where H = 2 heads of Dn + Dv = 8 need (6, 16).",
                inputs={"x": x}, attributes=a, params={**p, "attn.w_kv_b": r.weights((6, 10))},
                error="ParameterError", mentions=["attn.w_kv_b", "(6, 10)"])


# -- deepseek_decoder_only --------------------------------------------------------------------

def model_case(r, ids, a, n, dense, vocab=12, d=8, bias=False):
    """Parameters of a DeepSeek-V3-style model whose every MoE layer routes robustly."""
    full = {**MLA, **ROUTER, **a}
    p = {"embed.table": r.weights((vocab, d), 1.0)}
    h = O.embedding(ids, scale=False, params=sub(p, "embed"))["y"]
    pad = O._padding(ids, a["pad_id"])
    lk = {k: v for k, v in full.items()
          if k not in ("pad_id", "num_layers", "first_k_dense_replace")}
    for i in range(n):
        b = np.array([0.25, 0.0, -0.25, 0.5]) if bias and i >= dense else None
        q = deepseek_case(r, h, {k: v for k, v in a.items() if k in lk}, moe=i >= dense,
                          mask=pad, bias=b)
        p.update({f"layers.{i}.{k}": v for k, v in q.items()})
        h = O.deepseek_layer(h, pad, params=q, **{**lk, "offset": 0})["y"]
    p["norm.gamma"] = 1 + r.weights((d,), 0.5)
    p["lm_head.w"] = r.weights((d, vocab), 0.5)
    return p


def model_cases(r):
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 1, **dims(2, 2, 2, 4),
         "top_k": 2}
    x = token_ids(r, 12, [5, 5], 5, bos_id=1)
    yield value("moe_layers/model-001", "deepseek_decoder_only",
                "N = 2, first_k_dense_replace = 1: layer 0 dense (ffn.*), layer 1 MoE (sigmoid "
                "top 2 of 4, renormalised, a shared expert); embedding, final RMSNorm, head; "
                "vocabulary 12, D = 8, B = 2, T = 5.",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1),
                flags=["basic", "two-layers", "final-norm"])
    a = {**a, "num_layers": 3, "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5}
    x = token_ids(r, 12, [5, 3], 5, bos_id=1)
    yield value("moe_layers/model-deep-001", "deepseek_decoder_only",
                "N = 3, one dense layer then two MoE layers with a correction bias, 2 groups, "
                "the best one, scale 2.5; row 1 right-padded after 3.",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 3, 1, bias=True),
                flags=["padding", "bias"])
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 0, **dims(2, 2, 2, 4),
         "top_k": 1}
    x = token_ids(r, 12, [4, 4], 4, bos_id=1)
    yield value("moe_layers/model-all-moe-001", "deepseek_decoder_only",
                "first_k_dense_replace = 0: every layer MoE (top 1 renormalised: weight 1).",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 0),
                flags=["top-1", "edge"])
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 2, **dims(2, 2, 2, 4)}
    x = token_ids(r, 12, [4, 4], 4, bos_id=1)
    yield value("moe_layers/model-all-dense-001", "deepseek_decoder_only",
                "first_k_dense_replace = N = 2: every layer dense; top_k not needed (None).",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 2),
                flags=["edge"])
    a = {"pad_id": 4, "num_layers": 2, "first_k_dense_replace": 1, **dims(2, 2, 2, 4),
         "top_k": 2, "scoring": "softmax", "renormalize": False}
    x = np.array([[1, 0, 4, 7, 0], [1, 8, 8, 4, 4]], dtype=np.int64)
    yield value("moe_layers/model-pad-id-001", "deepseek_decoder_only",
                "pad_id = 4 inside the sequence (token 0 ordinary); softmax routing not "
                "renormalised (DeepSeek-V2).",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1),
                flags=["pad-id", "padding", "unnormalised"])
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 1, **dims(2, 2, 2, 4),
         "top_k": 2}
    x = np.array([[1], [7]], dtype=np.int64)
    yield value("moe_layers/model-single-001", "deepseek_decoder_only",
                "T = 1 (one token per row): RoPE the identity, every mask agrees.",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1),
                flags=["single-query"])
    x = token_ids(r, 12, [5, 5], 5, bos_id=1)
    yield value("moe_layers/model-defaults-001", "deepseek_decoder_only",
                "Only the required attributes and top_k: sigmoid, renormalised, one group, "
                "scale 1, eps 1e-6, interleaved RoPE base 10000.",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1),
                omit_defaults=True, flags=["defaults"])

    x = np.array([[1, 5, 3]], dtype=np.int64)
    p = model_case(r, x, a, 2, 1)
    yield error("moe_layers/model-first-k-001", "deepseek_decoder_only",
                "first_k_dense_replace = 3 > num_layers = 2.",
                inputs={"ids": x}, attributes={**a, "first_k_dense_replace": 3}, params=p,
                error="ConfigError", mentions=["first_k_dense_replace", "3"])
    moe0 = {k.replace("layers.1.", "layers.0."): v for k, v in p.items()
            if k.startswith("layers.1.moe.")}
    yield error("moe_layers/model-dense-moe-001", "deepseek_decoder_only",
                "layers.0.moe.* given while layer 0 < first_k_dense_replace = 1 is dense.",
                inputs={"ids": x}, attributes=a, params={**p, **moe0},
                error="ParameterError", mentions=["layers.0.moe.router.w"])
    yield error("moe_layers/model-moe-missing-001", "deepseek_decoder_only",
                "layers.1.moe.router.w missing for a layer >= first_k_dense_replace.",
                inputs={"ids": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "layers.1.moe.router.w"},
                error="ParameterError", mentions=["layers.1.moe.router.w"])
    yield error("moe_layers/model-oov-001", "deepseek_decoder_only",
                "ids holds 12 with a 12-row embed.table.",
                inputs={"ids": np.array([[1, 12, 4]], dtype=np.int64)}, attributes=a, params=p,
                error="DomainError", mentions=["ids", "12"])


def cases(rng):
    yield from mixtral_cases(Rng(f"{COMPONENT.id}/mixtral"))
    yield from deepseek_cases(Rng(f"{COMPONENT.id}/deepseek"))
    yield from model_cases(Rng(f"{COMPONENT.id}/model"))
    yield from defaults_cases(Rng(f"{COMPONENT.id}/defaults"))
    yield from yarn_cases(Rng(f"{COMPONENT.id}/yarn"))
    yield from v2_cases(Rng(f"{COMPONENT.id}/v2"))


def defaults_cases(r):
    a = {"num_heads": 2, "top_k": 2}
    x = tiny(r, (2, 6, 8))
    yield value("moe_layers/mixtral-defaults-002", "mixtral_layer",
                "Only num_heads and top_k on a tiny x (mean square ~2e-5, so eps 1e-5 for 1e-6 "
                "shows), K = 8 (so rope_base 500000 shows), T = 6 (so a window shows), "
                "renormalised top 2 of 4.",
                inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 2, 8),
                omit_defaults=True, flags=["defaults", "default-eps"])
    a = dims(2, 2, 8, 4)
    x = tiny(r, (2, 8, 8))
    yield value("moe_layers/deepseek-defaults-002", "deepseek_layer",
                "A dense layer with every defaulted attribute left out (top_k too: a dense layer "
                "needs none) on a tiny x: eps 1e-5 fails; Dr = 8 and T = 8, so 'half' RoPE or "
                "base 500000 fail.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a, moe=False),
                omit_defaults=True, flags=["defaults", "default-eps"])
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 2, **dims(2, 2, 8, 4)}
    x = token_ids(r, 12, [8, 8], 8, bos_id=1)
    yield value("moe_layers/model-defaults-002", "deepseek_decoder_only",
                "Every layer dense (first_k_dense_replace = num_layers = 2), every defaulted "
                "attribute left out (top_k too), Dr = 8, T = 8 (so base 500000 shows). (eps "
                "1e-5 for 1e-6 moves unit-scale embeddings' norms below the half dtypes' "
                "resolution.)",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 2),
                omit_defaults=True, flags=["defaults"])


# -- gradients ---------------------------------------------------------------------------------

def grad_cases(r):
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2}
    x = shifted(r, (1, 3, 8))
    yield gradient("moe_layers/grad-001", "mixtral_layer",
                   "Mixtral: top 2 of 4 renormalised, MQA; the gradient reaches the chosen "
                   "experts, the router, the attention and both norms.",
                   inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 1, 4),
                   cotangents={"y": r.uniform((1, 3, 8))}, flags=["gradient", "basic"])
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2, "attention_bias": True,
         "renormalize": False}
    x = shifted(r, (1, 3, 8))
    yield gradient("moe_layers/grad-002", "mixtral_layer",
                   "Qwen2-MoE: biases, not renormalised, a sigmoid-gated shared expert.",
                   inputs={"x": x}, attributes=a,
                   params=mixtral_case(r, x, a, 2, 1, 4, shared_f=4, bias=True),
                   cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "bias", "optional-params"])
    a = {"num_heads": 2, "top_k": 1, "window": 2}
    x = shifted(r, (1, 4, 8))
    yield gradient("moe_layers/grad-003", "mixtral_layer",
                   "window 2, top 1 renormalised (weight 1: the router gets no gradient "
                   "through the weights).",
                   inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 2, 4),
                   cotangents={"y": r.uniform((1, 4, 8))},
                   flags=["gradient", "sliding-window", "top-1"])
    a = {"num_heads": 2, "top_k": 2}
    x = shifted(r, (1, 3, 8))
    yield gradient("moe_layers/grad-004", "mixtral_layer",
                   "Defaults left out (renormalised, H_kv = H).",
                   inputs={"x": x}, attributes=a, params=mixtral_case(r, x, a, 2, 2, 4),
                   cotangents={"y": r.uniform((1, 3, 8))}, omit_defaults=True,
                   flags=["gradient", "defaults"])

    a = dims(2, 2, 2, 4)
    x = r.uniform((1, 3, 8))
    yield gradient("moe_layers/grad-005", "deepseek_layer",
                   "A dense DeepSeek-V3 layer: through the SwiGLU and mla.",
                   inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a, moe=False),
                   cotangents={"y": r.uniform((1, 3, 8))}, flags=["gradient", "basic"])
    a = {**dims(2, 2, 2, 4), "top_k": 2, "n_group": 2, "topk_group": 1,
         "routed_scaling_factor": 2.0}
    x = r.uniform((1, 3, 8))
    yield gradient("moe_layers/grad-006", "deepseek_layer",
                   "An MoE DeepSeek-V3 layer: sigmoid, correction bias, 2 groups, times 2, an "
                   "ungated shared expert, a query latent.",
                   inputs={"x": x}, attributes=a,
                   params=deepseek_case(r, x, a, bias=np.array([0.25, 0.0, -0.25, 0.0]), r_q=4),
                   cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "bias", "optional-params"])
    a = {**dims(2, 2, 2, 2), "top_k": 2, "scoring": "softmax", "renormalize": False,
         "rope_convention": "half"}
    x = r.uniform((1, 3, 8))
    yield gradient("moe_layers/grad-007", "deepseek_layer",
                   "Softmax routing not renormalised (DeepSeek-V2), 'half' RoPE, no shared "
                   "expert.",
                   inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a, shared_f=None),
                   cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "half", "unnormalised"])
    a = {**dims(2, 2, 2, 4), "top_k": 2}
    x = r.uniform((1, 3, 8))
    yield gradient("moe_layers/grad-008", "deepseek_layer",
                   "Defaults left out: sigmoid, renormalised.",
                   inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                   cotangents={"y": r.uniform((1, 3, 8))}, omit_defaults=True,
                   flags=["gradient", "defaults"])

    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 1, **dims(2, 2, 2, 2),
         "top_k": 2}
    x = np.array([[1, 5, 3]], dtype=np.int64)
    yield gradient("moe_layers/grad-009", "deepseek_decoder_only",
                   "N = 2, a dense layer then an MoE layer: every parameter's gradient.",
                   inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1, vocab=8),
                   cotangents={"logits": r.uniform((1, 3, 8))}, flags=["gradient", "basic"])
    x = np.array([[1, 5, 0]], dtype=np.int64)
    yield gradient("moe_layers/grad-010", "deepseek_decoder_only",
                   "The same with padding and a correction bias.",
                   inputs={"ids": x}, attributes=a,
                   params=model_case(r, x, a, 2, 1, vocab=8, bias=True),
                   cotangents={"logits": r.uniform((1, 3, 8))}, flags=["gradient", "padding"])
    b = {**a, "first_k_dense_replace": 0, "scoring": "softmax"}
    x = np.array([[1, 2, 6]], dtype=np.int64)
    yield gradient("moe_layers/grad-011", "deepseek_decoder_only",
                   "Every layer MoE, softmax routing renormalised.",
                   inputs={"ids": x}, attributes=b, params=model_case(r, x, b, 2, 0, vocab=8),
                   cotangents={"logits": r.uniform((1, 3, 8))}, flags=["gradient", "edge"])
    x = np.array([[1, 6, 2]], dtype=np.int64)
    yield gradient("moe_layers/grad-012", "deepseek_decoder_only",
                   "Defaults left out.",
                   inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1, vocab=8),
                   cotangents={"logits": r.uniform((1, 3, 8))}, omit_defaults=True,
                   flags=["gradient", "defaults"])
    yield from yarn_grad_cases(Rng(f"{COMPONENT.id}/grad-yarn"))


# -- rope_scaling (YaRN, DeepSeek-V2/V3's real configs) threaded to mla: their own streams -----

V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def yarn_cases(r):
    a = {**dims(2, 2, 8, 4), "top_k": 2, "rope_base": 10.0, "rope_scaling": dict(V3_YARN)}
    x = r.uniform((2, 5, 8))
    yield value("moe_layers/deepseek-yarn-001", "deepseek_layer",
                "DeepSeek-V3's YaRN rope_scaling (factor 40, mscale = mscale_all_dim = 1, "
                "L0 = 64) passed to mla: blended rope frequencies (rope_base 10, Dr = 8) and "
                "m^2 on the softmax scale; sigmoid top 2 of 4, renormalised.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                flags=["rope-scaling", "scale"])
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 1, **dims(2, 2, 8, 2),
         "top_k": 2, "rope_base": 10.0, "rope_scaling": {**V3_YARN, "mscale": 0.707,
                                                          "mscale_all_dim": 0.707}}
    x = token_ids(r, 12, [6, 4], 6, bos_id=1)
    yield value("moe_layers/model-yarn-001", "deepseek_decoder_only",
                "DeepSeek-V2's YaRN (mscale = mscale_all_dim = 0.707, factor 40) in every "
                "layer's mla; a dense layer then an MoE layer, row 1 right-padded after 4.",
                inputs={"ids": x}, attributes=a, params=model_case(r, x, a, 2, 1),
                flags=["rope-scaling", "padding"])


def yarn_grad_cases(r):
    a = {**dims(2, 2, 8, 2), "top_k": 2, "rope_base": 10.0, "rope_scaling": dict(V3_YARN)}
    x = r.uniform((1, 4, 8))
    yield gradient("moe_layers/grad-013", "deepseek_layer",
                   "DeepSeek-V3's YaRN in an MoE layer's mla: through the scaled frequencies "
                   "and m^2.",
                   inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                   cotangents={"y": r.uniform((1, 4, 8))}, flags=["gradient", "rope-scaling"])


# -- DeepSeek-V2's layer: group_score "max", softmax, no query latent (its own stream) ----------

def v2_cases(r):
    a = {**dims(2, 2, 8, 4), "top_k": 2, "scoring": "softmax", "renormalize": False,
         "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.0, "group_score": "max",
         "rope_base": 10.0,
         "rope_scaling": {**V3_YARN, "mscale": 0.707, "mscale_all_dim": 0.707}}
    x = r.uniform((2, 4, 8))
    yield value("moe_layers/deepseek-v2-002", "deepseek_layer",
                "A DeepSeek-V2 MoE layer: mla without a query latent and V2's YaRN (mscale = "
                "mscale_all_dim = 0.707), then softmax scores, 4 experts in 2 groups scored by "
                "their max (group_limited_greedy), the best group, top 2, not renormalised, "
                "times 2, an ungated shared expert.",
                inputs={"x": x}, attributes=a, params=deepseek_case(r, x, a),
                flags=["rope-scaling", "unnormalised"])
