"""t5: T5's encoder and decoder stacks (pre-RMSNorm, unscaled attention with the bucketed
relative position bias computed once from layer 0's table and shared by every layer, none
in cross-attention, causal buckets in decoder self-attention, ReLU or gated-GELU FF)."""

import numpy as np

from ..oracle.t5 import t5_decoder as dec_oracle
from ..oracle.t5 import t5_encoder as enc_oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tolerances

ATTRS = {"num_buckets": 32, "max_distance": 128, "eps": 1e-6, "feed_forward": "relu"}
REQUIRED = ["num_layers", "num_heads"]

COMPONENT = Component("t5", {
    "t5_encoder": Fn(module="models", inputs=["x", "mask"], optional=["mask"], returns=["y"],
                     required=REQUIRED, attributes=dict(ATTRS), params=True, oracle=enc_oracle),
    "t5_decoder": Fn(module="models", inputs=["x", "memory", "self_mask", "memory_mask"],
                     optional=["self_mask", "memory_mask"], returns=["y"], required=REQUIRED,
                     attributes=dict(ATTRS), params=True, oracle=dec_oracle),
}, tolerances=tolerances("stack"))


def _attn(r, d, h, k, scale):
    return {"w_q": r.weights((d, h * k), scale), "w_k": r.weights((d, h * k), scale),
            "w_v": r.weights((d, h * k), scale), "w_o": r.weights((h * k, d), scale)}


def _ffn(r, d, f, feed_forward, scale):
    names = ["w_gate", "w_up"] if feed_forward == "gated-gelu" else ["w_up"]
    return {**{n: r.weights((d, f), scale) for n in names}, "w_down": r.weights((f, d), scale)}


def _gain(r, d):
    return 1 + r.weights((d,), 0.5)


def params(r, kind, *, layers=1, d=8, h=2, k=4, f=16, buckets=8, feed_forward="relu",
           scale=0.5):
    """layers.<i>.{attn_norm, attn} (encoder) or {self_norm, self_attn, cross_norm,
    cross_attn} (decoder), ffn_norm, ffn; layer 0's self-attention owns rel_bias.table
    (N, H); final_norm. Gains in [0.5, 1.5], table entries in [-2, 2]."""
    sub = ["attn"] if kind == "encoder" else ["self_attn", "cross_attn"]
    norms = {"attn": "attn_norm", "self_attn": "self_norm", "cross_attn": "cross_norm"}
    p = {}
    for i in range(layers):
        for name in sub:
            p[f"layers.{i}.{norms[name]}.gamma"] = _gain(r, d)
            p.update({f"layers.{i}.{name}.{n}": w for n, w in _attn(r, d, h, k, scale).items()})
        p[f"layers.{i}.ffn_norm.gamma"] = _gain(r, d)
        p.update({f"layers.{i}.ffn.{n}": w for n, w in _ffn(r, d, f, feed_forward, scale).items()})
    p[f"layers.0.{sub[0]}.rel_bias.table"] = r.weights((buckets, h), 2.0)
    p["final_norm.gamma"] = _gain(r, d)
    return p


def cases(rng):
    yield from encoder_cases(Rng(f"{COMPONENT.id}/encoder"))
    yield from decoder_cases(Rng(f"{COMPONENT.id}/decoder"))
    yield from error_cases(Rng(f"{COMPONENT.id}/errors"))


def encoder_cases(r):
    yield value("t5/enc-relu-001", "t5_encoder",
                "2 layers, H = 2, K = 4, D = 8, F = 16, N = 8, M = 8, B = 2, T = 6, ReLU: one "
                "bidirectional bias (layer 0's table) in both layers, scores not scaled "
                "(1/sqrt(4) fails), |r| = 3 in bucket 2 (rounding gives 3).",
                inputs={"x": r.uniform((2, 6, 8))},
                attributes={"num_layers": 2, "num_heads": 2, "num_buckets": 8, "max_distance": 8},
                params=params(r, "encoder", layers=2),
                flags=["basic", "two-layers", "unscaled", "relu", "pre-norm"])
    keep = np.ones((2, 1, 1, 5), dtype=bool)
    keep[1, ..., 3:] = False
    yield value("t5/enc-gated-001", "t5_encoder",
                "1 layer, gated-GELU (T5 v1.1: gelu_tanh(n W_gate) * n W_up), a (2, 1, 1, 5) "
                "padding mask hiding the last two keys of the second sequence, N = 8, M = 8.",
                inputs={"x": r.uniform((2, 5, 8)), "mask": keep},
                attributes={"num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 8,
                            "feed_forward": "gated-gelu"},
                params=params(r, "encoder", feed_forward="gated-gelu"),
                flags=["gelu_tanh", "padding", "mask"])
    yield value("t5/enc-defaults-001", "t5_encoder",
                "num_buckets, max_distance, eps, feed_forward left out (32, 128, 1e-6, relu): "
                "a (32, 2) table, H = 2, T = 4; gated-GELU, or a table of another size, fail.",
                inputs={"x": r.uniform((1, 4, 8))}, attributes={"num_layers": 1, "num_heads": 2},
                params=params(r, "encoder", buckets=32), flags=["defaults"], omit_defaults=True)


