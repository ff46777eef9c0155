"""Every gradient vector (VJPs), at every dtype the device supports and the vector lists.

A backend without a backward pass for a function reports it ``missing``: a failure
(or a listed known failure), never a pass."""

import pytest
from attnspec.conformance.runner import require_pass, run_gradient_vector

pytestmark = pytest.mark.gradients


def test_gradient(backend, spec, device, vector_dtype, record_result):
    v, dtype = vector_dtype
    require_pass(record_result(run_gradient_vector(backend, spec, v, dtype, device)))


test_gradient.expect = "gradient"
