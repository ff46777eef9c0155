"""The input checks are written once (backends/_checks.py): the same bad input raises the
same error class with the same message in every backend. Here, NumPy's messages; each
framework is compared with them in its own tox environment (tests/torch, tests/tensorflow,
tests/jax), so torch and tensorflow never share a process and none is skipped where promised."""

from tests.same_errors import outcomes


def test_numpy_raises_the_spec_errors_for_the_bad_inputs():
    got = outcomes("numpy")
    assert "no error" not in got.values(), [c for c, o in got.items() if o == "no error"]
    assert got["sdpa-bias-float32"] == "DTypeError: bias has dtype float32 but q has float64"
    assert got["additive-w_q-float32"] == "DTypeError: w_q has dtype float32 but query has float64"
    assert got["gru-w_ih-float32"] == "DTypeError: w_ih has dtype float32 but w_hh has float64"

