"""rms_norm(unit_offset=True) at float16 and bfloat16: Gemma's order (x and w to float32,
(1 + w) in float32, one rounding at the end; spec/components/rms_norm.md) pinned bit for bit
on the backend that computes in half precision on a CPU (MLX; NumPy computes in float32 and
float64 only, torch, JAX and TensorFlow offer the half dtypes on a GPU), and the
planted bugs that one rounding more makes: (1 + w) added in the half dtype before the float32
multiply, and Llama's order (the normalised x rounded before the multiply). A single extra
rounding moves y by at most 2**-9 relative, below bfloat16's rtol (4e-2), so the vectors'
tolerance cannot see these at the half dtypes; this test does."""

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from attnspec.backends.mlx import norm as mlx_norm
from attnspec.spec.vectors import default_spec

HALF = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
EPS = 1e-6


def _inputs(dtype):
    """The vector rms_norm/unit-offset-bf16-001's x, with w = k 2**-9 (bfloat16: 1 + w inexact)
    or k 2**-12 (float16, whose 11-bit significand holds 1 + k 2**-9), k odd."""
    v = default_spec().vector("rms_norm/unit-offset-bf16-001")
    w = v.params["gamma"] * (2.0**-3 if dtype == "float16" else 1.0)
    return v.inputs["x"], w


def _exact(x, w):
    """y = x / sqrt(mean(x^2) + eps) * (1 + w) in float64 (exact to far below a half ULP)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * (1 + w)


def _near_midpoint(y, dt):
    """Where a float32 evaluation error (a few 2**-24 relative) could round y either way."""
    lo = y.astype(dt).astype(np.float64)
    ulp = np.abs(np.nextafter(lo.astype(dt), np.array(np.inf, dtype=dt)).astype(np.float64) - lo)
    ulp = np.maximum(ulp, np.abs(lo - np.nextafter(lo.astype(dt), np.array(-np.inf, dtype=dt))
                                 .astype(np.float64)))
    mid_distance = np.abs(np.abs(y - lo) - ulp / 2)
    return mid_distance <= np.abs(y) * 2.0**-20


def _misrounded(got, x, w, dt):
    """Elements whose half result is not the one rounding of the exact y (away from ties)."""
    y = _exact(x, w)
    return int(np.sum((got.astype(np.float64) != y.astype(dt).astype(np.float64))
                      & ~_near_midpoint(y, dt)))


def _mlx(x, w, dt):
    mdt = mx.bfloat16 if dt == HALF["bfloat16"] else mx.float16
    got = mlx_norm.rms_norm(mx.array(x.astype(np.float32)).astype(mdt), eps=EPS,
                            unit_offset=True,
                            params={"gamma": mx.array(w.astype(np.float32)).astype(mdt)})
    return np.array(got.astype(mx.float32)).astype(dt)


def offset_in_half(x, w, dt):
    """Planted: (1 + w) formed in the half dtype, then the float32 multiply."""
    t = x.astype(dt).astype(np.float32)
    one_plus_w = (np.asarray(1, dtype=dt) + w.astype(dt)).astype(np.float32)
    return (t / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + np.float32(EPS))
            * one_plus_w).astype(dt)


def llama_order(x, w, dt):
    """Planted: the normalised x rounded to the half dtype before the multiply (LlamaRMSNorm)."""
    t = x.astype(dt).astype(np.float32)
    z = (t / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + np.float32(EPS))).astype(dt)
    return (z.astype(np.float32) * (1 + w.astype(dt).astype(np.float32))).astype(dt)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_mlx_unit_offset_rounds_once_at_the_end(dtype):
    x, w = _inputs(dtype)
    got = _mlx(x, w, HALF[dtype])
    assert _misrounded(got, x, w, HALF[dtype]) == 0


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("bug", [offset_in_half, llama_order])
def test_extra_rounding_is_caught(bug, dtype):
    x, w = _inputs(dtype)
    dt = HALF[dtype]
    assert _misrounded(bug(x, w, dt), x, w, dt) >= 4


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_extra_rounding_is_within_the_half_tolerance(dtype):
    """Why the vectors cannot catch it: the planted bug passes the vector's own tolerance."""
    v = default_spec().vector("rms_norm/unit-offset-bf16-001")
    x, w = _inputs(dtype)
    tol = v.tolerances[dtype]
    y = _exact(x, w)
    bug = offset_in_half(x, w, HALF[dtype]).astype(np.float64)
    assert np.all(np.abs(bug - y) <= tol["atol"] + tol["rtol"] * np.abs(y))
