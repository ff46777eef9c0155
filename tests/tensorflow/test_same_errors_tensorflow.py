"""The same bad input raises the same error class and message here as in NumPy
(tests/same_errors.py; the checks are written once, in backends/_checks.py)."""

import pytest

pytest.importorskip("tensorflow")

from tests.same_errors import outcomes


def test_tensorflow_raises_what_numpy_raises():
    assert outcomes("tensorflow") == outcomes("numpy")
