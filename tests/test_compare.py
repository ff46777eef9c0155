"""The judging rule of spec/compare.py."""

import numpy as np
from attnspec.spec.compare import DEFAULT_TOLERANCES, compare
from attnspec.spec.tensor import spacing

TOL = DEFAULT_TOLERANCES["float64"]


def test_equal_passes_with_zero_error():
    e = np.array([1.0, -2.0, 0.0])
    c = compare(e.copy(), e, "float64", TOL)
    assert c.ok and c.max_abs_err == 0 and c.max_ulp == 0


def test_one_ulp_off_reports_one_ulp():
    e = np.array([1.0, 1.5])
    g = e.copy()
    g[1] = np.nextafter(1.5, 2)
    c = compare(g, e, "float64", TOL)
    assert c.ok and c.max_ulp == 1.0 and c.worst_index == (1,)


def test_an_all_zero_tensor_reports_ulps_at_the_atol_scale():
    # a key bias's gradient is exactly 0; rounding leaves ~1e-7 in float32
    tol = DEFAULT_TOLERANCES["float32"]
    c = compare(np.array([1.2e-7, 0.0]), np.zeros(2), "float32", tol)
    assert c.ok and c.max_ulp == 1.2e-7 / float(spacing(np.float64(tol["atol"]), "float32"))


def test_beyond_tolerance_fails_and_names_the_worst_index():
    e = np.zeros((2, 3))
    g = e.copy()
    g[1, 2] = 1e-3
    c = compare(g, e, "float64", TOL)
    assert not c.ok and c.worst_index == (1, 2) and c.got_at_worst == 1e-3


def test_nan_where_a_number_is_expected_fails():
    c = compare(np.array([np.nan]), np.array([0.0]), "float32", DEFAULT_TOLERANCES["float32"])
    assert not c.ok


def test_nonfinite_must_match_exactly():
    e = np.array([np.inf, np.nan])
    assert compare(e.copy(), e, "float64", TOL).ok
    assert not compare(np.array([-np.inf, np.nan]), e, "float64", TOL).ok


def test_shape_mismatch_fails_with_a_message():
    c = compare(np.zeros(3), np.zeros((3, 1)), "float64", TOL)
    assert not c.ok and "shape" in c.problem


def test_integer_outputs_must_be_equal():
    assert not compare(np.array([1, 2]), np.array([1, 3]), "float64", TOL).ok
    assert compare(np.array([True]), np.array([True]), "float64", TOL).ok


def test_spacing_matches_numpy_for_ieee_types():
    x = np.array([1.0, 3.5, 1e-3, 1000.0])
    for d in ("float64", "float32", "float16"):
        assert np.array_equal(spacing(x, d), np.spacing(x.astype(d)).astype(np.float64)), d
    assert spacing(np.array([1.0]), "bfloat16")[0] == 2.0**-7
