"""Every value vector, at every dtype the device supports and the vector lists."""

import pytest
from attnspec.conformance.runner import run_vector


def test_value(backend, spec, device, vector_dtype, record_result):
    v, dtype = vector_dtype
    r = record_result(run_vector(backend, spec, v, dtype, device))
    if r.status != "pass":
        pytest.fail("\n".join(r.messages) or r.status, pytrace=False)


test_value.expect = "value"
