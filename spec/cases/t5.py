"""t5: T5's encoder and decoder stacks (pre-RMSNorm, unscaled attention with the bucketed
relative position bias computed once from layer 0's table and shared by every layer, none
in cross-attention, causal buckets in decoder self-attention, ReLU or gated-GELU FF), and
t5_model, the encoder-decoder on token ids (shared embedding, T5 1.0's rescaled tied head or
v1.1's untied one)."""

import numpy as np

from ..oracle.t5 import t5_decoder as dec_oracle
from ..oracle.t5 import t5_encoder as enc_oracle
from ..oracle.t5 import t5_model as model_oracle
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
    "t5_model": Fn(module="models", inputs=["src_ids", "tgt_ids"], returns=["logits"],
                   required=["pad_id", *REQUIRED],
                   attributes={"pad_id": None, "num_layers": None, "num_heads": None, **ATTRS,
                               "tie_embeddings": True}, params=True, trace=True,
                   oracle=model_oracle),
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
    yield from model_cases(Rng(f"{COMPONENT.id}/model"))
    yield from model_error_cases(Rng(f"{COMPONENT.id}/model-errors"))


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
    yield from model_grad_cases(Rng(f"{COMPONENT.id}/model-grad"))


# -- t5_model: ids -> logits -----------------------------------------------------------------

def model_params(r, *, vocab=12, layers=1, d=8, buckets=8, feed_forward="relu", tied=True):
    """shared.table (L, D) in [-1, 1]; encoder.*, decoder.* as params(); lm_head.w (D, L)
    when untied."""
    p = {"shared.table": r.weights((vocab, d), 1.0)}
    for kind in ("encoder", "decoder"):
        p.update({f"{kind}.{k}": v for k, v in params(r, kind, layers=layers, d=d, buckets=buckets,
                                                       feed_forward=feed_forward).items()})
    if not tied:
        p["lm_head.w"] = r.weights((d, vocab), 1.0)
    return p


def model_ids(r, vocab, lengths, t, pad_id=0, start=None):
    """(B, T) ids in [2, vocab), row b padded with pad_id after lengths[b]; start: column 0."""
    out = r.integers(2, vocab, (len(lengths), t))
    for b, n in enumerate(lengths):
        out[b, n:] = pad_id
    if start is not None:
        out[:, 0] = start
    return out


