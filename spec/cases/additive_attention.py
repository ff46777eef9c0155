"""additive_attention: Bahdanau's v . tanh(q W_q + k W_k) alignment scores."""

import numpy as np

from ..oracle.additive_attention import additive_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("additive_attention", {
    "additive_attention": Fn(module="alignment", inputs=["query", "keys", "values", "mask"],
                             optional=["values", "mask"], params=True,
                             returns=["context", "weights"], oracle=oracle),
})


def add_params(rng, d_q, d_k, a):
    return {"w_q": rng.weights((d_q, a)), "w_k": rng.weights((d_k, a)),
            "v": rng.weights((a,), 2.0)}


def cases(rng):
    yield value("additive_attention/basic-001", "additive_attention",
                "B=2, T=3, S=4, Dq=4 != Dk=5, A=6, values omitted (= keys), no mask.",
                inputs={"query": rng.uniform((2, 3, 4)), "keys": rng.uniform((2, 4, 5))},
                params=add_params(rng, 4, 5, 6), flags=["basic", "default-values"])
    yield value("additive_attention/values-001", "additive_attention",
                "Separate values (Dv=3), Dq=Dk=4 so a swap of w_q and w_k still runs (and "
                "must give other numbers).",
                inputs={"query": rng.uniform((2, 2, 4)), "keys": rng.uniform((2, 5, 4)),
                        "values": rng.uniform((2, 5, 3))},
                params=add_params(rng, 4, 4, 5), flags=["values", "projection-order"])
    yield value("additive_attention/padding-001", "additive_attention",
                "A (B, 1, S) source padding mask: padded positions get weight 0.",
                inputs={"query": rng.uniform((2, 3, 4)), "keys": rng.uniform((2, 4, 4)),
                        "mask": np.array([[[1, 1, 1, 0]], [[1, 1, 0, 0]]], dtype=bool)},
                params=add_params(rng, 4, 4, 4), flags=["mask", "padding", "broadcast"])
    yield value("additive_attention/fully-masked-001", "additive_attention",
                "A (B, T, S) mask with a fully masked query row: zero weights and zero context.",
                inputs={"query": rng.uniform((1, 3, 3)), "keys": rng.uniform((1, 3, 4)),
                        "values": rng.uniform((1, 3, 2)),
                        "mask": np.array([[[1, 0, 1], [0, 0, 0], [0, 1, 1]]], dtype=bool)},
                params=add_params(rng, 3, 4, 4), flags=["mask", "fully-masked"])
    yield value("additive_attention/decoder-step-001", "additive_attention",
                "T=1, one decoder state per batch row attending over S=5 encoder outputs "
                "(the seq2seq case), B=3.",
                inputs={"query": rng.uniform((3, 1, 4)), "keys": rng.uniform((3, 5, 4))},
                params=add_params(rng, 4, 4, 3), flags=["decoder-step", "default-values"])
    yield value("additive_attention/mask-2d-001", "additive_attention",
                "A (T, S) mask broadcast over the batch, A=2, S=3.",
                inputs={"query": rng.uniform((2, 2, 3)), "keys": rng.uniform((2, 3, 5)),
                        "mask": np.array([[1, 1, 0], [0, 1, 1]], dtype=bool)},
                params=add_params(rng, 3, 5, 2), flags=["mask", "broadcast"])
    yield value("additive_attention/single-key-001", "additive_attention",
                "S=1: every weight is exactly 1 and the context is that one value.",
                inputs={"query": rng.uniform((2, 3, 2)), "keys": rng.uniform((2, 1, 3)),
                        "values": rng.uniform((2, 1, 2))},
                params=add_params(rng, 2, 3, 3), flags=["single-key"])

    q, k, p = rng.uniform((2, 3, 4)), rng.uniform((2, 4, 5)), add_params(rng, 4, 5, 6)
    yield error("additive_attention/rank-001", "additive_attention", "keys of rank 2.",
                inputs={"query": q, "keys": k[0]}, params=p, error="ShapeError",
                mentions=["keys", "(4, 5)"])
    yield error("additive_attention/param-shape-001", "additive_attention",
                "w_k of shape (4, 6) for keys of width Dk=5 (w_q's shape given to w_k).",
                inputs={"query": q, "keys": k}, params={**p, "w_k": rng.weights((4, 6))},
                error="ParameterError", mentions=["w_k", "(4, 6)"])
    yield error("additive_attention/param-shape-002", "additive_attention",
                "v of shape (5,) for an attention width A=6.",
                inputs={"query": q, "keys": k}, params={**p, "v": rng.weights((5,))},
                error="ParameterError", mentions=["v", "(5,)"])
    yield error("additive_attention/mask-001", "additive_attention",
                "A (3, 5) mask for T=3, S=4.",
                inputs={"query": q, "keys": k, "mask": np.ones((3, 5), dtype=bool)}, params=p,
                error="ShapeError", mentions=["mask", "(3, 5)"])
    yield error("additive_attention/length-001", "additive_attention",
                "values with S=3 positions for keys with S=4.",
                inputs={"query": q, "keys": k, "values": rng.uniform((2, 3, 2))}, params=p,
                error="ShapeError", mentions=["keys", "values"])
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    yield error("additive_attention/values-rank-001", "additive_attention", "values of rank 4.",
                inputs={"query": rd.uniform((1, 2, 3)), "keys": rd.uniform((1, 4, 5)),
                        "values": rd.uniform((1, 1, 4, 2))}, params=add_params(rd, 3, 5, 4),
                error="ShapeError", mentions=["values", "(1, 1, 4, 2)"])


