"""The installed MLX release's differences from the spec, as spec/components/mlx.md states
them: each test fails when a release changes the behaviour (and the page must change)."""

from __future__ import annotations

import math

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="the mlx extra is what tox -e mlx-cpu installs")


def test_float64_exp_sin_cos_are_float32_accurate():
    x = np.linspace(-20, 20, 10001)
    for name, ref in (("exp", np.exp), ("sin", np.sin), ("cos", np.cos)):
        got = np.array(getattr(mx, name)(mx.array(x, dtype=mx.float64)), dtype=np.float64)
        rel = np.max(np.abs(got - ref(x)) / np.maximum(np.abs(ref(x)), 1e-300))
        assert rel > 1e-9, f"mx.{name} in float64 is now float64-accurate ({rel:g}): claim float64"


def test_softmax_nan_for_plus_inf_and_for_a_row_of_minus_inf():
    assert np.isnan(np.array(mx.softmax(mx.array([1.0, math.inf])))).all()
    assert np.isnan(np.array(mx.softmax(mx.array([-math.inf, -math.inf])))).all()


def test_fast_sdpa_averages_a_fully_masked_row():
    q, k = mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4))
    v = mx.array(np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4))
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5,
                                                mask=mx.array([[[[False, False]]]]))
    np.testing.assert_array_equal(np.array(out).ravel(), [2, 3, 4, 5])  # the spec: zeros


def test_fast_rope_refuses_width_zero():
    with pytest.raises(ValueError, match="dims must be positive"):
        mx.eval(mx.fast.rope(mx.ones((1, 2, 0)), 0, traditional=False, base=10000.0,
                             scale=1.0, offset=0))


def test_the_output_contract_reads_mlx_dtypes_through_the_backend_hook():
    """Without Backend.dtype_name the contract sees 'mlx.core.float32' and fails every vector."""
    from attnspec.backends.mlx import MlxBackend
    from attnspec.conformance.runner import contract_problems

    class Fn:
        returns = ("y",)

    b = MlxBackend()
    y = b.function("rms_norm", "norm")(b.asarray(np.ones((2, 3)), dtype="float32"),
                                       params={"gamma": b.asarray(np.ones(3), dtype="float32")})
    assert b.dtype_name(y) == "float32"
    assert contract_problems(b, Fn, (y,), {"y": np.ones((2, 3), np.float32)}, "float32", "cpu") == []


def test_float64_is_refused_with_the_supported_dtypes():
    from attnspec.backends.mlx import MlxBackend
    from attnspec.spec.errors import DTypeError

    with pytest.raises(DTypeError, match="float32"):
        MlxBackend().asarray(np.ones(2), dtype="float64")
