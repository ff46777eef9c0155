"""How an output is judged against its golden value.

An element passes when ``|got - expected| <= atol + rtol * |expected|`` with the
(rtol, atol) of the dtype under test; non-finite expected values must be
matched exactly (NaN by NaN). Integer and boolean outputs must be equal.

ULP errors are reported, never gated on: ``|got - expected| / ulp(m)`` where
``ulp`` is the spacing of the dtype under test and ``m = max(|expected|,
max|expected over the tensor| / 16, atol)``. The floor keeps an element that cancels
to nearly zero (or a tensor that is exactly zero, such as the gradient of a key bias)
from reporting astronomically many ULPs that say nothing about the implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tensor import spacing

# The spec's default tolerances, per dtype. A vector file may override them
# for its component (deep composites accumulate more rounding); it always
# writes the values it uses.
DEFAULT_TOLERANCES = {
    "float64": {"rtol": 1e-10, "atol": 1e-12},
    "float32": {"rtol": 2e-5, "atol": 2e-6},
    "float16": {"rtol": 1e-2, "atol": 2e-3},
    "bfloat16": {"rtol": 4e-2, "atol": 1e-2},
}


@dataclass
class Comparison:
    ok: bool
    max_abs_err: float
    max_ulp: float
    worst_index: tuple | None = None
    expected_at_worst: float | None = None
    got_at_worst: float | None = None
    problem: str | None = None  # shape mismatch, NaN where a number is expected...

    def describe(self, name: str) -> str:
        if self.problem:
            return f"{name}: {self.problem}"
        return (f"{name}: max abs err {self.max_abs_err:.3g}, max ULP {self.max_ulp:.3g}, "
                f"worst at index {self.worst_index}: expected {self.expected_at_worst!r}, "
                f"got {self.got_at_worst!r}")


def compare(got, expected: np.ndarray, dtype: str, tol: dict) -> Comparison:
    got = np.asarray(got)
    if got.shape != expected.shape:
        return Comparison(False, float("inf"), float("inf"),
                          problem=f"shape {tuple(got.shape)} != expected {tuple(expected.shape)}")
    if expected.dtype == np.bool_ or np.issubdtype(expected.dtype, np.integer):
        return _compare_exact(got, expected)
    got = got.astype(np.float64)
    exp = expected
    finite = np.isfinite(exp)
    same_nonfinite = (np.isnan(exp) & np.isnan(got)) | (~np.isnan(exp) & (got == exp))
    nonfinite_ok = np.where(finite, True, same_nonfinite)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(got - exp), np.where(nonfinite_ok, 0.0, np.inf))
        err = np.where(np.isnan(err), np.inf, err)
        bound = tol["atol"] + tol["rtol"] * np.abs(np.where(finite, exp, 0.0))
        floor = max((np.max(np.abs(exp[finite])) if finite.any() else 0.0) / 16, tol["atol"])
        ulp = err / spacing(np.maximum(np.abs(np.where(finite, exp, 0.0)), floor), dtype)
    if err.size == 0:
        return Comparison(True, 0.0, 0.0)
    worst = np.unravel_index(int(np.argmax(err / bound)), err.shape)
    ok = bool(np.all(err <= bound))
    return Comparison(ok, float(np.max(err)), float(np.max(ulp)), tuple(int(i) for i in worst),
                      float(exp[worst]), float(got[worst]))


def _compare_exact(got, expected) -> Comparison:
    got = np.asarray(got)
    if expected.dtype == np.bool_:
        got = got.astype(np.bool_)
    diff = got != expected
    if not diff.any():
        return Comparison(True, 0.0, 0.0)
    worst = tuple(int(i) for i in np.argwhere(diff)[0])
    e, g = expected[worst].item(), got[worst].item()
    return Comparison(False, float("inf"), float("inf"), worst, e, g,
                      problem=f"{int(diff.sum())} element(s) differ; first at {worst}: "
                              f"expected {e!r}, got {g!r}")
