"""feedforward: y = act(x W1 + b1) W2 + b2 with relu, exact gelu or tanh-gelu."""

import numpy as np

from ..oracle.feedforward import feedforward as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("feedforward", {
    "feedforward": Fn(module="feedforward", inputs=["x"], attributes={"activation": "relu"},
                      params=True, returns=["y"], oracle=oracle),
})


def ffn_params(rng, d, f, scale=1.0):
    return {"w1": rng.weights((d, f), scale), "b1": rng.weights((f,), 0.5),
            "w2": rng.weights((f, d), scale), "b2": rng.weights((d,), 0.5)}


def tail_params(rng, d, f):
    """Pre-activations x W1 + b1 in [-2.5, -2] (x in multiples of 1/4 in [-1, 1], W1 in
    {-1/16, 0, 1/16}, b1 = -2.25) and W2 of positive integers, so the outputs do not
    cancel: every hidden unit sits in GELU's left tail, where erf-GELU and tanh-GELU differ
    by 0.2-3% relative while 1 + erf(h / sqrt 2) stays above 0.01 (no float32 cancellation)."""
    return {"w1": rng.integers(-1, 2, (d, f)).astype(np.float64) / 16,
            "b1": np.full(f, -2.25),
            "w2": rng.integers(1, 9, (f, d)).astype(np.float64),
            "b2": np.zeros(d)}


HALF_NOTE = ("erf-GELU and tanh-GELU differ by at most ~5e-4 (about 3% relative only deep in "
             "the left tail, where 1 + erf(x / sqrt 2) is below the resolution of float16 and "
             "bfloat16 near 1): a backend evaluating GELU in half precision cannot tell them "
             "apart, so no vector separates the two at float16/bfloat16 tolerances")


