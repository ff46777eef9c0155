"""self_attention: one head, Q, K, V projected from the same sequence, then sdpa."""

import numpy as np

from ..oracle.self_attention import self_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("self_attention", {
    "self_attention": Fn(module="multihead", inputs=["x", "mask"], optional=["mask"],
                         attributes={"scale": None}, params=True,
                         returns=["output", "weights"], oracle=oracle),
})


def sa_params(rng, d, k, v, biases=("b_q", "b_k", "b_v")):
    p = {"w_q": rng.weights((d, k)), "w_k": rng.weights((d, k)), "w_v": rng.weights((d, v))}
    for name in biases:
        p[name] = rng.weights((v if name == "b_v" else k,), 0.5)
    return {n: p[n] for n in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v") if n in p}


def cases(rng):
    yield value("self_attention/basic-001", "self_attention",
                "B=2, T=3, D=6, K=V=3 with all three biases, no mask; the scale is "
                "1/sqrt(K=3), not 1/sqrt(D=6).",
                inputs={"x": rng.uniform((2, 3, 6))}, params=sa_params(rng, 6, 3, 3),
                flags=["basic", "bias", "scale"])
    yield value("self_attention/no-bias-001", "self_attention",
                "No biases at all, K=2 != V=5, B=1, T=4, D=4.",
                inputs={"x": rng.uniform((1, 4, 4))}, params=sa_params(rng, 4, 2, 5, ()),
                flags=["no-bias", "k-ne-v"])
    yield value("self_attention/partial-bias-001", "self_attention",
                "Only b_q and b_v are given (b_k absent): each bias is optional on its own.",
                inputs={"x": rng.uniform((2, 3, 4))},
                params=sa_params(rng, 4, 4, 3, ("b_q", "b_v")), flags=["bias", "k-ne-v"])
    yield value("self_attention/causal-001", "self_attention",
                "A (T, T) causal mask broadcast over the batch, T=4, D=4, K=V=2.",
                inputs={"x": rng.uniform((2, 4, 4)),
                        "mask": np.tril(np.ones((4, 4), dtype=bool))},
                params=sa_params(rng, 4, 2, 2), flags=["mask", "causal", "broadcast"])
    yield value("self_attention/fully-masked-001", "self_attention",
                "A (B, T, T) mask whose second query row is fully masked: zero weights and a "
                "zero output there (not b_v, not uniform, not NaN).",
                inputs={"x": rng.uniform((1, 3, 4)),
                        "mask": np.array([[[1, 0, 1], [0, 0, 0], [1, 1, 0]]], dtype=bool)},
                params=sa_params(rng, 4, 3, 3), flags=["mask", "fully-masked", "bias"])
    yield value("self_attention/scale-001", "self_attention",
                "An explicit scale of 0.25 replaces 1/sqrt(K).",
                inputs={"x": rng.uniform((2, 3, 4))}, attributes={"scale": 0.25},
                params=sa_params(rng, 4, 4, 2), flags=["scale", "attribute"])
    yield value("self_attention/single-token-001", "self_attention",
                "T=1: the weight is exactly 1 and the output is x W_V + b_V.",
                inputs={"x": rng.uniform((3, 1, 4))}, params=sa_params(rng, 4, 2, 3),
                flags=["single-key", "bias"])

    x, p = rng.uniform((2, 3, 4)), sa_params(rng, 4, 3, 2)
    yield error("self_attention/rank-001", "self_attention", "x of rank 2 (T, D).",
                inputs={"x": x[0]}, params=p, error="ShapeError", mentions=["x", "(3, 4)"])
    yield error("self_attention/param-shape-001", "self_attention",
                "w_k of shape (4, 2) while w_q gives K=3.",
                inputs={"x": x}, params={**p, "w_k": rng.weights((4, 2))},
                error="ParameterError", mentions=["w_k", "(4, 2)"])
    yield error("self_attention/param-shape-002", "self_attention",
                "w_q of shape (5, 3) for x of width D=4.",
                inputs={"x": x}, params={**p, "w_q": rng.weights((5, 3))},
                error="ParameterError", mentions=["w_q", "(5, 3)"])
    yield error("self_attention/param-shape-003", "self_attention",
                "b_v of shape (3,) for V=2.",
                inputs={"x": x}, params={**p, "b_v": rng.weights((3,))},
                error="ParameterError", mentions=["b_v", "(3,)"])
    yield error("self_attention/missing-param-001", "self_attention",
                "The value projection w_v is missing from params.",
                inputs={"x": x}, params={k: a for k, a in p.items() if k != "w_v"},
                error="ParameterError", mentions=["w_v"])
    yield error("self_attention/mask-001", "self_attention", "A (3, 4) mask for T=3.",
                inputs={"x": x, "mask": np.ones((3, 4), dtype=bool)}, params=p,
                error="ShapeError", mentions=["mask", "(3, 4)"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("self_attention/defaults-001", "self_attention",
                "scale left out (default None = 1/sqrt(K) = 1/2, K = 4, D = 6).",
                inputs={"x": rd.uniform((2, 3, 6), -1, 1)}, params=sa_params(rd, 6, 4, 4),
                flags=["defaults"], omit_defaults=True)


def grad_cases(r):
    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("self_attention/grad-001", "self_attention",
                   "B = 2, T = 3, D = 4, K = 3, V = 2, all biases: x feeds Q, K and V, so dx is "
                   "the sum of the three projections' input gradients (keeping one fails).",
                   inputs={"x": u(2, 3, 4)}, params=sa_params(r, 4, 3, 2),
                   cotangents={"output": r.uniform((2, 3, 2))}, flags=["gradient", "basic"])
    yield gradient("self_attention/grad-002", "self_attention",
                   "A causal mask and cotangents on the output and the weights, scale = 0.5.",
                   inputs={"x": u(1, 4, 3), "mask": np.tril(np.ones((4, 4), dtype=bool))},
                   attributes={"scale": 0.5}, params=sa_params(r, 3, 2, 3),
                   cotangents={"output": r.uniform((1, 4, 3)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "causal", "scale", "weights-cotangent"])
    yield gradient("self_attention/grad-003", "self_attention",
                   "No biases (Vaswani et al.'s projections): the gradients hold w_q, w_k, w_v "
                   "only; B = 3 so dW sums over every sequence.",
                   inputs={"x": u(3, 2, 4)}, params=sa_params(r, 4, 2, 2, biases=()),
                   cotangents={"output": r.uniform((3, 2, 2))}, flags=["gradient", "no-bias"])
    keep = r.bools((2, 3, 3))
    keep[..., 0] = True
    yield gradient("self_attention/grad-004", "self_attention",
                   "Only b_v among the biases, a (2, 3, 3) per-sequence mask, inputs in [-2, 2] "
                   "(sharper weights).",
                   inputs={"x": r.uniform((2, 3, 3)), "mask": keep},
                   params=sa_params(r, 3, 2, 2, biases=("b_v",)),
                   cotangents={"output": r.uniform((2, 3, 2))}, flags=["gradient", "mask"])
