"""gated_feedforward: y = (act(x W_gate) * (x W_up)) W_down, act in silu (SwiGLU), gelu and
gelu_tanh (GeGLU), no biases (Shazeer 2020; LLaMA)."""

import numpy as np

from ..oracle.gated_feedforward import gated_feedforward as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("gated_feedforward", {
    "gated_feedforward": Fn(module="feedforward", inputs=["x"], attributes={"activation": "silu"},
                            params=True, returns=["y"], oracle=oracle),
})


def glu_params(rng, d, f, scale=1.0):
    return {"w_gate": rng.weights((d, f), scale), "w_up": rng.weights((d, f), scale),
            "w_down": rng.weights((f, d), scale)}


def tail_params(rng, d, f):
    """Gate pre-activations x W_gate in [-2.5, -2] (x in multiples of 1/4 in [-1, 1] plus a
    constant feature 1 carrying -2.25, W_gate's other rows in {-1/16, 0, 1/16}), up
    projections of x all positive (W_up of positive sixteenths on the constant feature) and
    W_down of positive integers, so nothing cancels: every unit sits in GELU's left tail,
    where erf-GELU and tanh-GELU differ by 0.2-3%."""
    w_gate = rng.integers(-1, 2, (d, f)).astype(np.float64) / 16
    w_gate[0] = -2.25
    w_up = rng.integers(-1, 2, (d, f)).astype(np.float64) / 16
    w_up[0] = 1.0
    return {"w_gate": w_gate, "w_up": w_up,
            "w_down": rng.integers(1, 9, (f, d)).astype(np.float64)}


def tail_input(rng, n, d):
    """(n, d) multiples of 1/4 in [-1, 1] with feature 0 fixed at 1 (the constant feature)."""
    x = rng.integers(-4, 5, (n, d)).astype(np.float64) / 4
    x[:, 0] = 1.0
    return x


HALF_NOTE = ("erf-GELU and tanh-GELU differ by at most ~5e-4 (see feedforward): below what "
             "float16 and bfloat16 resolve, so this vector is for float64 and float32 only")

NAMES = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu-tanh"}