def decoder_cases(r):
    yield value("t5/dec-relu-001", "t5_decoder",
                "2 layers, H = 2, D = 8, T = S = 6 (a bias of cross-attention's shape exists, "
                "so adding it there is not a crash), N = 8, M = 16: causal buckets (E = 4) "
                "from layer 0's self-attention table in both layers; no bias in cross-attention.",
                inputs={"x": r.uniform((2, 6, 8)), "memory": r.uniform((2, 6, 8))},
                attributes={"num_layers": 2, "num_heads": 2, "num_buckets": 8, "max_distance": 16},
                params=params(r, "decoder", layers=2),
                flags=["basic", "two-layers", "causal", "cross-attention", "unscaled"])
    keep = np.ones((2, 1, 1, 5), dtype=bool)
    keep[0, ..., 4] = False
    yield value("t5/dec-gated-001", "t5_decoder",
                "1 layer, gated-GELU, T = 8 > S = 5, a (2, 1, 1, 5) memory mask, N = 8, M = 16: "
                "n = 7 in bucket 5 (log(7/4)/log(4)*4 = 1.61, rounding gives 6), n = 2 in bucket "
                "2 (encoder buckets give another row).",
                inputs={"x": r.uniform((2, 8, 8)), "memory": r.uniform((2, 5, 8)),
                        "memory_mask": keep},
                attributes={"num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 16,
                            "feed_forward": "gated-gelu"},
                params=params(r, "decoder", feed_forward="gated-gelu"),
                flags=["gelu_tanh", "t-ne-s", "mask", "causal"])
    self_keep = np.ones((1, 1, 1, 4), dtype=bool)
    self_keep[..., 0] = False
    yield value("t5/dec-self-mask-001", "t5_decoder",
                "A (1, 1, 1, 4) self_mask hiding key 0, ANDed with the causal mask: query 0 "
                "has no key left (zero weights, zero attention output), T = 4, S = 3.",
                inputs={"x": r.uniform((1, 4, 8)), "memory": r.uniform((1, 3, 8)),
                        "self_mask": self_keep},
                attributes={"num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 16},
                params=params(r, "decoder"), flags=["mask", "fully-masked", "causal"])
    yield value("t5/dec-defaults-001", "t5_decoder",
                "Attributes left out (32 causal buckets, M = 128, eps 1e-6, relu), T = 4, S = 3.",
                inputs={"x": r.uniform((1, 4, 8)), "memory": r.uniform((1, 3, 8))},
                attributes={"num_layers": 1, "num_heads": 2},
                params=params(r, "decoder", buckets=32), flags=["defaults"], omit_defaults=True)


def error_cases(r):
    a = {"num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 8}
    p = params(r, "encoder")
    yield error("t5/no-table-001", "t5_encoder", "Layer 0 without its rel_bias.table.",
                inputs={"x": r.uniform((1, 3, 8))}, attributes=a,
                params={k: v for k, v in p.items() if "rel_bias" not in k},
                error="ParameterError", mentions=["layers.0.attn.rel_bias.table"])
    yield error("t5/feed-forward-001", "t5_encoder", "feed_forward = 'gelu' (not relu or gated-gelu).",
                inputs={"x": r.uniform((1, 3, 8))}, attributes={**a, "feed_forward": "gelu"},
                params=p, error="ConfigError", mentions=["feed_forward"])
    yield error("t5/memory-width-001", "t5_decoder", "memory of width 6 for D = 8.",
                inputs={"x": r.uniform((1, 3, 8)), "memory": r.uniform((1, 3, 6))},
                attributes={**a, "max_distance": 16}, params=params(r, "decoder"),
                error="ShapeError", mentions=["memory"])
    yield error("t5/num-layers-001", "t5_decoder", "num_layers = 0.",
                inputs={"x": r.uniform((1, 3, 8)), "memory": r.uniform((1, 3, 8))},
                attributes={**a, "num_layers": 0, "max_distance": 16}, params=params(r, "decoder"),
                error="ConfigError", mentions=["num_layers"])


def grad_cases(r):
    enc = {"num_heads": 2, "num_buckets": 8, "max_distance": 8}
    yield gradient("t5/grad-001", "t5_encoder",
                   "2 layers, ReLU, T = 4, B = 1: the table's gradient sums both layers' dP "
                   "(one table, read twice).",
                   inputs={"x": r.uniform((1, 4, 8))}, attributes={**enc, "num_layers": 2},
                   params=params(r, "encoder", layers=2),
                   cotangents={"y": r.uniform((1, 4, 8))}, flags=["gradient", "two-layers"])
    yield gradient("t5/grad-002", "t5_encoder",
                   "Defaults left out (32 buckets, relu), 1 layer, T = 3.",
                   inputs={"x": r.uniform((1, 3, 8))}, attributes={"num_layers": 1, "num_heads": 2},
                   params=params(r, "encoder", buckets=32), cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
    yield gradient("t5/grad-003", "t5_decoder",
                   "2 layers, gated-GELU, T = 4, S = 3: memory's gradient sums both layers' "
                   "cross-attentions; the table gets only self-attention's dP.",
                   inputs={"x": r.uniform((1, 4, 8)), "memory": r.uniform((1, 3, 8))},
                   attributes={"num_layers": 2, "num_heads": 2, "num_buckets": 8, "max_distance": 16,
                               "feed_forward": "gated-gelu"},
                   params=params(r, "decoder", layers=2, feed_forward="gated-gelu"),
                   cotangents={"y": r.uniform((1, 4, 8))},
                   flags=["gradient", "two-layers", "cross-attention"])
    yield gradient("t5/grad-004", "t5_decoder",
                   "Defaults left out, 1 layer, T = 3, S = 2.",
                   inputs={"x": r.uniform((1, 3, 8)), "memory": r.uniform((1, 2, 8))},
                   attributes={"num_layers": 1, "num_heads": 2},
                   params=params(r, "decoder", buckets=32), cotangents={"y": r.uniform((1, 3, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
