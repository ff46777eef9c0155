"""decoder_only_loss: one training step's loss of the decoder-only model, the mean
cross-entropy of its logits against the next ids; its gradient vectors
(``grad_cases``) hold every parameter's gradient."""

import numpy as np

from ..oracle.decoder_only_loss import decoder_only_loss as oracle
from ._build import Component, Fn, Rng, error, gradient, value
from .decoder_only import params
from .encoder_layer import tiny, tolerances
from .transformer import ids

COMPONENT = Component("decoder_only_loss", {
    "decoder_only_loss": Fn(required=["pad_id", "num_layers", "num_heads"], module="models",
                            inputs=["ids", "targets"], returns=["loss"],
                            attributes={"pad_id": None, "num_layers": None, "num_heads": None,
                                        "norm": "pre", "eps": 1e-5, "activation": "gelu",
                                        "ignore_index": -100, "label_smoothing": 0.0},
                            params=True, trace=True, oracle=oracle),
}, tolerances=tolerances("stack"))


def next_ids(toks, pad_id=0, ignore_index=-100):
    """targets[b, t] = toks[b, t + 1], ignore_index at the last position and where the next
    id is padding."""
    t = np.full(toks.shape, ignore_index, dtype=np.int64)
    t[:, :-1] = toks[:, 1:]
    t[t == pad_id] = ignore_index
    return t


def cases(rng):
    toks = ids(rng, 9, [5, 3], 5, bos_id=1)
    yield value("decoder_only_loss/basic-001", "decoder_only_loss",
                "N = 1 pre-norm, D = 8, H = 2, vocabulary 9, B = 2, T = 5, row 1 padded after "
                "3: the mean over the 6 counted next-token targets (the last position and "
                "padding ignored) of -log softmax(logits)[target], and the logits.",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=params(rng, 1, 8, 16, 9), flags=["basic", "ignore-index", "padding"])
    toks = ids(rng, 9, [4, 4], 4, bos_id=1)
    yield value("decoder_only_loss/smoothing-001", "decoder_only_loss",
                "label_smoothing = 0.1 (Vaswani et al.) with N = 1 post-norm, T = 4.",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "norm": "post",
                            "label_smoothing": 0.1},
                params=params(rng, 1, 8, 16, 9, norm="post"),
                flags=["label-smoothing", "post-norm"])
    toks = ids(rng, 9, [4, 4], 4, bos_id=1)
    yield error("decoder_only_loss/error-targets-shape-001", "decoder_only_loss",
                "targets of shape (2, 3) for ids of shape (2, 4): ShapeError naming targets.",
                error="ShapeError", mentions=["targets"],
                inputs={"ids": toks, "targets": next_ids(toks)[:, :3]},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=params(rng, 1, 8, 16, 9))
    toks = ids(rng, 9, [6, 6], 6, bos_id=1)
    yield value("decoder_only_loss/deep-001", "decoder_only_loss",
                "N = 2 pre-norm, label_smoothing = 0.1, T = 6, no padding: 10 counted targets.",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 2, "num_heads": 2,
                            "label_smoothing": 0.1},
                params=params(rng, 2, 8, 16, 9), flags=["two-layers", "label-smoothing"])
    toks = ids(rng, 9, [5, 2], 5, bos_id=1)
    yield value("decoder_only_loss/ignore-index-001", "decoder_only_loss",
                "ignore_index = 0 given: the targets keep the pad id 0 where the next token is "
                "padding, and those tokens are left out of the mean.",
                inputs={"ids": toks, "targets": next_ids(toks, ignore_index=0)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "ignore_index": 0},
                params=params(rng, 1, 8, 16, 9), flags=["ignore-index", "padding"])
    toks = ids(rng, 9, [2, 1], 4, bos_id=1)
    yield value("decoder_only_loss/one-target-001", "decoder_only_loss",
                "A single counted target (row 0's second token; everything else is padding or "
                "has no next token): the mean is that token's loss.",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=params(rng, 1, 8, 16, 9), flags=["ignore-index", "padding"])
    toks = np.array([[1, 5, 5, 5, 5], [1, 5, 6, 5, 6]])
    yield value("decoder_only_loss/repeat-001", "decoder_only_loss",
                "Repeated tokens, activation='relu', norm='post': the same id as input and "
                "target at several positions.",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2, "norm": "post",
                            "activation": "relu"},
                params=params(rng, 1, 8, 16, 9, norm="post"), flags=["repeat", "post-norm"])
    toks = ids(rng, 9, [4, 4], 4, bos_id=1)
    bad = next_ids(toks)
    bad[0, 0] = 12
    yield error("decoder_only_loss/error-target-range-001", "decoder_only_loss",
                "A target of 12 for a vocabulary of 9: DomainError naming targets.",
                error="DomainError", mentions=["targets"], inputs={"ids": toks, "targets": bad},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=params(rng, 1, 8, 16, 9))
    toks = ids(rng, 9, [4, 4], 4, bos_id=1)
    targets = next_ids(toks)
    toks[1, 2] = -1
    yield error("decoder_only_loss/error-ids-001", "decoder_only_loss",
                "ids holds -1: the model's DomainError naming ids, before any loss.",
                error="DomainError", mentions=["ids"], inputs={"ids": toks, "targets": targets},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2},
                params=params(rng, 1, 8, 16, 9))
    rd = Rng(f"{COMPONENT.id}/defaults")
    p = params(rd, 1, 8, 16, 12)
    p["embed.table"], p["pos.table"] = tiny(rd, (12, 8)), tiny(rd, (8, 8))
    toks = ids(rd, 12, [6, 4], 6, bos_id=1)
    yield value("decoder_only_loss/defaults-001", "decoder_only_loss",
                "norm, eps, activation, ignore_index and label_smoothing left out (pre, 1e-5, "
                "gelu, -100, 0): tiny embedding and position tables, so the pre-norm LN1 sees "
                "a variance ~4e-5 (eps 1e-6 fails), row 1 padded after 4 (targets -100 "
                "there: another ignore_index fails), and no smoothing (a smoothing of 0.1 shows "
                "at float64 and float32; cross_entropy/defaults-001 catches it at every dtype).",
                inputs={"ids": toks, "targets": next_ids(toks)},
                attributes={"pad_id": 0, "num_layers": 1, "num_heads": 2}, params=p,
                flags=["defaults", "default-eps", "ignore-index"], omit_defaults=True)


