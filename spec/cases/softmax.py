"""softmax: numerically stable, along an axis, with an optional boolean mask."""

import numpy as np

from ..oracle.softmax import softmax as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("softmax", {
    "softmax": Fn(module="attention", inputs=["x", "mask"], optional=["mask"],
                  attributes={"axis": -1}, returns=["y"], oracle=oracle),
})

F64_ONLY = ["float64"]


def cases(rng):
    yield value("softmax/basic-001", "softmax", "A (2, 5) batch of logits in [-2, 2], last axis.",
                inputs={"x": rng.uniform((2, 5))}, flags=["basic"])
    yield value("softmax/axis-001", "softmax",
                "Softmax along axis 0 of a (4, 3) matrix; an implementation that ignores "
                "`axis` and normalises rows fails.",
                inputs={"x": rng.uniform((4, 3), -3, 3)}, attributes={"axis": 0},
                flags=["axis", "wrong-axis"])
    yield value("softmax/large-001", "softmax",
                "Logits around +1000 (exact in bfloat16): exp overflows unless the max is "
                "subtracted first.",
                inputs={"x": np.array([[1000.0, 996.0, 992.0, 984.0],
                                       [1000.0, 1000.0, 1000.0, 1000.0]])},
                flags=["overflow", "stability"])
    yield value("softmax/large-002", "softmax",
                "Logits around -1000: exp underflows to 0 for every entry unless the max is "
                "subtracted first (0/0 = NaN).",
                inputs={"x": np.array([[-1000.0, -1004.0, -996.0, -1008.0]])},
                flags=["underflow", "stability"])
    yield value("softmax/tiny-diff-001", "softmax",
                "Logits 1 + k*2**-27 (differences ~7.5e-9): the weights differ from uniform in "
                "the 9th digit.",
                inputs={"x": 1.0 + np.array([[0.0, 1.0, 2.0, 3.0]]) * 2.0**-27},
                dtypes=F64_ONLY,
                dtype_note="differences of 2**-27 are not representable in float32, float16 "
                           "or bfloat16 around 1",
                flags=["precision"])
    yield value("softmax/mask-001", "softmax",
                "A (3, 5) mask with some False entries: masked weights are exactly 0 and the "
                "rest renormalise.",
                inputs={"x": rng.uniform((3, 5)),
                        "mask": np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 0]],
                                         dtype=bool)},
                flags=["mask", "mask-polarity"])
    yield value("softmax/fully-masked-001", "softmax",
                "The second row is fully masked: its weights are all 0 (filling with -1e9 "
                "gives a uniform row instead, and -inf gives NaN).",
                inputs={"x": rng.uniform((2, 4)),
                        "mask": np.array([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=bool)},
                flags=["mask", "fully-masked"])
    yield value("softmax/broadcast-001", "softmax",
                "x of shape (2, 3, 4) with a (2, 1, 4) mask that broadcasts over the middle axis.",
                inputs={"x": rng.uniform((2, 3, 4)),
                        "mask": np.array([[[1, 1, 0, 1]], [[0, 1, 1, 0]]], dtype=bool)},
                flags=["mask", "broadcast", "batch"])
    yield value("softmax/single-001", "softmax",
                "A length-1 axis: every weight is exactly 1, whatever the logit.",
                inputs={"x": np.array([[-1000.0], [0.5], [1000.0]])}, flags=["single-key"])
    yield value("softmax/neg-inf-001", "softmax",
                "Entries equal to -inf get weight 0 like masked ones; a row of only -inf is all 0.",
                inputs={"x": np.array([[0.5, -np.inf, 1.5], [-np.inf, -np.inf, -np.inf]])},
                flags=["non-finite", "fully-masked"])
    yield error("softmax/bad-axis-001", "softmax", "axis 2 on a rank-2 input.",
                inputs={"x": rng.uniform((2, 3))}, attributes={"axis": 2},
                error="ConfigError", mentions=["axis"])
    yield error("softmax/bad-mask-001", "softmax", "A (2, 4) mask for a (2, 3) input.",
                inputs={"x": rng.uniform((2, 3)), "mask": np.ones((2, 4), dtype=bool)},
                error="ShapeError", mentions=["mask", "(2, 4)"])
    yield error("softmax/scalar-001", "softmax", "A rank-0 input has no axis to normalise.",
                inputs={"x": np.array(0.5)}, error="ShapeError", mentions=["x"])
    yield error("softmax/int-mask-001", "softmax",
                "An integer 0/1 mask is refused: masks are boolean (True = may attend), so "
                "polarity is never guessed.",
                inputs={"x": rng.uniform((2, 3)), "mask": np.ones((2, 3), dtype=np.int64)},
                error="DTypeError", mentions=["mask"])
    yield from defaults_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("softmax/defaults-001", "softmax",
                "axis left out (default -1) on a (2, 3, 4) input: a default axis of 0 or 1 "
                "normalises along another axis.",
                inputs={"x": rd.uniform((2, 3, 4), -3, 3)}, flags=["defaults"],
                omit_defaults=True)


def _edges(rng):
    """Non-finite scores and an empty axis (appended with their own number stream)."""
    inf, nan = np.inf, np.nan
    x = rng.uniform((3, 5))
    x[0, [1, 3]] = inf  # two +inf: 1/2 each, the rest 0
    x[1, 2], x[1, 4] = inf, -inf  # one +inf: 1 there
    x[2, 0] = inf  # masked out below: the rest is an ordinary softmax
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=bool)
    yield value("softmax/pos-inf-001", "softmax",
                "+inf entries: the kept +inf entries share the row equally and every other "
                "entry gets 0 (the limit; torch.softmax gives NaN); a masked +inf changes nothing.",
                inputs={"x": x, "mask": mask}, flags=["pos-inf", "non-finite", "mask"])
    x = rng.uniform((3, 4))
    x[0, 1] = nan  # kept: the row's kept weights are NaN, the masked one stays 0
    x[1, 2] = nan  # masked: an ordinary softmax of the other three
    x[2, 0], x[2, 3] = nan, inf  # NaN outranks +inf: NaN wins
    mask = np.array([[1, 1, 0, 1], [1, 1, 0, 1], [1, 1, 1, 1]], dtype=bool)
    yield value("softmax/nan-001", "softmax",
                "NaN in a kept entry makes every kept weight of its row NaN (masked entries stay "
                "0, even beside a +inf); a NaN in a masked entry never shows.",
                inputs={"x": x, "mask": mask}, flags=["nan-propagation", "masked-nan", "non-finite"])
    yield value("softmax/empty-001", "softmax",
                "A size-0 softmax axis: x (2, 0) gives y (2, 0) (a max over nothing must not "
                "raise).", inputs={"x": np.zeros((2, 0))}, flags=["empty-axis", "edge"])
    yield value("softmax/empty-002", "softmax",
                "Zero rows, axis 0 of size 0 with another axis of size 3: y (0, 3).",
                inputs={"x": np.zeros((0, 3))}, attributes={"axis": 0},
                flags=["empty-axis", "edge", "axis"])


