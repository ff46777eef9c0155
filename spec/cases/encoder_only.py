"""encoder_only: a BERT-style encoder on token ids (unscaled embedding + learned positions,
encoder under key padding, LM head); returns (hidden, logits)."""

import numpy as np

from ..oracle.encoder_only import encoder_only as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .encoder_layer import enc_layer_params, quiet, scoped, stack_params, tiny, tolerances
from .transformer import ids

COMPONENT = Component("encoder_only", {
    "encoder_only": Fn(required=["pad_id", "num_layers", "num_heads"], module="models",
                       inputs=["ids"], returns=["hidden", "logits"], attributes={"pad_id": None,
                       "num_layers": None, "num_heads": None, "norm": "post", "eps": 1e-5,
                       "activation": "gelu"}, params=True, trace=True, oracle=oracle),
}, tolerances=tolerances("stack"))


def lm_params(rng, n, d, f, vocab, max_len, norm, stack_prefix, lm_scale=0.5, eos_bias=None):
    """embed.table (unscaled, O(1) entries), pos.table, the stack, lm_head.*."""
    p = {"embed.table": rng.weights((vocab, d), 1.0), "pos.table": rng.weights((max_len, d), 0.5)}
    stack = stack_params(rng, enc_layer_params, n, d, f, norm == "pre")
    p.update(scoped(stack_prefix, stack) if stack_prefix else stack)
    p["lm_head.w"] = rng.weights((d, vocab), lm_scale)
    p["lm_head.b"] = rng.weights((vocab,), 0.25)
    if eos_bias is not None:
        p["lm_head.b"][eos_bias[0]] += eos_bias[1]
    return p


def params(rng, n, d, f, vocab, max_len=8, norm="post"):
    return lm_params(rng, n, d, f, vocab, max_len, norm, "encoder")


def cases(rng):
    attrs = {"pad_id": 0, "num_layers": 1, "num_heads": 4, "norm": "post", "activation": "gelu"}
    yield value("encoder_only/basic-001", "encoder_only",
                "N=1 post-norm, GELU, D=16, H=4, vocabulary 20, B=2, T=6, row 1 padded after "
                "4; embeddings are NOT scaled by sqrt(D) (BERT).",
                inputs={"ids": ids(rng, 20, [6, 4], 6)}, attributes=attrs,
                params=params(rng, 1, 16, 32, 20), flags=["basic", "padding", "no-scale"])
    yield value("encoder_only/deep-001", "encoder_only",
                "N=2 post-norm, D=8, H=2, vocabulary 16, T=7 (positions 0..6 of an 8-row "
                "pos.table).",
                inputs={"ids": ids(rng, 16, [7, 5], 7)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2},
                params=params(rng, 2, 8, 16, 16), flags=["two-layers", "padding"])
    yield value("encoder_only/pre-001", "encoder_only",
                "N=2 pre-norm: hidden is encoder.final_norm's output, D=16, H=2, T=5.",
                inputs={"ids": ids(rng, 20, [5, 2], 5)},
                attributes={**attrs, "num_layers": 2, "num_heads": 2, "norm": "pre"},
                params=params(rng, 2, 16, 32, 20, norm="pre"),
                flags=["pre-norm", "final-norm", "padding"])
    yield value("encoder_only/relu-001", "encoder_only",
                "ReLU instead of GELU, N=1, D=12, H=3, T=4, no padding.",
                inputs={"ids": ids(rng, 24, [4, 4], 4)},
                attributes={**attrs, "num_heads": 3, "activation": "relu"},
                params=params(rng, 1, 12, 24, 24), flags=["relu"])
    yield value("encoder_only/pad-id-001", "encoder_only",
                "pad_id = 5; token 0 is an ordinary token, T=5, D=8, H=2.",
                inputs={"ids": np.array([[0, 7, 5, 5, 5], [4, 0, 9, 0, 5]], dtype=np.int64)},
                attributes={**attrs, "pad_id": 5, "num_heads": 2},
                params=params(rng, 1, 8, 16, 10), flags=["pad-id", "padding"])
    yield value("encoder_only/short-001", "encoder_only",
                "T=3 of a 6-row pos.table, one row, N=1 pre-norm, H=4.",
                inputs={"ids": ids(rng, 12, [3], 3)},
                attributes={**attrs, "num_heads": 4, "norm": "pre"},
                params=params(rng, 1, 8, 16, 12, max_len=6, norm="pre"),
                flags=["pre-norm", "final-norm"])
    p = params(rng, 1, 8, 16, 12)
    yield error("encoder_only/oov-001", "encoder_only",
                "ids holds 13 with a vocabulary of 12.",
                inputs={"ids": np.array([[3, 13, 4]], dtype=np.int64)},
                attributes={**attrs, "num_heads": 2}, params=p,
                error="DomainError", mentions=["ids", "13"])
    yield error("encoder_only/too-long-001", "encoder_only",
                "T=9 positions with an 8-row pos.table.",
                inputs={"ids": ids(rng, 12, [9], 9)},
                attributes={**attrs, "num_heads": 2}, params=p,
                error="DomainError", mentions=["positions", "8"])
    yield error("encoder_only/missing-001", "encoder_only",
                "lm_head.w is missing.",
                inputs={"ids": ids(rng, 12, [3], 3)},
                attributes={**attrs, "num_heads": 2},
                params={k: v for k, v in p.items() if k != "lm_head.w"},
                error="ParameterError", mentions=["lm_head.w"])
    yield error("encoder_only/float-ids-001", "encoder_only",
                "Float ids are refused.",
                inputs={"ids": np.array([[3.0, 4.0]])},
                attributes={**attrs, "num_heads": 2}, params=p,
                error="DTypeError", mentions=["ids"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    p = quiet(params(rd, 1, 8, 16, 12))
    p["embed.table"], p["pos.table"] = tiny(rd, (12, 8)), tiny(rd, (8, 8))
    yield value("encoder_only/defaults-001", "encoder_only",
                "norm, eps and activation left out (post, 1e-5, gelu), N = 1, D = 8, H = 2: "
                "tiny embedding and position tables and no value/output biases, so LN1 sees a "
                "variance ~4e-5: pre-norm, eps 1e-6 or 1e-3, or ReLU fail.",
                inputs={"ids": ids(rd, 12, [6, 4], 6)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                flags=["defaults", "default-eps"], omit_defaults=True)


def grad_cases(r):
    for n, (norm, cot) in enumerate([("post", ("logits",)), ("post", ("hidden", "logits")),
                                     ("pre", ("hidden", "logits")), ("pre", ("hidden",))], 1):
        toks = ids(r, 7, [4, 2], 4, bos_id=1)
        if n == 4:
            toks = np.array([[1, 5, 5, 5], [1, 5, 3, 0]])  # repeated ids: rows accumulate
        yield gradient(f"encoder_only/grad-00{n}", "encoder_only",
                       f"norm='{norm}', N = 1, D = 4, vocabulary 7, T = 4, row 1 padded; "
                       f"cotangents on {' and '.join(cot)}: dhidden = its cotangent + the LM "
                       f"head's dx; embed.table and pos.table get scatter-added rows"
                       + (" (id 5 three times in row 0)." if n == 4 else "."),
                       inputs={"ids": toks},
                       attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "norm": norm},
                       params=params(r, 1, 4, 6, 7, 4, norm),
                       cotangents={c: r.uniform((2, 4, 4 if c == "hidden" else 7)) for c in cot},
                       flags=["gradient", f"{norm}-norm", "padding"]
                       + (["repeat"] if n == 4 else []))
