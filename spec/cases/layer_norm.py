"""layer_norm: normalise the last axis, canonical (biased variance, eps inside the root)
and the Annotated Transformer's variant (unbiased std, eps added to the std)."""

import numpy as np

from ..oracle.layer_norm import layer_norm as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("layer_norm", {
    "layer_norm": Fn(module="norm", inputs=["x"], attributes={"eps": 1e-5, "variant": "canonical"},
                     params=True, returns=["y"], oracle=oracle),
})


def _gb(rng, d):
    """gamma around 1 (never near 0) and beta of either sign, so swapping them shows."""
    return {"gamma": 1.0 + rng.weights((d,), 0.5), "beta": rng.weights((d,), 1.0)}


def cases(rng):
    yield value("layer_norm/basic-001", "layer_norm",
                "A (2, 4) input in [-2, 2] with gamma around 1 and beta in [-1, 1]; D = 4 makes "
                "the unbiased variance 4/3 of the biased one (15% on y), and swapping gamma "
                "and beta or the two variants shows at every dtype.",
                inputs={"x": rng.uniform((2, 4))}, params=_gb(rng, 4),
                flags=["basic", "biased-variance", "gamma-beta"])
    yield value("layer_norm/batch-001", "layer_norm",
                "A (2, 3, 5) input: every (batch, position) row is normalised on its own over "
                "the last axis (normalising over another axis fails).",
                inputs={"x": rng.uniform((2, 3, 5), -3, 3)}, params=_gb(rng, 5),
                flags=["batch", "wrong-axis", "biased-variance"])
    yield value("layer_norm/eps-001", "layer_norm",
                "eps = 0.25 with inputs of small variance (about 0.05): eps inside the square "
                "root, sqrt(var + eps), differs from sqrt(var) + eps by about 15%, and an "
                "implementation that ignores the eps attribute is off by a factor of ~2.5.",
                inputs={"x": rng.uniform((3, 6), -0.375, 0.375)}, attributes={"eps": 0.25},
                params=_gb(rng, 6), flags=["eps", "eps-inside-sqrt", "eps-attribute"])
    yield value("layer_norm/small-var-001", "layer_norm",
                "Rows whose entries differ by multiples of 2**-6 (variance ~3e-4) with the "
                "default eps 1e-5: Keras's default epsilon 1e-3 (or any other hard-coded eps) "
                "changes y by a factor of ~2.",
                inputs={"x": 0.5 + np.array([[0.0, 1.0, 2.0, 3.0], [-2.0, 1.0, 0.0, 3.0]])
                        * 2.0**-6},
                params=_gb(rng, 4), flags=["eps", "default-eps", "keras-epsilon"])
    yield value("layer_norm/offset-001", "layer_norm",
                "Rows around 130 and 200 with small spread (even integers, means exact in "
                "bfloat16): the one-pass E[x^2] - E[x]^2 overflows when the squares are summed "
                "in float16 and cancels to 0 in bfloat16; subtract the mean first. In float32 "
                "every square and sum here is an integer below 2^24, so both formulas are exact.",
                inputs={"x": np.array([[128.0, 132.0, 136.0, 140.0],
                                       [200.0, 196.0, 210.0, 202.0]])},
                params=_gb(rng, 4), flags=["offset", "cancellation", "stability"])
    yield value("layer_norm/constant-001", "layer_norm",
                "A constant row (variance 0): y = beta exactly, finite because eps > 0; the "
                "second row is ordinary.",
                inputs={"x": np.array([[1.5, 1.5, 1.5, 1.5], [0.5, -1.0, 2.0, 0.25]])},
                params=_gb(rng, 4), flags=["zero-variance", "edge"])
    yield value("layer_norm/single-001", "layer_norm",
                "D = 1 (canonical): the centred value is 0, so y = beta whatever x.",
                inputs={"x": np.array([[3.0], [-0.5], [0.0]])}, params=_gb(rng, 1),
                flags=["single-feature", "edge"])
    yield value("layer_norm/vector-001", "layer_norm",
                "A rank-1 input (one token of width 8).",
                inputs={"x": rng.uniform((8,))}, params=_gb(rng, 8), flags=["rank-1"])
    yield value("layer_norm/annotated-001", "layer_norm",
                "variant='annotated' (the Annotated Transformer's LayerNorm): unbiased std "
                "over D = 4 (divide by 3), eps added to the std; the canonical formula differs "
                "by ~15%.",
                inputs={"x": rng.uniform((3, 4))}, attributes={"variant": "annotated"},
                params=_gb(rng, 4), flags=["variant", "annotated", "unbiased-std"])
    yield value("layer_norm/annotated-002", "layer_norm",
                "variant='annotated' with eps = 0.25 and small inputs: eps is added to the "
                "std, not inside the root, and the std is unbiased.",
                inputs={"x": rng.uniform((2, 5), -0.375, 0.375)},
                attributes={"variant": "annotated", "eps": 0.25}, params=_gb(rng, 5),
                flags=["variant", "annotated", "eps"])
    yield value("layer_norm/annotated-003", "layer_norm",
                "variant='annotated', a (2, 2, 6) batch with the default eps.",
                inputs={"x": rng.uniform((2, 2, 6), -3, 3)}, attributes={"variant": "annotated"},
                params=_gb(rng, 6), flags=["variant", "annotated", "batch"])

    x4 = rng.uniform((2, 4))
    yield error("layer_norm/gamma-shape-001", "layer_norm",
                "gamma of shape (5,) for inputs of width D = 4.",
                inputs={"x": x4}, params={"gamma": np.ones(5), "beta": np.zeros(4)},
                error="ParameterError", mentions=["gamma", "(5,)"])
    yield error("layer_norm/beta-missing-001", "layer_norm", "beta is missing from params.",
                inputs={"x": x4}, params={"gamma": np.ones(4)},
                error="ParameterError", mentions=["beta"])
    yield error("layer_norm/eps-zero-001", "layer_norm",
                "eps = 0: a constant row would divide by zero; eps must be > 0.",
                inputs={"x": x4}, attributes={"eps": 0.0}, params=_gb(rng, 4),
                error="ConfigError", mentions=["eps"])
    yield error("layer_norm/eps-negative-001", "layer_norm", "eps = -1e-5.",
                inputs={"x": x4}, attributes={"eps": -1e-5}, params=_gb(rng, 4),
                error="ConfigError", mentions=["eps"])
    yield error("layer_norm/bad-variant-001", "layer_norm",
                "An unknown variant name ('unbiased'): variants are 'canonical' and "
                "'annotated'.",
                inputs={"x": x4}, attributes={"variant": "unbiased"}, params=_gb(rng, 4),
                error="ConfigError", mentions=["variant", "unbiased"])
    yield error("layer_norm/scalar-001", "layer_norm", "A rank-0 input has no feature axis.",
                inputs={"x": np.array(0.5)}, params=_gb(rng, 1),
                error="ShapeError", mentions=["x"])
    yield error("layer_norm/annotated-single-001", "layer_norm",
                "variant='annotated' with D = 1: the unbiased std divides by D - 1 = 0, so it "
                "is undefined; a ShapeError, not NaN.",
                inputs={"x": np.array([[0.5], [1.0]])}, attributes={"variant": "annotated"},
                params=_gb(rng, 1), error="ShapeError", mentions=["annotated", "x"])
    yield error("layer_norm/int-input-001", "layer_norm", "Integer inputs are refused.",
                inputs={"x": np.array([[1, 2, 3, 4]], dtype=np.int64)}, params=_gb(rng, 4),
                error="DTypeError", mentions=["x"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("layer_norm/defaults-001", "layer_norm",
                "eps and variant left out (1e-5, canonical): a (2, 4) input in [-2**-7, "
                "2**-7] (variance ~2e-5, comparable to eps): eps 1e-6 or 1e-3, or the "
                "annotated variant, change y.",
                inputs={"x": rd.uniform((2, 4), -2**-7, 2**-7, 2**-12)}, params=_gb(rd, 4),
                flags=["defaults", "default-eps"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    yield value("layer_norm/one-pass-001", "layer_norm",
                "Rows 101 + d and 90 + d, d fractional (halves) summing to 0, D = 6: means "
                "exact in every dtype, variance ~0.4-0.7; E[x^2] ~ 1e4 divided by 6 is inexact, "
                "so the one-pass E[x^2] - E[x]^2 is off by ~1e-3 relative at float32, while "
                "(x - mean)^2 is exact.",
                inputs={"x": np.array([[101.0, 100.5, 101.5, 100.0, 102.0, 101.0],
                                       [88.5, 90.5, 91.0, 89.5, 90.0, 90.5]])},
                params=_gb(rd, 6), flags=["cancellation", "large-mean"])
    x4 = rd.uniform((2, 4))
    for n, (eps, what) in enumerate([("1e-5", "a string"), (True, "a bool")], 1):
        yield error(f"layer_norm/eps-type-00{n}", "layer_norm", f"eps given as {what} is refused.",
                    inputs={"x": x4}, attributes={"eps": eps}, params=_gb(rd, 4),
                    error="ConfigError", mentions=["eps"])


def _edges(rng):
    """D = 0 and eps checks (their own number stream)."""
    yield value("layer_norm/empty-width-001", "layer_norm",
                "D = 0: x (2, 0) gives y (2, 0). Normalising over nothing produces no value, so "
                "nothing is undefined: an empty output, not an error (the annotated variant "
                "still needs D >= 2).",
                inputs={"x": np.zeros((2, 0))}, params={"gamma": np.zeros(0), "beta": np.zeros(0)},
                flags=["empty-axis", "edge"])
    x = rng.uniform((2, 4))
    yield error("layer_norm/eps-bool-001", "layer_norm", "eps = True: a bool is not a number here.",
                inputs={"x": x}, attributes={"eps": True}, params=_gb(rng, 4),
                error="ConfigError", mentions=["eps", "True"])
    yield error("layer_norm/eps-string-001", "layer_norm", "eps = '1e-5', a string.",
                inputs={"x": x}, attributes={"eps": "1e-5"}, params=_gb(rng, 4),
                error="ConfigError", mentions=["eps", "1e-5"])


def _gb(rng, d):
    return {"gamma": 1.0 + rng.weights((d,), 0.5), "beta": rng.weights((d,), 1.0)}


def grad_cases(r):
    yield gradient("layer_norm/grad-001", "layer_norm",
                   "canonical, a (2, 3, 5) input: dx = (dz - mean(dz) - z mean(dz z)) / r with "
                   "dz = dy gamma; leaving out either mean term fails; dgamma and dbeta sum "
                   "over every leading axis.",
                   inputs={"x": r.uniform((2, 3, 5))}, params=_gb(r, 5),
                   cotangents={"y": r.uniform((2, 3, 5))}, flags=["gradient", "basic"])
    yield gradient("layer_norm/grad-002", "layer_norm",
                   "canonical with eps = 0.25 and inputs of small variance: eps inside the root "
                   "in the backward pass too.",
                   inputs={"x": r.uniform((3, 6), -0.375, 0.375)}, attributes={"eps": 0.25},
                   params=_gb(r, 6), cotangents={"y": r.uniform((3, 6))},
                   flags=["gradient", "eps"])
    yield gradient("layer_norm/grad-003", "layer_norm",
                   "variant='annotated' (unbiased std, eps added to the std), a (3, 4) input.",
                   inputs={"x": r.uniform((3, 4))}, attributes={"variant": "annotated"},
                   params=_gb(r, 4), cotangents={"y": r.uniform((3, 4))},
                   flags=["gradient", "annotated"])
    yield gradient("layer_norm/grad-004", "layer_norm",
                   "variant='annotated' with eps = 0.25 and a rank-1 input of width 8.",
                   inputs={"x": r.uniform((8,), -0.5, 0.5)},
                   attributes={"variant": "annotated", "eps": 0.25}, params=_gb(r, 8),
                   cotangents={"y": r.uniform((8,))}, flags=["gradient", "annotated", "eps"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("layer_norm/grad-005", "layer_norm",
                   "eps and variant left out (1e-5, canonical) on inputs in {-2^-6, 0, 2^-6} "
                   "(variance ~1e-4, so eps = 1e-5 shifts the gradient by ~5%; 1e-6 or the "
                   "annotated variant fail).",
                   inputs={"x": r.uniform((3, 6), -2.0**-6, 2.0**-6)}, params=_gb(r, 6),
                   cotangents={"y": r.uniform((3, 6))}, flags=["gradient", "defaults", "eps"],
                   omit_defaults=True)
