"""luong_attention: Luong's dot, general and concat scores, unscaled."""

import numpy as np

from ..oracle.luong_attention import luong_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("luong_attention", {
    "luong_attention": Fn(module="alignment", inputs=["query", "keys", "values", "mask"],
                          optional=["values", "mask"], attributes={"score": "dot"},
                          params=True, returns=["context", "weights"], oracle=oracle),
})


def concat_params(rng, d_q, d_k, a):
    return {"w": rng.weights((d_q + d_k, a)), "v": rng.weights((a,), 2.0)}


def cases(rng):
    yield value("luong_attention/dot-001", "luong_attention",
                "dot score, Dq=Dk=3, values omitted (= keys), no mask; no 1/sqrt(D) scaling.",
                inputs={"query": rng.uniform((2, 3, 3), -1, 1), "keys": rng.uniform((2, 4, 3))},
                attributes={"score": "dot"}, flags=["dot", "default-values", "scale"])
    yield value("luong_attention/dot-002", "luong_attention",
                "dot score with separate values (Dv=2) and a (B, T, S) mask with a fully "
                "masked row.",
                inputs={"query": rng.uniform((1, 3, 4), -1, 1), "keys": rng.uniform((1, 3, 4)),
                        "values": rng.uniform((1, 3, 2)),
                        "mask": np.array([[[1, 1, 0], [0, 0, 0], [1, 0, 1]]], dtype=bool)},
                attributes={"score": "dot"}, flags=["dot", "mask", "fully-masked"])
    yield value("luong_attention/general-001", "luong_attention",
                "general score q W kᵀ with a square, non-symmetric W (Dq=Dk=4): W transposed "
                "gives other numbers.",
                inputs={"query": rng.uniform((2, 2, 4)), "keys": rng.uniform((2, 4, 4)),
                        "values": rng.uniform((2, 4, 3))},
                attributes={"score": "general"}, params={"w": rng.weights((4, 4))},
                flags=["general", "transpose"])
    yield value("luong_attention/general-002", "luong_attention",
                "general score with Dq=3 != Dk=5 (W (3, 5)), values omitted, a (B, 1, S) "
                "padding mask.",
                inputs={"query": rng.uniform((2, 2, 3)), "keys": rng.uniform((2, 4, 5)),
                        "mask": np.array([[[1, 1, 1, 0]], [[1, 0, 1, 1]]], dtype=bool)},
                attributes={"score": "general"}, params={"w": rng.weights((3, 5))},
                flags=["general", "mask", "padding"])
    yield value("luong_attention/concat-001", "luong_attention",
                "concat score v . tanh([q; k] W), Dq=Dk=3, A=4: the order [k; q] gives other "
                "numbers.",
                inputs={"query": rng.uniform((2, 3, 3)), "keys": rng.uniform((2, 4, 3))},
                attributes={"score": "concat"}, params=concat_params(rng, 3, 3, 4),
                flags=["concat", "concat-order"])
    yield value("luong_attention/concat-002", "luong_attention",
                "concat score with Dq=2 != Dk=4, A=3, separate values and a (T, S) mask "
                "broadcast over the batch.",
                inputs={"query": rng.uniform((2, 2, 2)), "keys": rng.uniform((2, 3, 4)),
                        "values": rng.uniform((2, 3, 3)),
                        "mask": np.array([[1, 0, 1], [1, 1, 0]], dtype=bool)},
                attributes={"score": "concat"}, params=concat_params(rng, 2, 4, 3),
                flags=["concat", "mask", "broadcast"])
    yield value("luong_attention/decoder-step-001", "luong_attention",
                "general score, T=1 decoder state over S=5 encoder outputs, B=3.",
                inputs={"query": rng.uniform((3, 1, 4)), "keys": rng.uniform((3, 5, 4))},
                attributes={"score": "general"}, params={"w": rng.weights((4, 4))},
                flags=["general", "decoder-step"])

    q, k = rng.uniform((2, 3, 4)), rng.uniform((2, 5, 3))
    yield error("luong_attention/dot-width-001", "luong_attention",
                "dot score with Dq=4 != Dk=3.",
                inputs={"query": q, "keys": k}, attributes={"score": "dot"},
                error="ShapeError", mentions=["query", "keys", "4", "3"])
    yield error("luong_attention/score-001", "luong_attention", "An unknown score 'bilinear'.",
                inputs={"query": q, "keys": k}, attributes={"score": "bilinear"},
                error="ConfigError", mentions=["score", "bilinear"])
    yield error("luong_attention/param-shape-001", "luong_attention",
                "general score with w of shape (3, 4), i.e. transposed (it must be (Dq, Dk) = "
                "(4, 3)).",
                inputs={"query": q, "keys": k}, attributes={"score": "general"},
                params={"w": rng.weights((3, 4))}, error="ParameterError",
                mentions=["w", "(3, 4)"])
    yield error("luong_attention/param-shape-002", "luong_attention",
                "concat score with v of shape (4,) for w of shape (7, 5).",
                inputs={"query": q, "keys": k}, attributes={"score": "concat"},
                params={"w": rng.weights((7, 5)), "v": rng.weights((4,))},
                error="ParameterError", mentions=["v", "(4,)"])
    yield error("luong_attention/missing-param-001", "luong_attention",
                "general score without w.",
                inputs={"query": q, "keys": k}, attributes={"score": "general"},
                error="ParameterError", mentions=["w"])
    yield error("luong_attention/rank-001", "luong_attention", "query of rank 4.",
                inputs={"query": q[None], "keys": k}, attributes={"score": "general"},
                params={"w": rng.weights((4, 3))}, error="ShapeError",
                mentions=["query", "(1, 2, 3, 4)"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("luong_attention/defaults-001", "luong_attention",
                "score left out (default dot): Dq = Dk = 3, values omitted, no parameters.",
                inputs={"query": rd.uniform((2, 2, 3), -1, 1), "keys": rd.uniform((2, 4, 3))},
                flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    yield error("luong_attention/values-rank-001", "luong_attention", "values of rank 4.",
                inputs={"query": rd.uniform((1, 2, 3)), "keys": rd.uniform((1, 4, 3)),
                        "values": rd.uniform((1, 1, 4, 2))},
                error="ShapeError", mentions=["values", "(1, 1, 4, 2)"])


def _edges(rng):
    """Non-finite masked keys and values, no keys at all (their own number stream)."""
    keys, values = rng.uniform((1, 4, 3)), rng.uniform((1, 4, 2))
    keys[0, 2] = np.nan  # padding position: masked for every query
    values[0, 2] = [np.nan, np.inf]
    yield value("luong_attention/masked-nan-001", "luong_attention",
                "dot score; the masked (padding) key 2 holds NaN in its key and NaN/inf in its "
                "value: the context stays finite (weight 0 leaves the key out).",
                inputs={"query": rng.uniform((1, 2, 3), -1, 1), "keys": keys, "values": values,
                        "mask": np.array([[[1, 1, 0, 1]]], dtype=bool)},
                attributes={"score": "dot"}, flags=["masked-nan", "non-finite", "mask", "dot"])
    yield value("luong_attention/empty-keys-001", "luong_attention",
                "S = 0: weights (2, 3, 0) and a zero context (2, 3, 2).",
                inputs={"query": rng.uniform((2, 3, 3), -1, 1), "keys": np.zeros((2, 0, 3)),
                        "values": np.zeros((2, 0, 2))},
                attributes={"score": "dot"}, flags=["empty-axis", "edge", "dot"])


def grad_cases(r):
    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("luong_attention/grad-001", "luong_attention",
                   "score='dot', values omitted (= keys), B = 2, T = 2, S = 3, D = 3: dq = de k, "
                   "dk = de^T q + W^T dC (the keys are also the values).",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 3, 3)}, attributes={"score": "dot"},
                   cotangents={"context": r.uniform((2, 2, 3))},
                   flags=["gradient", "dot", "default-values"])
    keep = r.bools((2, 2, 4))
    keep[..., 0] = True
    yield gradient("luong_attention/grad-002", "luong_attention",
                   "score='dot', values given (Dv = 2), a (2, 2, 4) mask, cotangents on the "
                   "context and the weights.",
                   inputs={"query": u(2, 2, 3), "keys": u(2, 4, 3), "values": u(2, 4, 2),
                           "mask": keep},
                   attributes={"score": "dot"},
                   cotangents={"context": r.uniform((2, 2, 2)), "weights": r.uniform((2, 2, 4))},
                   flags=["gradient", "dot", "mask", "weights-cotangent"])
    yield gradient("luong_attention/grad-003", "luong_attention",
                   "score='general', Dq = 3 != Dk = 2, values given: dW = sum_b q^T de k is "
                   "(3, 2), dq = de k W^T, dk = de^T q W (a missing transpose cannot take the "
                   "shape).",
                   inputs={"query": u(2, 3, 3), "keys": u(2, 4, 2), "values": u(2, 4, 2)},
                   attributes={"score": "general"}, params={"w": r.weights((3, 2))},
                   cotangents={"context": r.uniform((2, 3, 2))}, flags=["gradient", "general"])
    yield gradient("luong_attention/grad-004", "luong_attention",
                   "score='general' with a square W (Dq = Dk = 3), values omitted and a cotangent "
                   "on the weights: W's gradient in the wrong layout (its transpose) fails.",
                   inputs={"query": u(1, 3, 3), "keys": u(1, 4, 3)},
                   attributes={"score": "general"}, params={"w": r.weights((3, 3))},
                   cotangents={"context": r.uniform((1, 3, 3)), "weights": r.uniform((1, 3, 4))},
                   flags=["gradient", "general", "default-values", "weights-cotangent"])
    yield gradient("luong_attention/grad-005", "luong_attention",
                   "score='concat', Dq = 2, Dk = 3, A = 4, values given: W's top 2 rows get "
                   "the query's share and its bottom 3 the keys'; tanh' = 1 - h^2.",
                   inputs={"query": u(2, 2, 2), "keys": u(2, 3, 3), "values": u(2, 3, 2)},
                   attributes={"score": "concat"}, params=concat_params(r, 2, 3, 4),
                   cotangents={"context": r.uniform((2, 2, 2))}, flags=["gradient", "concat"])
    yield gradient("luong_attention/grad-006", "luong_attention",
                   "score='concat', values omitted, inputs in [-2, 2] (some tanh saturated), "
                   "cotangents on the context and the weights.",
                   inputs={"query": r.uniform((1, 2, 3)), "keys": r.uniform((1, 4, 2))},
                   attributes={"score": "concat"}, params=concat_params(r, 3, 2, 3),
                   cotangents={"context": r.uniform((1, 2, 2)), "weights": r.uniform((1, 2, 4))},
                   flags=["gradient", "concat", "default-values", "saturation"])
