"""gru: a GRU over a (B, T, I) sequence; outputs (B, T, H) and the last state."""

import numpy as np

from ..oracle.gru import gru as oracle
from ._build import Component, Fn, error, gradient, value
from .gru_cell import gru_grad_params, gru_params

COMPONENT = Component("gru", {
    "gru": Fn(module="rnn", inputs=["x", "h0"], optional=["h0"], params=True,
              returns=["outputs", "h_last"], oracle=oracle),
})


def cases(rng):
    yield value("gru/basic-001", "gru",
                "B=2, T=5, I=8, H=8, h0 given: five chained steps.",
                inputs={"x": rng.uniform((2, 5, 8), -1, 1), "h0": rng.uniform((2, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), flags=["basic", "gate-order", "reset-after"])
    yield value("gru/zero-h0-001", "gru",
                "h0 absent: the initial state is zeros. T=6, I=12, H=10.",
                inputs={"x": rng.uniform((2, 6, 12), -1, 1)},
                params=gru_params(rng, 12, 10), flags=["default-state", "layout"])
    yield value("gru/single-step-001", "gru",
                "T=1: outputs[:, 0] == h_last == gru_cell(x[:, 0], h0).",
                inputs={"x": rng.uniform((3, 1, 8), -1, 1), "h0": rng.uniform((3, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), flags=["single-step"])
    yield value("gru/long-001", "gru",
                "T=12 with weights up to 1.5: errors that compound over time (gate order, "
                "interpolation) grow, and float32/bfloat16 rounding must stay within tolerance.",
                inputs={"x": rng.uniform((2, 12, 8), -1, 1), "h0": rng.uniform((2, 8), -0.5, 0.5)},
                params=gru_params(rng, 8, 8, scale=1.5), flags=["long", "accumulation"])
    yield value("gru/no-bias-001", "gru",
                "No biases (zero by default); h0 near +-1.",
                inputs={"x": rng.uniform((2, 4, 8), -1, 1),
                        "h0": np.tile(np.array([0.9375, -0.9375]), (2, 4))},
                params=gru_params(rng, 8, 8, biases=False), flags=["optional-params"])
    yield value("gru/hidden-bias-001", "gru",
                "b_hn = 1.5 only, x = 0 at every step: only the reset-after form keeps r * b_hn.",
                inputs={"x": np.zeros((2, 3, 8)), "h0": rng.uniform((2, 8), -0.9, 0.9)},
                params={**gru_params(rng, 8, 8, biases=False), "b_ih": np.zeros(24),
                        "b_hh": np.concatenate([np.zeros(16), np.full(8, 1.5)])},
                flags=["reset-after", "bias"])
    yield value("gru/batch-001", "gru",
                "B=4, T=3, I=8, H=16: rows are independent.",
                inputs={"x": rng.uniform((4, 3, 8), -1, 1), "h0": rng.uniform((4, 16), -0.9, 0.9)},
                params=gru_params(rng, 8, 16, scale=0.5), flags=["batch"])
    yield error("gru/bad-w-ih-001", "gru",
                "x has I=6 but w_ih is (8, 24): ParameterError naming w_ih and both shapes.",
                inputs={"x": rng.uniform((2, 3, 6), -1, 1)}, params=gru_params(rng, 8, 8),
                error="ParameterError", mentions=["w_ih", "(8, 24)"])
    yield error("gru/bad-h0-001", "gru", "h0 of width 6 for H=8 (from w_hh).",
                inputs={"x": rng.uniform((2, 3, 8), -1, 1), "h0": rng.uniform((2, 6), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), error="ShapeError", mentions=["h0", "(2, 6)"])
    yield error("gru/rank-001", "gru", "x of rank 2: a sequence is (B, T, I).",
                inputs={"x": rng.uniform((2, 8), -1, 1)}, params=gru_params(rng, 8, 8),
                error="ShapeError", mentions=["x", "(2, 8)"])
    yield error("gru/bad-w-hh-001", "gru", "w_hh of shape (8, 8) is not (H, 3H).",
                inputs={"x": rng.uniform((2, 3, 8), -1, 1)},
                params={**gru_params(rng, 8, 8), "w_hh": rng.weights((8, 8))},
                error="ParameterError", mentions=["w_hh", "(8, 8)"])
    yield error("gru/bad-h0-batch-001", "gru", "h0 with batch 3 for x with batch 2.",
                inputs={"x": rng.uniform((2, 3, 8), -1, 1), "h0": rng.uniform((3, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), error="ShapeError", mentions=["h0", "(3, 8)"])


def grad_cases(r):
    yield gradient("gru/grad-001", "gru",
                   "Backpropagation through time: B = 2, T = 4, I = 3, H = 3, h0 given, "
                   "cotangents on every output and on h_last; dW = sum over the steps, dh0 the "
                   "state gradient after the last backward step.",
                   inputs={"x": r.uniform((2, 4, 3), -1, 1), "h0": r.uniform((2, 3), -0.9, 0.9)},
                   params=gru_grad_params(r, 3, 3),
                   cotangents={"outputs": r.uniform((2, 4, 3)), "h_last": r.uniform((2, 3))},
                   flags=["gradient", "accumulation", "initial-state"])
    yield gradient("gru/grad-002", "gru",
                   "h0 absent (zeros, no gradient), cotangent on h_last only: every step's "
                   "gradient reaches back only through the state; I = 2, H = 4, T = 3.",
                   inputs={"x": r.uniform((2, 3, 2), -1, 1)}, params=gru_grad_params(r, 2, 4),
                   cotangents={"h_last": r.uniform((2, 4))},
                   flags=["gradient", "default-state"])
    yield gradient("gru/grad-003", "gru",
                   "Cotangent on the outputs only, no biases, T = 5, B = 1: the outputs' "
                   "cotangent enters at each step and adds to the carried state gradient.",
                   inputs={"x": r.uniform((1, 5, 3), -1, 1), "h0": r.uniform((1, 2), -0.9, 0.9)},
                   params=gru_grad_params(r, 3, 2, biases=False),
                   cotangents={"outputs": r.uniform((1, 5, 2))},
                   flags=["gradient", "optional-params", "long"])
    yield gradient("gru/grad-004", "gru",
                   "T = 1: the same as gru_cell's gradient with dh' = doutputs[:, 0] + dh_last.",
                   inputs={"x": r.uniform((2, 1, 3), -1, 1), "h0": r.uniform((2, 3), -0.9, 0.9)},
                   params=gru_grad_params(r, 3, 3),
                   cotangents={"outputs": r.uniform((2, 1, 3)), "h_last": r.uniform((2, 3))},
                   flags=["gradient", "single-step"])