def model_cases(r):
    a = {"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 16}
    yield value("t5/model-tied-001", "t5_model",
                "Tied head (T5 1.0): logits = (h D^-0.5) shared^T, D = 8 (no rescale, or "
                "sqrt(D), fails), ReLU, L = 12, B = 2, S = T = 5 (so a bias added to "
                "cross-attention is not a crash); source row 1 padded after 3; every target row "
                "starts with the pad id (T5's decoder start token), which is attended.",
                inputs={"src_ids": model_ids(r, 12, [5, 3], 5),
                        "tgt_ids": model_ids(r, 12, [5, 4], 5, start=0)},
                attributes=a, params=model_params(r),
                flags=["encoder-decoder", "basic", "tied-embeddings", "padding", "causal", "cross-attention"])
    yield value("t5/model-untied-001", "t5_model",
                "Untied head (T5 v1.1 / flan-t5): logits = h lm_head.w, no rescale; gated-GELU, "
                "S = 4, T = 6 > S, B = 2, target row 0 padded after 4 (causal keeps the pads "
                "out of earlier rows).",
                inputs={"src_ids": model_ids(r, 12, [4, 4], 4),
                        "tgt_ids": model_ids(r, 12, [4, 6], 6, start=0)},
                attributes={**a, "feed_forward": "gated-gelu", "tie_embeddings": False},
                params=model_params(r, feed_forward="gated-gelu", tied=False),
                flags=["encoder-decoder", "lm-head", "gelu_tanh", "t-ne-s"])
    yield value("t5/model-two-layers-001", "t5_model",
                "2 layers in each stack, tied, gated-GELU, B = 1, S = 6, T = 3 < S, vocabulary "
                "16: layer 0's tables give both layers' bias in each stack.",
                inputs={"src_ids": model_ids(r, 16, [6], 6),
                        "tgt_ids": model_ids(r, 16, [3], 3, start=0)},
                attributes={**a, "num_layers": 2, "feed_forward": "gated-gelu"},
                params=model_params(r, vocab=16, layers=2, feed_forward="gated-gelu"),
                flags=["encoder-decoder", "two-layers", "tied-embeddings", "gelu_tanh"])
    yield value("t5/model-defaults-001", "t5_model",
                "num_buckets, max_distance, eps, feed_forward, tie_embeddings left out (32, "
                "128, 1e-6, relu, tied: the head rescales), (32, 2) tables, S = 3, T = 4.",
                inputs={"src_ids": model_ids(r, 12, [3], 3), "tgt_ids": model_ids(r, 12, [4], 4,
                                                                                  start=0)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=model_params(r, buckets=32), flags=["encoder-decoder", "defaults", "tied-embeddings"],
                omit_defaults=True)
    src = model_ids(r, 12, [5, 2], 5, pad_id=1)
    src[0, 1] = 0
    yield value("t5/model-pad-id-001", "t5_model",
                "pad_id = 1: source ones are hidden from the encoder and cross-attention, the "
                "source 0 in row 0 is a token (a padding mask from id 0 fails); untied ReLU, "
                "S = 5, T = 4.",
                inputs={"src_ids": src, "tgt_ids": model_ids(r, 12, [4, 2], 4, pad_id=1, start=1)},
                attributes={**a, "pad_id": 1, "tie_embeddings": False},
                params=model_params(r, tied=False), flags=["encoder-decoder", "padding", "pad-id", "lm-head"])
    yield value("t5/model-long-001", "t5_model",
                "T = 9, S = 7, N = 8 buckets, M = 8, tied ReLU: decoder distances 0..8 fill "
                "every causal bucket (the last ones share bucket 7), encoder distances up to 6 "
                "in both directions; a repeated token id reads one table row.",
                inputs={"src_ids": np.array([[5, 5, 9, 3, 7, 5, 2]], dtype=np.int64),
                        "tgt_ids": model_ids(r, 12, [9], 9, start=0)},
                attributes={**a, "max_distance": 8}, params=model_params(r),
                flags=["encoder-decoder", "tied-embeddings", "far-position", "repeat"])


def model_error_cases(r):
    a = {"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 16}
    ids = {"src_ids": model_ids(r, 12, [3], 3), "tgt_ids": model_ids(r, 12, [3], 3, start=0)}
    yield error("t5/model-tied-head-001", "t5_model",
                "tie_embeddings=True with an lm_head.w: the tied head reads shared.table only.",
                inputs=ids, attributes=a, params=model_params(r, tied=False),
                error="ParameterError", mentions=["lm_head.w"])
    yield error("t5/model-untied-head-001", "t5_model",
                "tie_embeddings=False without lm_head.w.", inputs=ids,
                attributes={**a, "tie_embeddings": False}, params=model_params(r),
                error="ParameterError", mentions=["lm_head.w"])
    yield error("t5/model-head-bias-001", "t5_model",
                "tie_embeddings=False with an lm_head.b: T5's untied head has no bias (it "
                "must not be added silently).", inputs=ids,
                attributes={**a, "tie_embeddings": False},
                params={**model_params(r, tied=False), "lm_head.b": r.weights((12,), 1.0)},
                error="ParameterError", mentions=["lm_head.b"])
    yield error("t5/model-ids-001", "t5_model", "tgt_ids holds 12 for a 12-row shared.table.",
                inputs={**ids, "tgt_ids": np.array([[0, 12, 4]], dtype=np.int64)}, attributes=a,
                params=model_params(r), error="DomainError", mentions=["tgt_ids", "12"])
    yield error("t5/model-batch-001", "t5_model", "src_ids of batch 2, tgt_ids of batch 1.",
                inputs={**ids, "src_ids": model_ids(r, 12, [3, 3], 3)}, attributes=a,
                params=model_params(r), error="ShapeError", mentions=["src_ids", "tgt_ids"])


def model_grad_cases(r):
    a = {"pad_id": 0, "num_layers": 1, "num_heads": 2, "num_buckets": 8, "max_distance": 16}

    def cot(b, t, vocab=12):
        return {"logits": r.uniform((b, t, vocab))}
    yield gradient("t5/model-grad-001", "t5_model",
                   "Tied, ReLU, B = 2, S = 4 (row 1 padded after 2), T = 3: shared.table sums "
                   "the source and target scatter-adds and the head's dlogits^T (h D^-0.5).",
                   inputs={"src_ids": model_ids(r, 12, [4, 2], 4),
                           "tgt_ids": model_ids(r, 12, [3, 3], 3, start=0)},
                   attributes=a, params=model_params(r), cotangents=cot(2, 3),
                   flags=["gradient", "tied-embeddings", "padding"])
    yield gradient("t5/model-grad-002", "t5_model",
                   "Untied, gated-GELU, B = 1, S = 3, T = 4: lm_head.w gets h^T dlogits (no "
                   "rescale), shared.table only the two scatter-adds.",
                   inputs={"src_ids": model_ids(r, 12, [3], 3),
                           "tgt_ids": model_ids(r, 12, [4], 4, start=0)},
                   attributes={**a, "feed_forward": "gated-gelu", "tie_embeddings": False},
                   params=model_params(r, feed_forward="gated-gelu", tied=False),
                   cotangents=cot(1, 4), flags=["gradient", "lm-head", "gelu_tanh"])
    yield gradient("t5/model-grad-003", "t5_model",
                   "Defaults left out (32 buckets, relu, tied), S = 3, T = 3, a token id in "
                   "both source and target (its row sums three reads).",
                   inputs={"src_ids": np.array([[4, 7, 4]], dtype=np.int64),
                           "tgt_ids": np.array([[0, 4, 9]], dtype=np.int64)},
                   attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                   params=model_params(r, buckets=32), cotangents=cot(1, 3),
                   flags=["gradient", "defaults", "repeat"], omit_defaults=True)
    yield gradient("t5/model-grad-004", "t5_model",
                   "2 layers per stack, tied, ReLU, B = 1, S = 4, T = 3.",
                   inputs={"src_ids": model_ids(r, 12, [4], 4),
                           "tgt_ids": model_ids(r, 12, [3], 3, start=0)},
                   attributes={**a, "num_layers": 2}, params=model_params(r, layers=2),
                   cotangents=cot(1, 3), flags=["gradient", "two-layers", "tied-embeddings"])
