"""decoder_only_loss: one training step's loss of the decoder-only model, the mean
cross-entropy of its logits against the next ids; its gradient vectors (in
``_gradients.py``) hold every parameter's gradient."""

import numpy as np

from ..oracle.decoder_only_loss import decoder_only_loss as oracle
from ._build import Component, Fn, error, value
from .decoder_only import params
from .encoder_layer import tolerances
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
                params=params(rng, 1, 8, 16, 9), flags=["error", "shapes"])
