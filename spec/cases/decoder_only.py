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
                       added={"tie_embeddings": False}, params=True, trace=True, oracle=oracle),
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
    yield from gpt2_cases(Rng(f"{COMPONENT.id}/gpt2"))


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
    yield from _untied_grad_cases(r)
    yield from gpt2_grad_cases(Rng(f"{COMPONENT.id}/gpt2-grad"))


def gpt2_grad_cases(r):
    for n, (layers, act, toks) in enumerate([(1, "gelu_tanh", None), (2, "gelu_tanh", None),
                                             (1, "relu", [[1, 4, 4, 4], [1, 4, 2, 0]])], 5):
        toks = ids(r, 7, [4, 3], 4, bos_id=1) if toks is None else np.array(toks)
        yield gradient(f"decoder_only/grad-00{n}", "decoder_only",
                       f"GPT-2's tied head (tie_embeddings), N = {layers}, {act}, D = 4, H = 2, "
                       f"vocabulary 7, T = 4, padded: embed.table is read twice, so its "
                       f"gradient is dlogits^T h (the head) plus the embedding's scatter-add"
                       + (", id 4 repeated." if n == 7 else "."),
                       inputs={"ids": toks},
                       attributes={**GPT2, "num_layers": layers, "num_heads": 2,
                                   "activation": act},
                       params=tied_params(r, layers, 4, 6, 7, 4),
                       cotangents={"logits": r.uniform((2, 4, 7))},
                       flags=["gradient", "tied-embeddings", "causal", "padding"]
                       + (["repeat"] if n == 7 else []))


def _untied_grad_cases(r):
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


# -- GPT-2 (issue 25): the head tied to the token embedding, without a bias ----------------

GPT2 = {"pad_id": 0, "norm": "pre", "eps": 1e-5, "activation": "gelu_tanh",
        "tie_embeddings": True}


def tied_params(rng, n, d, f, vocab, max_len=8):
    """GPT2LMHeadModel's parameters: embed.table (wte), pos.table (wpe), the pre-norm layers,
    final_norm (ln_f); no lm_head.* (the head is embed.table^T, no bias)."""
    p = params(rng, n, d, f, vocab, max_len)
    return {k: v for k, v in p.items() if not k.startswith("lm_head.")}


def gpt2_cases(r):
    yield value("decoder_only/gpt2-001", "decoder_only",
                "GPT-2 (GPT2LMHeadModel): tie_embeddings, logits = h embed.table^T without a "
                "bias; pre-norm + final_norm (ln_f), GELU tanh (gelu_new), eps 1e-5, N = 2, "
                "D = 16, H = 4, vocabulary 20, B = 2, T = 6, no padding.",
                inputs={"ids": ids(r, 20, [6, 6], 6, bos_id=1)},
                attributes={**GPT2, "num_layers": 2, "num_heads": 4},
                params=tied_params(r, 2, 16, 32, 20),
                flags=["tied-embeddings", "lm-head", "gelu_tanh", "causal", "pre-norm"])
    yield value("decoder_only/gpt2-002", "decoder_only",
                "GPT-2, tied head, N = 1, D = 12, H = 3 (K = 4), vocabulary 16, T = 7, row 1 "
                "right-padded after 5 (pad keys masked, pad queries still see the prefix).",
                inputs={"ids": ids(r, 16, [7, 5], 7, bos_id=1)},
                attributes={**GPT2, "num_layers": 1, "num_heads": 3},
                params=tied_params(r, 1, 12, 24, 16),
                flags=["tied-embeddings", "padding", "causal", "heads"])
    yield value("decoder_only/gpt2-003", "decoder_only",
                "Tied head with a square table (vocabulary = D = 8): h embed.table (not "
                "transposed) also runs and fails; N = 2, H = 2, T = 5.",
                inputs={"ids": ids(r, 8, [5, 4], 5, bos_id=1)},
                attributes={**GPT2, "num_layers": 2, "num_heads": 2},
                params=tied_params(r, 2, 8, 16, 8),
                flags=["tied-embeddings", "transpose", "causal"])
    yield value("decoder_only/gpt2-004", "decoder_only",
                "Tied head, exact GELU (erf) instead of GPT-2's tanh, N = 1, D = 8, H = 2, "
                "vocabulary 10, T = 8 (every row of the 8-row pos.table).",
                inputs={"ids": ids(r, 10, [8, 8], 8, bos_id=1)},
                attributes={**GPT2, "activation": "gelu", "num_layers": 1, "num_heads": 2},
                params=tied_params(r, 1, 8, 16, 10),
                flags=["tied-embeddings", "gelu", "causal"])
    p = tied_params(r, 1, 8, 16, 12)
    yield error("decoder_only/gpt2-bias-001", "decoder_only",
                "tie_embeddings=True with an lm_head.b (12,): GPT-2's tied head has no bias; "
                "an implementation that adds it silently is wrong.",
                inputs={"ids": ids(r, 12, [3], 3, bos_id=1)},
                attributes={**GPT2, "num_layers": 1, "num_heads": 2},
                params={**p, "lm_head.b": r.weights((12,), 0.25)},
                error="ParameterError", mentions=["lm_head.b", "(12,)", "tie_embeddings"])
    yield error("decoder_only/gpt2-untied-001", "decoder_only",
                "tie_embeddings=True with an lm_head.w (8, 12): the tied head reads embed.table; "
                "a W that would be ignored is refused.",
                inputs={"ids": ids(r, 12, [3], 3, bos_id=1)},
                attributes={**GPT2, "num_layers": 1, "num_heads": 2},
                params={**p, "lm_head.w": r.weights((8, 12), 0.5)},
                error="ParameterError", mentions=["lm_head.w", "(8, 12)"])
    yield error("decoder_only/gpt2-flag-001", "decoder_only",
                "tie_embeddings = 1 (an int, not a bool).",
                inputs={"ids": ids(r, 12, [3], 3, bos_id=1)},
                attributes={**GPT2, "tie_embeddings": 1, "num_layers": 1, "num_heads": 2},
                params=p, error="ConfigError", mentions=["tie_embeddings"])
