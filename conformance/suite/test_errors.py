"""Every error vector raises the named spec error class, with a message that
names the argument or parameter path."""

import pytest
from attnspec.conformance.runner import run_vector


def test_error(backend, spec, device, vector_dtype, record_result):
    v, dtype = vector_dtype
    r = record_result(run_vector(backend, spec, v, dtype, device))
    if r.status != "pass":
        pytest.fail("\n".join(r.messages) or r.status, pytrace=False)


test_error.expect = "error"