def cases(rng):
    for act, name in NAMES.items():
        yield value(f"gated_feedforward/{name}-001", "gated_feedforward",
                    f"activation='{act}': a (2, 3, 4) input in [-2, 2], D = 4, F = 8, weights "
                    "in [-1, 1], so gate pre-activations straddle 0 and outputs have both "
                    "signs; swapping W_gate and W_up, or dropping the gate, changes y.",
                    inputs={"x": rng.uniform((2, 3, 4))}, attributes={"activation": act},
                    params=glu_params(rng, 4, 8), flags=["basic", act])
    yield value("gated_feedforward/swiglu-002", "gated_feedforward",
                "The default activation (silu), a single token (rank-1 x), D = 6 and F = 3 "
                "(F < D).",
                inputs={"x": rng.uniform((6,))}, params=glu_params(rng, 6, 3),
                flags=["rank-1", "narrow"])
    yield value("gated_feedforward/swiglu-batch-001", "gated_feedforward",
                "activation='silu' on a rank-4 (2, 2, 3, 4) input, D = 4, F = 6, W_gate in "
                "[-2, 2]: gate pre-activations in about [-5, 4], where silu(h) = h sigmoid(h) "
                "differs from sigmoid(h) (GLU), relu(h) and gelu(h).",
                inputs={"x": rng.uniform((2, 2, 3, 4), -1.5, 1.5)},
                attributes={"activation": "silu"},
                params={**glu_params(rng, 4, 6), "w_gate": rng.weights((4, 6), 2.0)},
                flags=["batch", "silu"])
    for act, name in [("gelu", "geglu"), ("gelu_tanh", "geglu-tanh")]:
        yield value(f"gated_feedforward/{name}-tail-001", "gated_feedforward",
                    f"activation='{act}' with every gate pre-activation in [-2.5, -2] (GELU's "
                    "left tail), up projections and W_down positive: erf-GELU and tanh-GELU "
                    "differ there by 0.2-3%, so using one for the other fails at float64 and "
                    "float32.",
                    inputs={"x": tail_input(rng, 3, 4)}, attributes={"activation": act},
                    params=tail_params(rng, 4, 8), dtypes=["float64", "float32"],
                    dtype_note=HALF_NOTE, flags=["gelu-variant", act, "tail"])
    yield value("gated_feedforward/zero-001", "gated_feedforward",
                "A zero row gives a zero row (no biases), beside an ordinary row.",
                inputs={"x": np.stack([np.zeros(4), rng.uniform((4,))])},
                params=glu_params(rng, 4, 8), flags=["zero", "edge"])

    x = rng.uniform((2, 4))
    good = glu_params(rng, 4, 8)
    yield error("gated_feedforward/w-up-shape-001", "gated_feedforward",
                "w_up of shape (4, 6) where w_gate gives F = 8.",
                inputs={"x": x}, params={**good, "w_up": np.zeros((4, 6))},
                error="ParameterError", mentions=["w_up", "(4, 6)"])
    yield error("gated_feedforward/w-gate-shape-001", "gated_feedforward",
                "w_gate of shape (5, 8) for D = 4.",
                inputs={"x": x}, params={**good, "w_gate": np.zeros((5, 8))},
                error="ParameterError", mentions=["w_gate", "(5, 8)"])
    yield error("gated_feedforward/w-down-shape-001", "gated_feedforward",
                "w_down of shape (8, 5) for D = 4.",
                inputs={"x": x}, params={**good, "w_down": np.zeros((8, 5))},
                error="ParameterError", mentions=["w_down", "(8, 5)"])
    yield error("gated_feedforward/w-up-missing-001", "gated_feedforward",
                "w_up is missing.",
                inputs={"x": x}, params={k: v for k, v in good.items() if k != "w_up"},
                error="ParameterError", mentions=["w_up"])
    yield error("gated_feedforward/bad-activation-001", "gated_feedforward",
                "An unknown activation ('relu': ReGLU is not one of the spec's variants).",
                inputs={"x": x}, attributes={"activation": "relu"}, params=good,
                error="ConfigError", mentions=["activation", "relu"])
    yield error("gated_feedforward/scalar-001", "gated_feedforward", "A rank-0 input.",
                inputs={"x": np.array(1.0)}, params=good, error="ShapeError", mentions=["x"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("gated_feedforward/defaults-001", "gated_feedforward",
                "activation left out (default silu, SwiGLU): a (2, 3, 4) input in [-2, 2], "
                "D = 4, F = 8; a GELU (GeGLU) default fails.",
                inputs={"x": rd.uniform((2, 3, 4))}, params=glu_params(rd, 4, 8),
                flags=["defaults"], omit_defaults=True)


def grad_cases(r):
    def p(d, f):
        return {"w_gate": r.weights((d, f)), "w_up": r.weights((d, f)),
                "w_down": r.weights((f, d))}

    for n, act in enumerate(["silu", "gelu", "gelu_tanh"], 1):
        yield gradient(f"gated_feedforward/grad-00{n}", "gated_feedforward",
                       f"activation='{act}', x (2, 3, 4), D = 4, F = 6: dg = (dy W_down^T) u "
                       f"act'(g) and du = (dy W_down^T) act(g), dx = dg W_gate^T + du W_up^T; "
                       f"dropping either path into dx, or act'(g), fails.",
                       inputs={"x": r.uniform((2, 3, 4))}, attributes={"activation": act},
                       params=p(4, 6), cotangents={"y": r.uniform((2, 3, 4))},
                       flags=["gradient", act])
    yield gradient("gated_feedforward/grad-004", "gated_feedforward",
                   "activation='silu', a single token (rank-1 x), D = 5, F = 3.",
                   inputs={"x": r.uniform((5,))}, params=p(5, 3),
                   cotangents={"y": r.uniform((5,))}, flags=["gradient", "silu", "rank-1"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("gated_feedforward/grad-005", "gated_feedforward",
                   "activation left out (default 'silu'), x (2, 3, 4), F = 6: a GELU default "
                   "fails.",
                   inputs={"x": r.uniform((2, 3, 4))},
                   params={"w_gate": r.weights((4, 6)), "w_up": r.weights((4, 6)),
                           "w_down": r.weights((6, 4))},
                   cotangents={"y": r.uniform((2, 3, 4))}, flags=["gradient", "defaults"],
                   omit_defaults=True)
