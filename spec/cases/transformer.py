"""transformer: the encoder-decoder model on token ids (embeddings, sinusoidal positions,
encoder, decoder, LM head), inference."""

import numpy as np

from ..oracle.transformer import transformer as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import dec_layer_params, enc_layer_params, scoped, stack_params, tolerances

COMPONENT = Component("transformer", {
    "transformer": Fn(required=["pad_id", "num_layers", "num_heads"], module="models",
                      inputs=["src_ids", "tgt_ids"], returns=["logits"], attributes={"pad_id": None,
                      "num_layers": None, "num_heads": None, "norm": "post", "eps": 1e-5,
                      "activation": "relu", "tie_embeddings": False}, params=True, trace=True,
                      oracle=oracle),
}, tolerances=tolerances("transformer"))


def transformer_params(rng, n, d, f, vocab, norm="post", tied=False, lm_scale=0.5,
                       eos_bias=None):
    """src/tgt tables scaled 1/sqrt(D) (the model multiplies by sqrt(D)), encoder.*,
    decoder.*, lm_head.* (absent when tied)."""
    pre = norm == "pre"
    p = {"src_embed.table": rng.weights((vocab, d), d ** -0.5),
         "tgt_embed.table": rng.weights((vocab, d), d ** -0.5),
         **scoped("encoder", stack_params(rng, enc_layer_params, n, d, f, pre)),
         **scoped("decoder", stack_params(rng, dec_layer_params, n, d, f, pre))}
    if not tied:
        p["lm_head.w"] = rng.weights((d, vocab), lm_scale)
        p["lm_head.b"] = rng.weights((vocab,), 0.25)
        if eos_bias is not None:
            p["lm_head.b"][eos_bias[0]] += eos_bias[1]
    return p


def ids(rng, vocab, lengths, t, pad_id=0, bos_id=None):
    """(B, T) ids in [3, vocab) (0..2 are pad/bos/eos), row b padded after lengths[b]."""
    out = rng.integers(3, vocab, (len(lengths), t))
    if bos_id is not None:
        out[:, 0] = bos_id
    for b, n in enumerate(lengths):
        out[b, n:] = pad_id
    return out


