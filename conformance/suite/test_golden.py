"""Every value vector, at every dtype the device supports and the vector lists."""

import pytest
from attnspec.conformance.runner import require_pass, run_vector

pytestmark = pytest.mark.golden


def test_value(backend, spec, device, vector_dtype, record_result):
    v, dtype = vector_dtype
    require_pass(record_result(run_vector(backend, spec, v, dtype, device)))


test_value.expect = "value"
