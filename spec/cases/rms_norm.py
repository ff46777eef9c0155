"""rms_norm: y = x / sqrt(mean(x^2) + eps) * gamma over the last axis."""

import numpy as np

from ..oracle.rms_norm import rms_norm as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("rms_norm", {
    "rms_norm": Fn(module="norm", inputs=["x"], attributes={"eps": 1e-6}, params=True,
                   returns=["y"], oracle=oracle, added={"unit_offset": False}),
})


def _g(rng, d):
    return {"gamma": 1.0 + rng.weights((d,), 0.5)}


def cases(rng):
    yield value("rms_norm/basic-001", "rms_norm",
                "A (2, 4) input in [0.25, 2] (a large mean): subtracting the mean, as "
                "LayerNorm does, changes y completely.",
                inputs={"x": rng.uniform((2, 4), 0.25, 2)}, params=_g(rng, 4),
                flags=["basic", "no-mean-subtraction"])
    yield value("rms_norm/mixed-001", "rms_norm",
                "A (3, 6) input of both signs; dividing by the root of the sum instead of the "
                "mean of squares is off by sqrt(6).",
                inputs={"x": rng.uniform((3, 6), -2, 2)}, params=_g(rng, 6),
                flags=["basic", "mean-not-sum"])
    yield value("rms_norm/batch-001", "rms_norm", "A (2, 3, 5) input, normalised per row.",
                inputs={"x": rng.uniform((2, 3, 5), -1, 3)}, params=_g(rng, 5),
                flags=["batch", "wrong-axis"])
    yield value("rms_norm/eps-001", "rms_norm",
                "eps = 0.25 with small inputs (mean square ~0.05): eps inside the root, "
                "sqrt(ms + eps), differs from sqrt(ms) + eps by ~15%, and ignoring the "
                "attribute by a factor of ~2.5.",
                inputs={"x": rng.uniform((2, 4), -0.375, 0.375)}, attributes={"eps": 0.25},
                params=_g(rng, 4), flags=["eps", "eps-inside-sqrt", "eps-attribute"])
    yield value("rms_norm/small-001", "rms_norm",
                "Inputs of size ~2**-8 (mean square ~6e-5) with the default eps 1e-6: eps = "
                "1e-5 (a common LayerNorm default) changes y by ~7%.",
                inputs={"x": np.array([[1.0, -2.0, 3.0, -1.0], [2.0, 2.0, -3.0, 1.0]])
                        * 2.0**-8},
                params=_g(rng, 4), flags=["eps", "default-eps"])
    yield value("rms_norm/small-002", "rms_norm",
                "Inputs of size ~2**-10 (mean square ~3.6e-6) with the default eps 1e-6: "
                "torch.nn.RMSNorm's default eps=None (finfo(float32).eps = 1.2e-7) changes y "
                "by ~11%.",
                inputs={"x": np.array([[1.0, -2.0, 3.0, -1.0], [-3.0, 1.0, 2.0, 1.0]])
                        * 2.0**-10},
                params=_g(rng, 4), flags=["eps", "default-eps", "torch-rmsnorm-eps"])
    yield value("rms_norm/zero-001", "rms_norm",
                "An all-zero row gives zeros (eps > 0 keeps it finite); the other row is "
                "ordinary.",
                inputs={"x": np.array([[0.0, 0.0, 0.0, 0.0], [1.0, -0.5, 0.25, 2.0]])},
                params=_g(rng, 4), flags=["zero", "edge"])
    yield value("rms_norm/single-001", "rms_norm",
                "D = 1: y = x / sqrt(x^2 + eps) * gamma, i.e. sign(x) * gamma for |x| >> eps.",
                inputs={"x": np.array([[3.0], [-0.5]])}, params=_g(rng, 1),
                flags=["single-feature", "edge"])

    x4 = rng.uniform((2, 4))
    yield error("rms_norm/gamma-shape-001", "rms_norm", "gamma of shape (3,) for D = 4.",
                inputs={"x": x4}, params={"gamma": np.ones(3)},
                error="ParameterError", mentions=["gamma", "(3,)"])
    yield error("rms_norm/eps-zero-001", "rms_norm", "eps = 0 is refused (eps must be > 0).",
                inputs={"x": x4}, attributes={"eps": 0.0}, params=_g(rng, 4),
                error="ConfigError", mentions=["eps"])
    yield error("rms_norm/scalar-001", "rms_norm", "A rank-0 input has no feature axis.",
                inputs={"x": np.array(0.5)}, params=_g(rng, 1),
                error="ShapeError", mentions=["x"])
    yield error("rms_norm/int-input-001", "rms_norm", "Integer inputs are refused.",
                inputs={"x": np.array([[1, 2, 3, 4]], dtype=np.int64)}, params=_g(rng, 4),
                error="DTypeError", mentions=["x"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))
    yield from unit_offset_cases(Rng(f"{COMPONENT.id}/unit-offset"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("rms_norm/defaults-001", "rms_norm",
                "eps left out (default 1e-6): a (2, 4) input in [-2**-8, 2**-8] (mean square "
                "~5e-6): eps 1e-5 or torch.nn.RMSNorm's finfo(float32).eps change y.",
                inputs={"x": rd.uniform((2, 4), -2**-8, 2**-8, 2**-12)}, params=_g(rd, 4),
                flags=["defaults", "default-eps"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    x4 = rd.uniform((2, 4))
    for n, (eps, what) in enumerate([("1e-6", "a string"), (True, "a bool")], 1):
        yield error(f"rms_norm/eps-type-00{n}", "rms_norm", f"eps given as {what} is refused.",
                    inputs={"x": x4}, attributes={"eps": eps}, params=_g(rd, 4),
                    error="ConfigError", mentions=["eps"])


def _edges(rng):
    """D = 0 and eps checks (their own number stream)."""
    yield value("rms_norm/empty-width-001", "rms_norm",
                "D = 0: x (3, 0) gives y (3, 0), an empty output (nothing is normalised, so "
                "nothing is undefined).",
                inputs={"x": np.zeros((3, 0))}, params={"gamma": np.zeros(0)},
                flags=["empty-axis", "edge"])
    x = rng.uniform((2, 4))
    yield error("rms_norm/eps-bool-001", "rms_norm", "eps = False: a bool is not a number here.",
                inputs={"x": x}, attributes={"eps": False}, params=_g(rng, 4),
                error="ConfigError", mentions=["eps", "False"])
    yield error("rms_norm/eps-string-001", "rms_norm", "eps = '1e-6', a string.",
                inputs={"x": x}, attributes={"eps": "1e-6"}, params=_g(rng, 4),
                error="ConfigError", mentions=["eps", "1e-6"])


def grad_cases(r):
    def g(d):
        return {"gamma": 1.0 + r.weights((d,), 0.5)}

    yield gradient("rms_norm/grad-001", "rms_norm",
                   "A (3, 4) input: dx = dz / r - x sum(dz x) / (D r^3), dz = dy gamma; "
                   "leaving out the second term fails.",
                   inputs={"x": r.uniform((3, 4))}, params=g(4),
                   cotangents={"y": r.uniform((3, 4))}, flags=["gradient", "basic"])
    yield gradient("rms_norm/grad-002", "rms_norm",
                   "A (2, 2, 6) batch: dgamma sums over both leading axes.",
                   inputs={"x": r.uniform((2, 2, 6))}, params=g(6),
                   cotangents={"y": r.uniform((2, 2, 6))}, flags=["gradient", "batch"])
    yield gradient("rms_norm/grad-003", "rms_norm",
                   "eps = 0.25 with small inputs: eps inside the root of the backward pass.",
                   inputs={"x": r.uniform((2, 5), -0.375, 0.375)}, attributes={"eps": 0.25},
                   params=g(5), cotangents={"y": r.uniform((2, 5))}, flags=["gradient", "eps"])
    yield gradient("rms_norm/grad-004", "rms_norm", "A rank-1 input of width 8.",
                   inputs={"x": r.uniform((8,))}, params=g(8), cotangents={"y": r.uniform((8,))},
                   flags=["gradient", "rank-1"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))
    yield from unit_offset_grad_cases(Rng(f"{COMPONENT.id}/unit-offset-grad"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("rms_norm/grad-005", "rms_norm",
                   "eps left out (1e-6) on inputs that are multiples of 2^-9 in [-2^-8, 2^-8] "
                   "(mean square ~7e-6): a default of 1e-5 or 1e-8 changes the gradient by "
                   "more than 4%.",
                   inputs={"x": r.uniform((3, 6), -2.0**-8, 2.0**-8, 2.0**-9)},
                   params={"gamma": 1.0 + r.weights((6,), 0.5)},
                   cotangents={"y": r.uniform((3, 6))}, flags=["gradient", "defaults", "eps"],
                   dtypes=["float64", "float32", "bfloat16"],
                   dtype_note="not float16: a mean square of ~7e-6 lies among float16's subnormals "
                              "(below 6.1e-5), where no tolerance holds every correct order",
                   omit_defaults=True)


# -- unit_offset (issue 25): Gemma's y = x / rms(x) * (1 + w) ----------------------------

UNIT = {"unit_offset": True}


def _w(rng, d, scale=0.5):
    """Gemma's stored weights: around 0 (its init is zeros), so gamma in place of 1 + gamma fails."""
    return {"gamma": rng.weights((d,), scale)}


def unit_offset_cases(rng):
    yield value("rms_norm/unit-offset-001", "rms_norm",
                "unit_offset = True, a (2, 4) input, w in [-0.5, 0.5]: y = x / rms * (1 + w); "
                "w alone (the flag ignored) or 2 + w (1 added twice) fail.",
                inputs={"x": rng.uniform((2, 4))}, attributes=UNIT, params=_w(rng, 4),
                flags=["unit-offset", "basic"])
    yield value("rms_norm/unit-offset-002", "rms_norm",
                "unit_offset = True with w = 0 (Gemma's initialisation): y = x / rms, where "
                "the plain RMSNorm gives zeros.",
                inputs={"x": rng.uniform((3, 6), -1, 3)}, attributes=UNIT,
                params={"gamma": np.zeros(6)}, flags=["unit-offset", "edge"])
    yield value("rms_norm/unit-offset-003", "rms_norm",
                "unit_offset = True on a (2, 3, 5) batch with w = -1 in feature 0 (a zero "
                "column) and w up to 1.5 elsewhere; the norm applied twice, rms(x) then "
                "rms(y), differs since (1 + w) is not all ones.",
                inputs={"x": rng.uniform((2, 3, 5), -1, 3)}, attributes=UNIT,
                params={"gamma": np.array([-1.0, 1.5, -0.5, 0.75, 0.25])},
                flags=["unit-offset", "batch"])
    yield value("rms_norm/unit-offset-eps-001", "rms_norm",
                "unit_offset = True, eps = 0.25 with small inputs: eps inside the root, and "
                "the attribute not dropped on the unit-offset path.",
                inputs={"x": rng.uniform((2, 4), -0.375, 0.375)},
                attributes={"eps": 0.25, **UNIT}, params=_w(rng, 4),
                flags=["unit-offset", "eps", "eps-attribute"])
    yield value("rms_norm/unit-offset-heads-001", "rms_norm",
                "unit_offset = True on a (2, 2, 3, 4) input, the per-head shape of Gemma 3's "
                "QK-norm (B, H, T, K), gamma of the head width K = 4.",
                inputs={"x": rng.uniform((2, 2, 3, 4))}, attributes=UNIT, params=_w(rng, 4),
                flags=["unit-offset", "qk-norm", "batch"])
    yield value("rms_norm/unit-offset-bf16-001", "rms_norm",
                "unit_offset = True with w = k 2**-9 (k odd): each w is exact in bfloat16 but "
                "1 + w is not (its 8-bit significand ends at 2**-7), so (1 + w) added in "
                "bfloat16 moves y by up to 2**-9 relative. That is below bfloat16's rtol "
                "(4e-2): the tolerance cannot see one rounding, so tests/test_gemma_norm.py "
                "pins Gemma's order bit for bit on these inputs.",
                inputs={"x": rng.uniform((4, 8), 0.25, 2)}, attributes=UNIT,
                params={"gamma": np.array([1, 3, 5, 7, -1, -3, -5, -7]) * 2.0**-9},
                flags=["unit-offset", "precision", "half"])
    yield value("rms_norm/unit-offset-false-001", "rms_norm",
                "unit_offset = False stated: the plain y = x / rms * gamma, with gamma around "
                "0, so a backend that always adds 1 fails.",
                inputs={"x": rng.uniform((2, 4))}, attributes={"unit_offset": False},
                params=_w(rng, 4), flags=["unit-offset", "basic"])
    x = rng.uniform((2, 4))
    for n, (bad, what) in enumerate([("yes", "a string"), (1, "the integer 1"),
                                     (None, "None")], 1):
        yield error(f"rms_norm/unit-offset-type-00{n}", "rms_norm",
                    f"unit_offset given as {what} is refused (True or False only).",
                    inputs={"x": x}, attributes={"unit_offset": bad}, params=_w(rng, 4),
                    error="ConfigError", mentions=["unit_offset", repr(bad)])


def unit_offset_grad_cases(r):
    def g(d):
        return {"gamma": r.weights((d,), 0.5)}

    yield gradient("rms_norm/grad-unit-offset-001", "rms_norm",
                   "unit_offset = True, a (3, 4) input: dz = dy (1 + w) in dx; dw = sum dy x / r "
                   "(unchanged by the offset).",
                   inputs={"x": r.uniform((3, 4))}, attributes=UNIT, params=g(4),
                   cotangents={"y": r.uniform((3, 4))}, flags=["gradient", "unit-offset"])
    yield gradient("rms_norm/grad-unit-offset-002", "rms_norm",
                   "unit_offset = True on a (2, 2, 6) batch: dw sums over both leading axes.",
                   inputs={"x": r.uniform((2, 2, 6))}, attributes=UNIT, params=g(6),
                   cotangents={"y": r.uniform((2, 2, 6))},
                   flags=["gradient", "unit-offset", "batch"])
    yield gradient("rms_norm/grad-unit-offset-003", "rms_norm",
                   "unit_offset = True, eps = 0.25 with small inputs.",
                   inputs={"x": r.uniform((2, 5), -0.375, 0.375)},
                   attributes={"eps": 0.25, **UNIT}, params=g(5),
                   cotangents={"y": r.uniform((2, 5))},
                   flags=["gradient", "unit-offset", "eps"])
    yield gradient("rms_norm/grad-unit-offset-004", "rms_norm",
                   "unit_offset = True with w = 0 on a rank-1 input of width 8: dx is the plain "
                   "RMSNorm's with unit gains, where gamma = 0 would give dx = 0.",
                   inputs={"x": r.uniform((8,))}, attributes=UNIT, params={"gamma": np.zeros(8)},
                   cotangents={"y": r.uniform((8,))},
                   flags=["gradient", "unit-offset", "rank-1"])
