"""Every error vector raises the named spec error class, with a message that
names the argument or parameter path."""

import pytest
from attnspec.conformance.runner import require_pass, run_vector

pytestmark = pytest.mark.errors


def test_error(backend, spec, device, vector_dtype, record_result):
    v, dtype = vector_dtype
    require_pass(record_result(run_vector(backend, spec, v, dtype, device)))


test_error.expect = "error"
