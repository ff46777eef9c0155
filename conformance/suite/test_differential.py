"""Random values in the shapes of every value vector: the backend at the dtype
under test against the NumPy backend in float64.

Inputs are the vector's own, each float multiplied by (1 + u/16), u uniform in
[-1, 1]: signs, zeros, infinities and masks keep their meaning, so a vector's
edge case stays an edge case. Functions that return token ids (decoding) are
covered by golden vectors with a logit margin instead (random weights give ties),
so vectors with integer or boolean outputs are not parametrised here.
"""

import numpy as np
import pytest
from attnspec.backends import get_backend
from attnspec.conformance.ops import MissingFunction
from attnspec.conformance.runner import call
from attnspec.spec.errors import AttnSpecError, NotImplementedComponent
from hypothesis import given, settings
from hypothesis import strategies as st

_REFERENCE = {}


def _reference():
    if "numpy" not in _REFERENCE:
        _REFERENCE["numpy"] = get_backend("numpy")
    return _REFERENCE["numpy"]


def _perturb(arrays, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for k, a in arrays.items():
        if a.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                out[k] = a * (1 + rng.uniform(-1, 1, a.shape) / 16)
        else:
            out[k] = a
    return out


# The vectors already span the shapes and edge cases; a quarter of the profile's examples
# per vector (5 under `ci`, 125 under `thorough`) keeps the family affordable on slow
# eager frameworks.
@settings(max_examples=max(3, settings.default.max_examples // 4))
@given(seed=st.integers(0, 2**32 - 1))
def test_against_numpy(backend, spec, device, attnspec_session, value_vector, seed):
    v = value_vector
    fn = spec.functions[v.function]
    dtype = attnspec_session.property_dtype
    inputs, params = _perturb(v.inputs, seed), _perturb(v.params, seed + 1)
    try:
        want, _ = call(_reference(), fn, inputs, v.attributes, params, "float64", "cpu")
    except AttnSpecError as exc:
        try:
            with pytest.raises(type(exc)):
                call(backend, fn, inputs, v.attributes, params, dtype, device)
        except NotImplementedComponent as missing:
            raise MissingFunction(f"missing: {missing}") from None
        return
    try:
        got, _ = call(backend, fn, inputs, v.attributes, params, dtype, device)
    except NotImplementedComponent as exc:
        raise MissingFunction(f"missing: {exc}") from None
    tol = v.tolerances[dtype]
    for name in fn.returns:
        np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64),
                                   rtol=tol["rtol"] * 4, atol=tol["atol"] * 4,
                                   err_msg=f"{v.id} output {name!r} (perturbed, seed={seed})")
