"""decoder_only: a GPT-style language model on token ids (unscaled embedding + learned
positions, causal self-attention layers without cross-attention, LM head)."""

import numpy as np

from ..oracle.decoder_only import decoder_only as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import tiny, tolerances
from .encoder_only import lm_params
from .transformer import ids

COMPONENT = Component("decoder_only", {
    "decoder_only": Fn(required=["pad_id", "num_layers", "num_heads"], module="models",
                       inputs=["ids"], returns=["logits"], attributes={"pad_id": None, "num_layers":
                       None, "num_heads": None, "norm": "pre", "eps": 1e-5, "activation": "gelu"},
                       params=True, trace=True, oracle=oracle),
}, tolerances=tolerances("stack"))


def params(rng, n, d, f, vocab, max_len=8, norm="pre"):
    return lm_params(rng, n, d, f, vocab, max_len, norm, None)


def cases(rng):
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 4, "norm": "pre", "activation": "gelu"}
    yield value("decoder_only/basic-001", "decoder_only",
                "N=1 pre-norm + final_norm, GELU, D=16, H=4, vocabulary 20, B=2, T=6, no "
                "padding: position i sees tokens 0..i.",
                inputs={"ids": ids(rng, 20, [6, 6], 6, bos_id=1)}, attributes=attrs,
                params=params(rng, 1, 16, 32, 20), flags=["basic", "causal"])
    yield value("decoder_only/deep-001", "decoder_only",
                "N=2 pre-norm, D=8, H=2, vocabulary 16, T=7, row 1 right-padded after 4 "
                "(pad keys masked; pad query rows still attend to the real prefix).",
                inputs={"ids": ids(rng, 16, [7, 4], 7, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2},
                params=params(rng, 2, 8, 16, 16), flags=["two-layers", "padding", "causal"])
    yield value("decoder_only/post-001", "decoder_only",
                "Post-norm (no final_norm), ReLU, N=2, D=16, H=2, T=5.",
                inputs={"ids": ids(rng, 20, [5, 3], 5, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2, "norm": "post",
                            "activation": "relu"},
                params=params(rng, 2, 16, 32, 20, norm="post"), flags=["post-norm", "padding"])
    yield value("decoder_only/single-001", "decoder_only",
                "T=1 (only BOS): every mask variant agrees here, the value checks embedding, "
                "layer and head; D=12, H=3, vocabulary 24.",
                inputs={"ids": np.array([[1], [7]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 3},
                params=params(rng, 1, 12, 24, 24), flags=["single-query"])
    yield value("decoder_only/pad-id-001", "decoder_only",
                "pad_id = 4 inside the sequence (token 0 is ordinary): key 4 is masked even "
                "mid-sequence; D=8, H=2, T=6.",
                inputs={"ids": np.array([[1, 0, 4, 7, 0, 9], [1, 8, 8, 4, 4, 4]],
                                        dtype=np.int64)},
                attributes={**attrs, "pad_id": 4, "num_heads": 2},
                params=params(rng, 1, 8, 16, 10), flags=["pad-id", "padding"])
    yield value("decoder_only/heads-001", "decoder_only",
                "H=4 heads of K=2 (D=8), N=2, T=4, GELU (tanh).",
                inputs={"ids": ids(rng, 12, [4, 4], 4, bos_id=1)},
                attributes={**attrs, "num_layers": 2, "activation": "gelu_tanh"},
                params=params(rng, 2, 8, 16, 12), flags=["gelu_tanh", "causal"])
    p = params(rng, 1, 8, 16, 12)
    yield error("decoder_only/negative-001", "decoder_only",
                "ids holds -2.",
                inputs={"ids": np.array([[1, -2, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 2}, params=p,
                error="DomainError", mentions=["ids", "-2"])
    yield error("decoder_only/too-long-001", "decoder_only",
                "T=9 with an 8-row pos.table.",
                inputs={"ids": ids(rng, 12, [9], 9, bos_id=1)},
                attributes={**attrs, "num_heads": 2}, params=p,
                error="DomainError", mentions=["positions", "8"])
    bad = dict(p)
    bad["layers.0.self_attn.w_o"] = rng.weights((8, 4), 0.5)
    yield error("decoder_only/bad-param-001", "decoder_only",
                "layers.0.self_attn.w_o has shape (8, 4) where (8, 8) is expected.",
                inputs={"ids": ids(rng, 12, [3], 3, bos_id=1)},
                attributes={**attrs, "num_heads": 2}, params=bad,
                error="ParameterError", mentions=["layers.0.self_attn.w_o", "(8, 4)"])
    yield error("decoder_only/bad-heads-001", "decoder_only",
                "num_heads=3 does not divide D=8.",
                inputs={"ids": ids(rng, 12, [3], 3, bos_id=1)},
                attributes={**attrs, "num_heads": 3}, params=p,
                error="ConfigError", mentions=["num_heads"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    p = params(rd, 1, 8, 16, 12)
    p["embed.table"], p["pos.table"] = tiny(rd, (12, 8)), tiny(rd, (8, 8))
    yield value("decoder_only/defaults-001", "decoder_only",
                "norm, eps and activation left out (pre, 1e-5, gelu), N = 1, D = 8, H = 2: "
                "tiny embedding and position tables, so the pre-norm LN1 sees a variance "
                "~4e-5: post-norm, eps 1e-6 or 1e-3, or ReLU fail.",
                inputs={"ids": ids(rd, 12, [6, 6], 6, bos_id=1)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, (norm, layers) in enumerate([("pre", 1), ("pre", 2), ("post", 1), ("pre", 1)], 1):
        toks = ids(r, 7, [4, 3], 4, bos_id=1) if n != 4 else np.array([[1, 4, 4, 4],
                                                                          [1, 4, 0, 0]])
        yield gradient(f"decoder_only/grad-00{n}", "decoder_only",
                       f"N = {layers}, norm='{norm}', D = 4, H = 2, vocabulary 7, T = 4, causal "
                       f"and padded: dlogits through lm_head, the stack, then embed.table and "
                       f"pos.table (pos.table row t sums the batch)"
                       + (", id 4 repeated: its table row accumulates." if n == 4 else "."),
                       inputs={"ids": toks},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "activation": "relu" if n == 4 else "gelu"},
                       params=params(r, layers, 4, 6, 7, 4, norm),
                       cotangents={"logits": r.uniform((2, 4, 7))},
                       flags=["gradient", f"{norm}-norm", "causal", "padding"]
                       + (["repeat"] if n == 4 else []))