def cases(rng):
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 4, "norm": "post"}
    yield value("transformer/basic-001", "transformer",
                "N=1 post-norm, ReLU, D=16, H=4, vocabulary 20, B=2, S=5 (row 1 source padded "
                "after 3), T=4: the memory mask hides the padded source positions.",
                inputs={"src_ids": ids(rng, 20, [5, 3], 5),
                        "tgt_ids": ids(rng, 20, [4, 4], 4, bos_id=1)},
                attributes=attrs, params=transformer_params(rng, 1, 16, 32, 20),
                flags=["basic", "padding", "t-ne-s"])
    yield value("transformer/deep-001", "transformer",
                "N=2 post-norm, D=8, H=2, vocabulary 16, S=6, T=7 with padding on both sides.",
                inputs={"src_ids": ids(rng, 16, [6, 4], 6),
                        "tgt_ids": ids(rng, 16, [7, 5], 7, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2},
                params=transformer_params(rng, 2, 8, 16, 16),
                flags=["two-layers", "padding", "t-ne-s"])
    yield value("transformer/pre-001", "transformer",
                "N=2 pre-norm (encoder.final_norm, decoder.final_norm), GELU, D=16, H=4, S=3, "
                "T=5.",
                inputs={"src_ids": ids(rng, 20, [3, 2], 3),
                        "tgt_ids": ids(rng, 20, [5, 3], 5, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "norm": "pre", "activation": "gelu"},
                params=transformer_params(rng, 2, 16, 32, 20, norm="pre"),
                flags=["pre-norm", "final-norm", "padding"])
    yield value("transformer/tied-001", "transformer",
                "tie_embeddings: logits = h tgt_embed.table^T (no lm_head.* parameters), N=1, "
                "D=8, H=2, vocabulary 12, S=4, T=3.",
                inputs={"src_ids": ids(rng, 12, [4, 4], 4),
                        "tgt_ids": ids(rng, 12, [3, 2], 3, bos_id=1)},
                attributes={**attrs, "num_heads": 2, "tie_embeddings": True},
                params=transformer_params(rng, 1, 8, 16, 12, tied=True),
                flags=["tied-embeddings"])
    yield value("transformer/single-001", "transformer",
                "T=1 (only BOS, the first decoding step), S=7, N=1, D=12, H=3, vocabulary 24.",
                inputs={"src_ids": ids(rng, 24, [7, 5], 7),
                        "tgt_ids": np.array([[1], [1]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 3},
                params=transformer_params(rng, 1, 12, 24, 24), flags=["single-query", "decoding"])
    yield value("transformer/pad-id-001", "transformer",
                "pad_id = 3 (not 0): token 0 is an ordinary token and is attended to; N=1 "
                "pre-norm, D=8, H=2, vocabulary 10.",
                inputs={"src_ids": np.array([[0, 5, 3, 3], [4, 0, 6, 9]], dtype=np.int64),
                        "tgt_ids": np.array([[1, 0, 7, 3, 3], [1, 8, 0, 2, 5]], dtype=np.int64)},
                attributes={**attrs, "pad_id": 3, "num_heads": 2, "norm": "pre"},
                params=transformer_params(rng, 1, 8, 16, 10, norm="pre"),
                flags=["pad-id", "padding"])
    p = transformer_params(rng, 2, 8, 16, 12)
    src, tgt = ids(rng, 12, [4, 4], 4), ids(rng, 12, [3, 3], 3, bos_id=1)
    yield error("transformer/oov-001", "transformer",
                "src_ids holds 12 and 15 with a vocabulary of 12.",
                inputs={"src_ids": np.array([[3, 12, 4, 15]], dtype=np.int64),
                        "tgt_ids": tgt[:1]},
                attributes={**attrs, "num_layers": 2, "num_heads": 2}, params=p,
                error="DomainError", mentions=["src_ids", "12", "15"])
    yield error("transformer/negative-001", "transformer",
                "tgt_ids holds -1 (a negative id, not a padding convention).",
                inputs={"src_ids": src[:1], "tgt_ids": np.array([[1, -1, 4]], dtype=np.int64)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2}, params=p,
                error="DomainError", mentions=["tgt_ids", "-1"])
    bad = dict(p)
    bad["decoder.layers.1.cross_attn.w_k"] = rng.weights((8, 6), 0.5)
    yield error("transformer/bad-param-001", "transformer",
                "decoder.layers.1.cross_attn.w_k has shape (8, 6): the message names the full "
                "path.",
                inputs={"src_ids": src, "tgt_ids": tgt},
                attributes={**attrs, "num_layers": 2, "num_heads": 2}, params=bad,
                error="ParameterError", mentions=["decoder.layers.1.cross_attn.w_k", "(8, 6)"])
    missing = {k: v for k, v in p.items() if not k.startswith("decoder.layers.1.")}
    yield error("transformer/missing-layer-001", "transformer",
                "num_layers=2 but decoder.layers.1.* is absent.",
                inputs={"src_ids": src, "tgt_ids": tgt},
                attributes={**attrs, "num_layers": 2, "num_heads": 2}, params=missing,
                error="ParameterError", mentions=["decoder.layers.1."])
    yield error("transformer/heads-001", "transformer",
                "num_heads=3 does not divide D=8.",
                inputs={"src_ids": src, "tgt_ids": tgt},
                attributes={**attrs, "num_layers": 2, "num_heads": 3}, params=p,
                error="ConfigError", mentions=["num_heads"])
    yield error("transformer/batch-001", "transformer",
                "src_ids has 2 rows, tgt_ids 1.",
                inputs={"src_ids": src, "tgt_ids": tgt[:1]},
                attributes={**attrs, "num_layers": 2, "num_heads": 2}, params=p,
                error="ShapeError", mentions=["src_ids", "tgt_ids"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("transformer/defaults-001", "transformer",
                "norm, eps, activation and tie_embeddings left out (post, 1e-5, relu, False), "
                "N = 1, D = 8, H = 2, vocabulary 12: a pre-norm default lacks final_norm.*, a "
                "tied default ignores lm_head.*, GELU changes the logits. (The sinusoidal "
                "positions keep LayerNorm inputs O(1): eps shows at float64 only.)",
                inputs={"src_ids": ids(rd, 12, [5, 4], 5),
                        "tgt_ids": ids(rd, 12, [4, 4], 4, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=transformer_params(rd, 1, 8, 16, 12), flags=["defaults"],
                omit_defaults=True)


def grad_cases(r):
    for n, (norm, tied, layers) in enumerate([("post", False, 1), ("pre", False, 1),
                                              ("post", True, 1), ("pre", True, 2)], 1):
        tie = ("tied: tgt_embed.table gets dlogits^T h from the LM head plus the embedding's "
               "scatter-added rows" if tied else "untied")
        yield gradient(f"transformer/grad-00{n}", "transformer",
                       f"N = {layers}, norm='{norm}', {tie}; D = 4, H = 2, vocabulary 7, source "
                       f"T = 4 and target T = 3, padded: the encoder's gradient comes only "
                       f"through the decoder's cross-attention (dmemory).",
                       inputs={"src_ids": ids(r, 7, [4, 3], 4), "tgt_ids": ids(r, 7, [3, 2], 3,
                                                                              bos_id=1)},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "tie_embeddings": tied},
                       params=transformer_params(r, layers, 4, 6, 7, norm, tied),
                       cotangents={"logits": r.uniform((2, 3, 7))},
                       flags=["gradient", f"{norm}-norm", "padding"]
                       + (["tied-embeddings"] if tied else []))