def cases(rng):
    for act in ["relu", "gelu", "gelu_tanh"]:
        yield value(f"feedforward/{act.replace('_', '-')}-001", "feedforward",
                    f"activation='{act}': a (2, 3, 4) input, D = 4, F = 8, weights in [-1, 1] "
                    "and biases in [-0.5, 0.5], so pre-activations straddle 0 and outputs "
                    "have both signs.",
                    inputs={"x": rng.uniform((2, 3, 4))}, attributes={"activation": act},
                    params=ffn_params(rng, 4, 8), flags=["basic", act])
    for act in ["gelu", "gelu_tanh"]:
        yield value(f"feedforward/{act.replace('_', '-')}-tail-001", "feedforward",
                    f"activation='{act}' with every pre-activation in [-2.5, -2] (left tail) "
                    "and W2 of positive integers: erf-GELU and tanh-GELU differ there by "
                    "0.2-3%, so using one for the other fails at float64 and float32.",
                    inputs={"x": rng.integers(-4, 5, (3, 4)).astype(np.float64) / 4},
                    attributes={"activation": act}, params=tail_params(rng, 4, 8),
                    dtypes=["float64", "float32"], dtype_note=HALF_NOTE,
                    flags=["gelu-variant", act, "tail"])
    yield value("feedforward/relu-002", "feedforward",
                "activation='relu', a single token (rank-1 x), D = 6 and F = 3 (F < D).",
                inputs={"x": rng.uniform((6,))}, params=ffn_params(rng, 6, 3),
                flags=["rank-1", "narrow"])
    yield value("feedforward/gelu-002", "feedforward",
                "activation='gelu', a (4, 4) input in [-1, 1] with W1 in [-2, 2]: "
                "pre-activations in about [-1.8, 1.3], where GELU and ReLU differ most.",
                inputs={"x": rng.uniform((4, 4), -1, 1)}, attributes={"activation": "gelu"},
                params=ffn_params(rng, 4, 6, scale=2.0), flags=["gelu"])
    yield value("feedforward/bias-001", "feedforward",
                "Zero input: y = act(b1) W2 + b2, which checks both biases and that the "
                "activation sits between the two linear maps.",
                inputs={"x": np.zeros((2, 4))}, attributes={"activation": "relu"},
                params=ffn_params(rng, 4, 8), flags=["bias", "edge"])

    x = rng.uniform((2, 4))
    good = ffn_params(rng, 4, 8)
    yield error("feedforward/w1-shape-001", "feedforward", "w1 of shape (5, 8) for D = 4.",
                inputs={"x": x}, params={**good, "w1": np.zeros((5, 8))},
                error="ParameterError", mentions=["w1", "(5, 8)"])
    yield error("feedforward/w2-shape-001", "feedforward",
                "w2 of shape (7, 4) where w1 gives F = 8.",
                inputs={"x": x}, params={**good, "w2": np.zeros((7, 4))},
                error="ParameterError", mentions=["w2", "(7, 4)"])
    yield error("feedforward/b1-missing-001", "feedforward",
                "b1 is missing: both biases are required parameters.",
                inputs={"x": x}, params={k: v for k, v in good.items() if k != "b1"},
                error="ParameterError", mentions=["b1"])
    yield error("feedforward/bad-activation-001", "feedforward",
                "An unknown activation ('swish').",
                inputs={"x": x}, attributes={"activation": "swish"}, params=good,
                error="ConfigError", mentions=["activation", "swish"])
    yield error("feedforward/scalar-001", "feedforward", "A rank-0 input.",
                inputs={"x": np.array(1.0)}, params=good, error="ShapeError", mentions=["x"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("feedforward/defaults-001", "feedforward",
                "activation left out (default relu): a (2, 3, 4) input, D = 4, F = 8; a GELU "
                "default fails.",
                inputs={"x": rd.uniform((2, 3, 4))}, params=ffn_params(rd, 4, 8),
                flags=["defaults"], omit_defaults=True)


def grad_cases(r):
    def p(d, f):
        return {"w1": r.weights((d, f)), "b1": r.weights((f,), 0.5),
                "w2": r.weights((f, d)), "b2": r.weights((d,), 0.5)}

    for n, act in enumerate(["relu", "gelu", "gelu_tanh"], 1):
        yield gradient(f"feedforward/grad-00{n}", "feedforward",
                       f"activation='{act}', a (2, 3, 4) input, D = 4, F = 8: dW1 = x^T dh and "
                       f"dW2 = a^T dy summed over every token (a wrong transpose fails: D != F), "
                       f"dh = (dy W2^T) act'(h).",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"activation": act},
                       params=p(4, 8), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", act])
    yield gradient("feedforward/grad-004", "feedforward",
                   "activation='gelu', a single token (rank-1 x), D = 6, F = 3.",
                   inputs={"x": r.uniform((6,))}, attributes={"activation": "gelu"},
                   params=p(6, 3), cotangents={"y": r.uniform((6,))},
                   flags=["gradient", "gelu", "rank-1"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    p = {"w1": r.weights((4, 6)), "b1": r.weights((6,), 0.5), "w2": r.weights((6, 4)),
         "b2": r.weights((4,), 0.5)}
    p["b1"][[0, 2, 5]] = 0.0
    x = r.uniform((2, 3, 4))
    x[0, 1] = 0.0  # token (0, 1): h = b1, exactly 0 at units 0, 2, 5
    x[1, 2] = 0.0
    yield gradient("feedforward/grad-005", "feedforward",
                   "activation='relu' with pre-activations exactly 0: tokens (0, 1) and (1, 2) "
                   "are zero vectors and b1 is 0 at units 0, 2 and 5, so h = 0 there. The "
                   "convention is relu'(0) = 0 (torch, TensorFlow and JAX): db1 and dx get no "
                   "gradient through those units; relu'(0) = 1 or 1/2 fails.",
                   inputs={"x": x}, attributes={"activation": "relu"}, params=p,
                   cotangents={"y": r.uniform((2, 3, 4))}, flags=["gradient", "relu", "zeros"])
    yield gradient("feedforward/grad-006", "feedforward",
                   "activation left out (default 'relu') on a (2, 3, 4) input, F = 8: a GELU "
                   "default fails.",
                   inputs={"x": r.uniform((2, 3, 4))},
                   params={"w1": r.weights((4, 8)), "b1": r.weights((8,), 0.5),
                           "w2": r.weights((8, 4)), "b2": r.weights((4,), 0.5)},
                   cotangents={"y": r.uniform((2, 3, 4))}, flags=["gradient", "defaults"],
                   omit_defaults=True)