def grad_cases(r):
    """One training step: the loss's gradient with respect to every parameter."""
    for n, (norm, layers, smooth) in enumerate([("pre", 1, 0.1), ("pre", 2, 0.1),
                                                ("post", 1, 0.0), ("pre", 1, 0.0)], 1):
        toks = ids(r, 7, [5, 3], 5, bos_id=1)
        smoothing = f"label_smoothing = {smooth}" if smooth else "no label smoothing"
        yield gradient(f"decoder_only_loss/grad-00{n}", "decoder_only_loss",
                       f"One training step of a decoder-only model (N = {layers}, norm='{norm}', "
                       f"D = 4, H = 2, vocabulary 7, B = 2, T = 5, row 1 padded after 3): "
                       f"loss = the mean cross-entropy of the logits against the next ids over "
                       f"the 6 counted targets (the last position and padding ignored), "
                       f"{smoothing}, dloss = 1; expected: the loss and the gradient of every "
                       f"parameter (embed.table, pos.table, layers.*, "
                       f"{'final_norm.*, ' if norm == 'pre' else ''}lm_head.*).",
                       inputs={"ids": toks, "targets": next_ids(toks)},
                       attributes={"pad_id": 0, "num_layers": layers, "num_heads": 2,
                                   "norm": norm, "label_smoothing": smooth},
                       params=params(r, layers, 4, 6, 7, 5, norm),
                       cotangents={"loss": np.array(1.0)},
                       flags=["gradient", "training-step", f"{norm}-norm", "ignore-index",
                              "padding"] + (["label-smoothing"] if smooth else []))
