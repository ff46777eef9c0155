"""attention_entropy: H = -sum w ln w along an axis, in nats, 0 ln 0 = 0."""

import numpy as np

from ..oracle.attention_entropy import attention_entropy as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("attention_entropy", {
    "attention_entropy": Fn(module="attention", inputs=["weights"], attributes={"axis": -1},
                            returns=["entropy"], oracle=oracle),
})


def cases(rng):
    yield value("attention_entropy/basic-001", "attention_entropy",
                "Rows of softmax-like weights (3, 4) summing to 1; natural log (log2 is 1.44x).",
                inputs={"weights": np.array([[0.5, 0.25, 0.125, 0.125],
                                             [0.25, 0.25, 0.25, 0.25],
                                             [0.75, 0.0625, 0.0625, 0.125]])},
                flags=["basic", "log-base"])
    yield value("attention_entropy/zeros-001", "attention_entropy",
                "Zero weights count as 0 ln 0 = 0: a one-hot row has H = 0, a fully masked "
                "(all-zero) row has H = 0, [0.5, 0, 0.5] has ln 2.",
                inputs={"weights": np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0],
                                             [0.5, 0.0, 0.5]])},
                flags=["zeros", "fully-masked"])
    yield value("attention_entropy/axis-001", "attention_entropy",
                "axis = 0 of a (4, 3) matrix whose columns sum to 1; the result has shape (3,).",
                inputs={"weights": np.array([[0.5, 0.25, 0.0625], [0.25, 0.25, 0.0625],
                                             [0.125, 0.25, 0.125], [0.125, 0.25, 0.75]])},
                attributes={"axis": 0}, flags=["axis", "wrong-axis"])
    yield value("attention_entropy/unnormalised-001", "attention_entropy",
                "Rows that do not sum to 1 are taken as they are (no renormalisation): "
                "[2, 0.5] gives -2 ln 2 + 0.5 ln 2 = -1.5 ln 2.",
                inputs={"weights": np.array([[2.0, 0.5], [0.25, 0.25]])},
                flags=["unnormalised"])
    w = rng.uniform((2, 3, 5), 0.0, 1.0)
    yield value("attention_entropy/batch-001", "attention_entropy",
                "A (2, 3, 5) batch of non-negative weights in [0, 1], last axis: shape (2, 3).",
                inputs={"weights": w}, flags=["batch"])
    yield value("attention_entropy/batch-002", "attention_entropy",
                "axis = -2 of a (2, 3, 4) array of non-negative weights: shape (2, 4).",
                inputs={"weights": rng.uniform((2, 3, 4), 0.0, 1.0)}, attributes={"axis": -2},
                flags=["batch", "axis", "wrong-axis"])
    yield value("attention_entropy/tiny-001", "attention_entropy",
                "Very small weights (2**-20, 2**-14) next to large ones: their terms "
                "w ln w are small but not 0.",
                inputs={"weights": np.array([[2.0**-20, 1.0 - 2.0**-8, 2.0**-14]])},
                flags=["tiny"])
    yield value("attention_entropy/single-001", "attention_entropy",
                "A length-1 axis: H = -w ln w for each single weight.",
                inputs={"weights": np.array([[1.0], [0.5], [0.0]])}, flags=["single-key"])

    yield error("attention_entropy/negative-001", "attention_entropy",
                "A negative weight is outside the domain.",
                inputs={"weights": np.array([[0.5, -0.25, 0.75]])},
                error="DomainError", mentions=["weights"])
    yield error("attention_entropy/scalar-001", "attention_entropy",
                "A rank-0 input has no axis.", inputs={"weights": np.array(0.5)},
                error="ShapeError", mentions=["weights"])
    yield error("attention_entropy/bad-axis-001", "attention_entropy", "axis 2 on rank 2.",
                inputs={"weights": np.array([[0.5, 0.5]])}, attributes={"axis": 2},
                error="ConfigError", mentions=["axis"])
    yield error("attention_entropy/dtype-001", "attention_entropy", "Integer weights.",
                inputs={"weights": np.array([[1, 0]])}, error="DTypeError",
                mentions=["weights"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from study_cases(Rng(f"{COMPONENT.id}/study"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    rows = np.array([[0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25],
                     [0.625, 0.125, 0.125, 0.125], [0.375, 0.375, 0.1875, 0.0625]])
    w = rows[rd.integers(0, 4, (2, 3))]  # (2, 3, 4), rows summing to 1 along the last axis
    yield value("attention_entropy/defaults-001", "attention_entropy",
                "axis left out (default -1) on (2, 3, 4) weights whose last axis sums to 1.",
                inputs={"weights": w}, flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    Rng(f"{COMPONENT.id}/missed")  # no random inputs
    yield error("attention_entropy/inf-001", "attention_entropy",
                "An infinite weight is outside the domain (it is not a distribution).",
                inputs={"weights": np.array([[0.5, np.inf, 0.25]])},
                error="DomainError", mentions=["weights"])


def grad_cases(r):
    yield gradient("attention_entropy/grad-001", "attention_entropy",
                   "Positive (3, 5) weights in [2^-6, 1]: dw = -dH (ln w + 1); leaving out "
                   "the + 1 (the derivative of ln w times w) fails.",
                   inputs={"weights": r.uniform((3, 5), 2.0**-6, 1)},
                   cotangents={"entropy": r.uniform((3,))}, flags=["gradient", "basic"])
    yield gradient("attention_entropy/grad-002", "attention_entropy",
                   "axis = 0 on (4, 3) weights: each column's cotangent scales its column.",
                   inputs={"weights": r.uniform((4, 3), 2.0**-6, 1)}, attributes={"axis": 0},
                   cotangents={"entropy": r.uniform((3,))}, flags=["gradient", "axis"])
    w = r.uniform((2, 6), 2.0**-6, 1)
    w[0, [1, 4]] = 0
    w[1, 0] = 0
    yield gradient("attention_entropy/grad-003", "attention_entropy",
                   "Zero weights (as after a mask): 0 ln 0 = 0 and the gradient there is 0 "
                   "(the one-sided derivative is +inf; torch's and TensorFlow's where-guarded "
                   "entropy give 0); -(ln w + 1) unguarded gives inf.",
                   inputs={"weights": w}, cotangents={"entropy": r.uniform((2,))},
                   flags=["gradient", "zeros"])
    yield gradient("attention_entropy/grad-004", "attention_entropy",
                   "A (2, 2, 4) batch of small weights in [2^-6, 2^-3]: |ln w| up to 4.2.",
                   inputs={"weights": r.uniform((2, 2, 4), 2.0**-6, 2.0**-3)},
                   cotangents={"entropy": r.uniform((2, 2))}, flags=["gradient", "batch", "tiny"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def study_cases(rng):
    cols = np.array([[0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25],
                     [0.625, 0.125, 0.125, 0.125]])
    w = np.stack([cols[rng.integers(0, 3, (4,))].T for _ in range(2)])  # (2, 4, 4), axis 1 sums to 1
    yield value("attention_entropy/axis-002", "attention_entropy",
                "axis = 1 (positive, not the last) of (2, 4, 4) weights whose axis 1 sums to "
                "1: the result is (2, 4); reducing the last axis, or normalising axis 1 as "
                "-1 - 1, fails.",
                inputs={"weights": w}, attributes={"axis": 1}, flags=["axis"])


def grad_study_cases(r):
    yield gradient("attention_entropy/grad-005", "attention_entropy",
                   "axis left out (default -1) on (2, 3, 4) weights in [2^-6, 1]: dw = -dH "
                   "(ln w + 1) along the last axis.",
                   inputs={"weights": r.uniform((2, 3, 4), 2.0**-6, 1)},
                   cotangents={"entropy": r.uniform((2, 3))}, flags=["gradient", "defaults"],
                   omit_defaults=True)
