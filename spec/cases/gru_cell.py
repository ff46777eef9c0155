"""gru_cell: one GRU step, PyTorch/cuDNN gates (r, z, n; reset after the hidden matmul)."""

import numpy as np

from ..oracle.gru_cell import gru_cell as oracle
from ._build import Component, Fn, error, gradient, value

COMPONENT = Component("gru_cell", {
    "gru_cell": Fn(module="rnn", inputs=["x", "h"], params=True, returns=["h"], oracle=oracle),
})


def gru_params(rng, i, h, scale=1.0, biases=True):
    """w_ih (I, 3H), w_hh (H, 3H), b_ih, b_hh (3H,): gate blocks r | z | n."""
    p = {"w_ih": rng.weights((i, 3 * h), scale), "w_hh": rng.weights((h, 3 * h), scale)}
    if biases:
        p["b_ih"] = rng.weights((3 * h,), scale)
        p["b_hh"] = rng.weights((3 * h,), scale)
    return p


def cases(rng):
    yield value("gru_cell/basic-001", "gru_cell",
                "B=2, I=8, H=8 with all four parameters; x in [-1, 1], h in [-0.9, 0.9]. Gate "
                "order (z, r, n), reset before the hidden matmul and the swapped interpolation "
                "z n + (1 - z) h all fail.",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), flags=["basic", "gate-order", "reset-after"])
    yield value("gru_cell/io-widths-001", "gru_cell",
                "I=12 differs from H=8 and B=3: w_ih in torch's (3H, I) weight_ih_l0 layout, or "
                "w_ih and w_hh swapped, cannot be used without a transpose.",
                inputs={"x": rng.uniform((3, 12), -1, 1), "h": rng.uniform((3, 8), -0.9, 0.9)},
                params=gru_params(rng, 12, 8), flags=["layout", "batch"])
    yield value("gru_cell/no-bias-001", "gru_cell",
                "No b_ih, no b_hh: absent biases are zero (torch bias=False, Keras "
                "use_bias=False).",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": rng.uniform((2, 10), -0.9, 0.9)},
                params=gru_params(rng, 8, 10, biases=False), flags=["optional-params"])
    yield value("gru_cell/hidden-bias-001", "gru_cell",
                "Only the n block of b_hh is nonzero (b_hn = 1.5) and x = 0: the result depends on "
                "r * b_hn, so folding b_hn into b_in (reset_after=False, or a single bias) fails.",
                inputs={"x": np.zeros((2, 8)), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params={**gru_params(rng, 8, 8, biases=False),
                        "b_ih": np.zeros(24),
                        "b_hh": np.concatenate([np.zeros(16), np.full(8, 1.5)])},
                flags=["reset-after", "bias"])
    yield value("gru_cell/zero-state-001", "gru_cell",
                "h = 0 (the first step of a sequence): h' = (1 - z) n with r only acting on b_hn.",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": np.zeros((2, 8))},
                params=gru_params(rng, 8, 8), flags=["zero-state"])
    yield value("gru_cell/saturated-001", "gru_cell",
                "Weights up to 2 and x up to 4: the candidate's pre-activation reaches 11.6, "
                "so tanh saturates (11 of 16 values within 1e-3 of +-1) and a tanh through "
                "exp(2a) overflows float16 (65504 = exp(11.09)) for 6 of them; the sigmoid "
                "gates' pre-activations stay within 10.2 (r from 5e-5 to 0.9995, z from 1.5e-4 "
                "to 0.99996), so exp(-a) stays below float16's maximum.",
                inputs={"x": rng.uniform((2, 8), -4, 4), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8, scale=2.0), flags=["saturation", "stability"])
    yield value("gru_cell/state-gate-001", "gru_cell",
                "h close to +-1 and large |h - n|: the interpolation h' = (1 - z) n + z h is "
                "distinguished from z n + (1 - z) h by a wide margin.",
                inputs={"x": rng.uniform((4, 8), -1, 1),
                        "h": np.tile(np.array([0.96875, -0.96875]), (4, 4))},
                params=gru_params(rng, 8, 8), flags=["interpolation", "batch"])
    yield error("gru_cell/bad-w-ih-001", "gru_cell",
                "x has I=6 but w_ih is (8, 24): ParameterError naming w_ih and both shapes.",
                inputs={"x": rng.uniform((2, 6), -1, 1), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), error="ParameterError",
                mentions=["w_ih", "(8, 24)"])
    yield error("gru_cell/bad-h-001", "gru_cell", "h of width 6 for H=8 (from w_hh).",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": rng.uniform((2, 6), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), error="ShapeError", mentions=["h", "(2, 6)"])
    yield error("gru_cell/bad-w-hh-001", "gru_cell",
                "w_hh of shape (8, 16) is not (H, 3H).",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params={**gru_params(rng, 8, 8), "w_hh": rng.weights((8, 16))},
                error="ParameterError", mentions=["w_hh", "(8, 16)"])
    yield error("gru_cell/rank-001", "gru_cell", "x of rank 3 (a sequence) given to the cell.",
                inputs={"x": rng.uniform((2, 3, 8), -1, 1), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params=gru_params(rng, 8, 8), error="ShapeError", mentions=["x", "(2, 3, 8)"])
    yield error("gru_cell/missing-w-hh-001", "gru_cell", "w_hh is missing.",
                inputs={"x": rng.uniform((2, 8), -1, 1), "h": rng.uniform((2, 8), -0.9, 0.9)},
                params={"w_ih": rng.weights((8, 24))}, error="ParameterError",
                mentions=["w_hh"])


def gru_grad_params(r, i, h, biases=True, scale=1.0):
    p = {"w_ih": r.weights((i, 3 * h), scale), "w_hh": r.weights((h, 3 * h), scale)}
    if biases:
        p.update(b_ih=r.weights((3 * h,), scale), b_hh=r.weights((3 * h,), scale))
    return p


def grad_cases(r):
    yield gradient("gru_cell/grad-001", "gru_cell",
                   "B = 2, I = 3, H = 4, all four parameters: dx, dh and every weight; the "
                   "reset gate's gradient dr = da_n (h W_hn + b_hn) (reset after the hidden "
                   "matmul) and dW_hn = h^T (r da_n).",
                   inputs={"x": r.uniform((2, 3), -1, 1), "h": r.uniform((2, 4), -0.9, 0.9)},
                   params=gru_grad_params(r, 3, 4), cotangents={"h": r.uniform((2, 4))},
                   flags=["gradient", "reset-after", "gate-order", "layout"])
    yield gradient("gru_cell/grad-002", "gru_cell",
                   "No biases, B = 3, I = 5, H = 2: the gradients of the absent biases are not "
                   "part of the result.",
                   inputs={"x": r.uniform((3, 5), -1, 1), "h": r.uniform((3, 2), -0.9, 0.9)},
                   params=gru_grad_params(r, 5, 2, biases=False), cotangents={"h": r.uniform((3, 2))},
                   flags=["gradient", "optional-params"])
    p = gru_grad_params(r, 2, 3)
    p["b_hh"][6:] = 1.5
    yield gradient("gru_cell/grad-003", "gru_cell",
                   "b_hn = 1.5 and weights up to 1: the r term of the n gate (r (h W_hn + b_hn)) "
                   "carries a large gradient into b_hh's n block (r da_n) and the reset gate.",
                   inputs={"x": r.uniform((2, 2), -1, 1), "h": r.uniform((2, 3), -0.9, 0.9)},
                   params=p, cotangents={"h": r.uniform((2, 3))},
                   flags=["gradient", "reset-after"])
    yield gradient("gru_cell/grad-004", "gru_cell",
                   "B = 1, I = H = 3, weights up to 1.5 (saturating gates).",
                   inputs={"x": r.uniform((1, 3), -1, 1), "h": r.uniform((1, 3), -0.9, 0.9)},
                   params=gru_grad_params(r, 3, 3, scale=1.5), cotangents={"h": r.uniform((1, 3))},
                   flags=["gradient", "saturation"])