def _edges(rng):
    """Non-finite masked keys (their own number stream)."""
    keys = rng.uniform((2, 4, 3))
    keys[1, 0] = np.nan  # masked for batch 1; values default to keys
    keys[0, 3, 1] = np.inf
    p = {"w_q": rng.weights((2, 5)), "w_k": rng.weights((3, 5)), "v": rng.weights((5,), 2.0)}
    yield value("additive_attention/masked-nan-001", "additive_attention",
                "values omitted (= keys); key 0 of batch 1 is NaN and key 3 of batch 0 holds "
                "inf, both masked by a (B, 1, S) padding mask: the contexts stay finite.",
                inputs={"query": rng.uniform((2, 3, 2)), "keys": keys,
                        "mask": np.array([[[1, 1, 1, 0]], [[0, 1, 1, 1]]], dtype=bool)},
                params=p, flags=["masked-nan", "non-finite", "mask", "padding"])


def grad_cases(r):
    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("additive_attention/grad-001", "additive_attention",
                   "B = 2, T = 2, S = 3, Dq = 3 != Dk = 4, A = 5, values omitted (= keys): the "
                   "keys' gradient is the score path's plus the values path's (W^T dC); "
                   "du = de v (1 - h^2), so leaving out tanh' fails.",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 3, 4)}, params=add_params(r, 3, 4, 5),
                   cotangents={"context": r.uniform((2, 2, 4))},
                   flags=["gradient", "default-values"])
    keep = r.bools((2, 3, 4))
    keep[..., 0] = True
    yield gradient("additive_attention/grad-002", "additive_attention",
                   "values given (Dv = 2), a (2, 3, 4) mask and cotangents on the context and "
                   "the weights: masked keys get no gradient from their row.",
                   inputs={"query": u(2, 3, 2), "keys": u(2, 4, 3), "values": u(2, 4, 2),
                           "mask": keep},
                   params=add_params(r, 2, 3, 4),
                   cotangents={"context": r.uniform((2, 3, 2)), "weights": r.uniform((2, 3, 4))},
                   flags=["gradient", "mask", "weights-cotangent"])
    yield gradient("additive_attention/grad-003", "additive_attention",
                   "Inputs in [-2, 2] (pre-activations up to 12: some tanh saturated, 1 - h^2 "
                   "near 0), values given: dv = sum de h, dW_q = sum_b query^T (sum_s du).",
                   inputs={"query": r.uniform((1, 3, 4)), "keys": r.uniform((1, 4, 4)),
                           "values": r.uniform((1, 4, 3))},
                   params=add_params(r, 4, 4, 3), cotangents={"context": r.uniform((1, 3, 3))},
                   flags=["gradient", "saturation"])
    yield gradient("additive_attention/grad-004", "additive_attention",
                   "A single query (T = 1) over S = 5 keys, B = 3, cotangent on the weights only "
                   "(the context's is 0).",
                   inputs={"query": u(3, 1, 2), "keys": u(3, 5, 2)}, params=add_params(r, 2, 2, 3),
                   cotangents={"weights": r.uniform((3, 1, 5))},
                   flags=["gradient", "single-query", "weights-cotangent"])