def grad_cases(r):
    yield gradient("softmax/grad-001", "softmax",
                   "dx = y * (dy - sum(dy * y)) for a (3, 5) input: leaving out the subtraction "
                   "term (dx = y * dy) or using the Jacobian's diagonal only fails.",
                   inputs={"x": r.uniform((3, 5))}, cotangents={"y": r.uniform((3, 5))},
                   flags=["gradient", "basic"])
    mask = r.bools((2, 2, 6))
    mask[..., 0] = True
    yield gradient("softmax/grad-002", "softmax",
                   "A masked (2, 2, 6) input: masked entries have weight 0 and gradient 0, and "
                   "the row sum in the backward pass runs over the kept entries only.",
                   inputs={"x": r.uniform((2, 2, 6)), "mask": mask},
                   cotangents={"y": r.uniform((2, 2, 6))}, flags=["gradient", "mask"])
    yield gradient("softmax/grad-003", "softmax",
                   "axis=0 on a (4, 3) input: the backward sum runs along the softmax axis, "
                   "not the last one.",
                   inputs={"x": r.uniform((4, 3))}, attributes={"axis": 0},
                   cotangents={"y": r.uniform((4, 3))}, flags=["gradient", "axis"])
    yield gradient("softmax/grad-004", "softmax",
                   "Logits in [-8, 8] (weights near one-hot, some below 1e-6): the gradient of a "
                   "saturated row is tiny and must not come out as NaN or a large value.",
                   inputs={"x": r.uniform((2, 7), -8, 8, 2.0**-4)},
                   cotangents={"y": r.uniform((2, 7))}, flags=["gradient", "large-logits"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("softmax/grad-005", "softmax",
                   "axis and mask left out (the last axis, every entry kept) on a (2, 3, 4) "
                   "input: a default of axis 0 or 1 fails.",
                   inputs={"x": r.uniform((2, 3, 4))}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "defaults"], omit_defaults=True)
