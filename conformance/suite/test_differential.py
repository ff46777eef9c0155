"""Random values in the shapes of every value vector: the backend at the dtype
under test against the NumPy backend in float64.

Inputs are the vector's own, each float multiplied by (1 + u/16), u uniform in
[-1, 1]: signs, zeros, infinities and masks keep their meaning, so a vector's
edge case stays an edge case. The perturbed inputs and parameters are then rounded to
the dtype under test, so both sides compute on the values the backend receives (the
runner rounds a backend's inputs to its dtype; a float16 input of 1000 (1 + u/16) is
off by up to 0.25, which moves a softmax of large scores by far more than the dtype's
tolerance).

The tolerance is the vector's, times 4, plus the example's own sensitivity: the vector's
tolerance was derived from every correct evaluation order on the vector's inputs, and a
perturbed example can be worse conditioned (a float16 score of 1000 is rounded by up to
0.25 inside any correct backend). The sensitivity is measured on the reference: the
largest change of an output when every float input and parameter is moved by up to 4
units of the dtype's roundoff (two random draws), the first-order effect of the roundings
a correct backend makes. It is measured below float64 (the property dtype is float64
wherever a backend has it, so the in-tree backends on the CPU pay nothing): at float32 a
perturbed copy of a far-below stress vector (scores near -131072, a float32 ULP of 2^-6)
fails a correct float32 evaluation by the vector's margin alone.

Functions that return token ids (decoding) are covered by golden vectors with a logit
margin instead (random weights give ties), so vectors with integer or boolean outputs are
not parametrised here.
"""

import numpy as np
import pytest
from attnspec.backends import get_backend
from attnspec.conformance.ops import MissingFunction
from attnspec.conformance.runner import call
from attnspec.spec.compare import compare
from attnspec.spec.errors import AttnSpecError, NotImplementedComponent
from attnspec.spec.tensor import round_to
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.differential

_REFERENCE = {}
# The suite's profile: this module is imported under it (see suite/conftest.py), the
# examples below are drawn when the test runs.
_PROFILE = settings.default


def _reference():
    if "numpy" not in _REFERENCE:
        _REFERENCE["numpy"] = get_backend("numpy")
    return _REFERENCE["numpy"]


def _perturb(arrays, seed, dtype):
    rng = np.random.default_rng(seed)
    out = {}
    for k, a in arrays.items():
        if a.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                out[k] = round_to(a * (1 + rng.uniform(-1, 1, a.shape) / 16), dtype)
        else:
            out[k] = a
    return out


ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}  # below float64
SENSITIVITY_DRAWS = 2
SENSITIVITY_UNITS = 4


def _nudge(arrays, rng, size):
    return {k: a * (1 + size * rng.uniform(-1, 1, a.shape)) if a.dtype.kind == "f" else a
            for k, a in arrays.items()}


def _sensitivity(fn, inputs, params, attributes, want, dtype, seed) -> float:
    """The largest change of a finite reference output when the float inputs and
    parameters move by up to SENSITIVITY_UNITS roundoffs of ``dtype`` (a draw the
    reference refuses is left out)."""
    if dtype not in ROUNDOFF:
        return 0.0
    rng, size, worst = np.random.default_rng([seed, 7]), SENSITIVITY_UNITS * ROUNDOFF[dtype], 0.0
    for _ in range(SENSITIVITY_DRAWS):
        try:
            with np.errstate(all="ignore"):
                moved, _ = call(_reference(), fn, _nudge(inputs, rng, size), attributes,
                                _nudge(params, rng, size), "float64", "cpu")
        except AttnSpecError:
            continue
        for name, w in want.items():
            w, m = np.asarray(w, np.float64), np.asarray(moved[name], np.float64)
            both = np.isfinite(w) & np.isfinite(m)
            if both.any():
                worst = max(worst, float(np.max(np.abs(w[both] - m[both]))))
    return worst


def _check(backend, spec, device, dtype, v, seed):
    """One perturbed example; an AssertionError of a few lines naming the vector."""
    fn = spec.functions[v.function]
    inputs, params = _perturb(v.inputs, seed, dtype), _perturb(v.params, seed + 1, dtype)
    try:
        want, _ = call(_reference(), fn, inputs, v.attributes, params, "float64", "cpu")
    except AttnSpecError as exc:
        try:
            got = call(backend, fn, inputs, v.attributes, params, dtype, device)
        except NotImplementedComponent as missing:
            raise MissingFunction(f"missing: {missing}") from None
        except type(exc):
            return
        except Exception as other:  # reported in one line
            raise AssertionError(f"{v.id} (perturbed, seed={seed}): the reference raised "
                                 f"{type(exc).__name__}, the backend {type(other).__name__}: "
                                 f"{other}") from None
        raise AssertionError(f"{v.id} (perturbed, seed={seed}): the reference raised "
                             f"{type(exc).__name__}: {exc}; the backend returned {len(got[0])} "
                             f"output(s)") from None
    try:
        got, _ = call(backend, fn, inputs, v.attributes, params, dtype, device)
    except NotImplementedComponent as exc:
        raise MissingFunction(f"missing: {exc}") from None
    tol = {k: t * 4 for k, t in v.tolerances[dtype].items()}
    tol["atol"] += _sensitivity(fn, inputs, params, v.attributes, want, dtype, seed)
    found = {name: compare(got[name], want[name].astype(np.float64), dtype, tol)
             for name in fn.returns}
    bad = [c.describe(f"output {name!r}") for name, c in found.items() if not c.ok]
    if bad:
        raise AssertionError(f"{v.id} [{dtype}] (perturbed, seed={seed}) differs from the NumPy "
                             f"backend in float64 (rtol={tol['rtol']:g}, atol={tol['atol']:g}):\n"
                             + "\n".join(bad))


def test_against_numpy(backend, spec, device, attnspec_session, value_vector):
    """Only the seed is drawn by hypothesis (and printed on failure); a failure is not
    shrunk, since every seed is as simple as any other."""
    dtype = attnspec_session.property_dtype

    # The vectors already span the shapes and edge cases; a quarter of the profile's
    # examples per vector (5 under `ci`, 125 under `thorough`) keeps the family affordable
    # on slow eager frameworks.
    @settings(_PROFILE, max_examples=max(3, _PROFILE.max_examples // 4),
              phases=[Phase.explicit, Phase.reuse, Phase.generate], report_multiple_bugs=False)
    @given(seed=st.integers(0, 2**32 - 1))
    def perturbed(seed):
        _check(backend, spec, device, dtype, value_vector, seed)

    perturbed()
