"""What spec/components/mlx.md says MLX's own kernels do, asserted on the installed mlx:
when a release changes one of these behaviours, this fails and the page is stale.

Runs in the mlx-cpu tox environment; mlx missing there is an import error, not a skip.
Every kernel runs on the CPU stream (the only one of MLX's Linux build).
"""

import math

import mlx.core as mx
import numpy as np
import pytest

CPU = mx.cpu


def _np(x) -> np.ndarray:
    return np.array(x)


def _qkv(t=2, s=3, d=4, seed=0):
    g = np.random.default_rng(seed)
    return tuple(g.standard_normal((1, 1, n, d)).astype(np.float32) for n in (t, s, s))


def _sdpa(q, k, v, keep):
    """mx.fast.scaled_dot_product_attention with a boolean mask (True = may attend)."""
    out = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(k), mx.array(v), scale=0.5,
                                               mask=mx.array(keep[None, None]), stream=CPU)
    return _np(out)


# -- mx.fast.scaled_dot_product_attention --------------------------------------------------

def test_sdpa_averages_the_values_on_a_fully_masked_row():
    """mlx.md: a row whose mask allows no key is the mean of all values (spec: 0)."""
    q, k, v = _qkv()
    keep = np.array([[False, False, False], [True, True, False]])  # (T, S)
    out = _sdpa(q, k, v, keep)  # (1, 1, T, D)
    np.testing.assert_allclose(out[0, 0, 0], v[0, 0].mean(axis=0), rtol=1e-5, atol=1e-6)
    assert np.abs(out[0, 0, 0]).max() > 1e-3  # not the spec's zero row


def test_sdpa_lets_the_nan_of_a_masked_key_through():
    """mlx.md: NaN in a masked key's value reaches the output (spec: the key is left out)."""
    q, k, v = _qkv()
    v[0, 0, 2] = np.nan  # key 2: masked for every query below
    keep = np.array([[True, True, False], [True, False, False]])
    out = _sdpa(q, k, v, keep)
    assert np.isnan(out).all()


# -- mx.softmax ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [mx.float32, mx.float64])
def test_softmax_is_nan_for_plus_inf(dtype):
    """mlx.md: +inf entries give NaN (spec: the +inf entries share the row)."""
    out = _np(mx.softmax(mx.array([math.inf, 0.0, 1.0], dtype=dtype), stream=CPU))
    assert np.isnan(out).all()


@pytest.mark.parametrize("dtype", [mx.float32, mx.float64])
def test_softmax_is_nan_for_a_row_of_minus_inf(dtype):
    """mlx.md: a row of -inf gives NaN (spec: a zero row)."""
    out = _np(mx.softmax(mx.array([-math.inf, -math.inf], dtype=dtype), stream=CPU))
    assert np.isnan(out).all()


# -- mx.fast.rope --------------------------------------------------------------------------

def _rope_reference(x: np.ndarray, position: float, base=10000.0) -> np.ndarray:
    """The spec's rotate-half RoPE of one row (D,) at ``position``, in float64."""
    d = x.shape[-1]
    theta = position * base ** (-np.arange(0, d, 2) / d)  # (D/2,)
    x1, x2 = x[: d // 2], x[d // 2:]
    return np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta),
                           x1 * np.sin(theta) + x2 * np.cos(theta)])


def test_rope_computes_its_angles_in_float32():
    """mlx.md: at position 8192 a float64 rope is ~1e-4 off (float32 angles), at 0 exact."""
    d = 8
    x = np.ones((1, 1, 1, d))  # (B, H, T, D)

    def rope(offset):
        out = mx.fast.rope(mx.array(x, dtype=mx.float64), d, traditional=False, base=10000.0,
                           scale=1.0, offset=offset, stream=CPU)
        assert out.dtype == mx.float64
        return _np(out)[0, 0, 0]

    far = np.abs(rope(8192) - _rope_reference(x[0, 0, 0], 8192.0)).max()
    assert 1e-6 < far < 1e-2, far  # float64 angles would be ~1e-12 off
    near = np.abs(rope(1) - _rope_reference(x[0, 0, 0], 1.0)).max()
    assert near < 1e-6, near


def test_rope_refuses_width_zero():
    """mlx.md: dims=0 is a ValueError (spec: a width-0 rope is the identity)."""
    x = mx.zeros((1, 1, 2, 0), dtype=mx.float32)
    with pytest.raises(ValueError, match="dims"):
        mx.fast.rope(x, 0, traditional=False, base=10000.0, scale=1.0, offset=0, stream=CPU)


# -- float64 transcendentals ---------------------------------------------------------------

X = np.linspace(-3.0, 3.0, 601)
TRANSCENDENTALS = {
    "exp": np.exp, "sin": np.sin, "cos": np.cos, "sigmoid": lambda t: 1.0 / (1.0 + np.exp(-t)),
    "erf": np.vectorize(math.erf),
}


@pytest.mark.parametrize("name", sorted(TRANSCENDENTALS))
def test_float64_transcendentals_are_float32_accurate(name):
    """mlx.md: float64 exp, sin, cos, erf, sigmoid on the CPU are float64 arrays computed to
    float32 accuracy (errors ~1e-8..1e-6, where float64 would be ~1e-16)."""
    out = getattr(mx, name)(mx.array(X, dtype=mx.float64), stream=CPU)
    assert out.dtype == mx.float64
    err = np.abs(_np(out) - TRANSCENDENTALS[name](X)).max()
    assert 1e-10 < err < 1e-4, err


@pytest.mark.parametrize("name", ["sqrt", "log", "tanh"])
def test_float64_other_unary_ops_are_float64_accurate(name):
    """The control: these float64 kernels are float64-accurate, so the page names only the
    five above (a release that fixes or breaks one fails here or there)."""
    x = np.linspace(0.1, 3.0, 291)
    out = _np(getattr(mx, name)(mx.array(x, dtype=mx.float64), stream=CPU))
    np.testing.assert_allclose(out, getattr(np, name)(x), rtol=1e-14, atol=0)


# -- conventions the converters must bridge -----------------------------------------------

def test_linear_weight_is_out_by_in():
    """mlx.md: nn.Linear computes y = x Wᵀ + b with weight (out, in) (spec: W (in, out))."""
    import mlx.nn as nn

    lin = nn.Linear(3, 5)
    assert lin.weight.shape == (5, 3)
    x = np.arange(3, dtype=np.float32)[None]  # (1, in)
    want = x @ _np(lin.weight).T + _np(lin.bias)
    np.testing.assert_allclose(_np(lin(mx.array(x))), want, rtol=1e-6)


def test_fast_norms_agree_with_the_spec_formulas():
    """mlx.md: mx.fast.layer_norm (biased variance, eps inside the root) and mx.fast.rms_norm
    (eps inside the root) are the spec's layer_norm and rms_norm."""
    g = np.random.default_rng(3)
    x, w, b = (g.standard_normal(s).astype(np.float32) for s in ((2, 6), (6,), (6,)))
    eps = 1e-5
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ln = _np(mx.fast.layer_norm(mx.array(x), mx.array(w), mx.array(b), eps, stream=CPU))
    np.testing.assert_allclose(ln, (x - mu) / np.sqrt(var + eps) * w + b, rtol=1e-5, atol=1e-6)
    rms = _np(mx.fast.rms_norm(mx.array(x), mx.array(w), eps, stream=CPU))
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    np.testing.assert_allclose(rms, want, rtol=1e-5, atol=1e-6)


def test_multi_head_attention_has_no_bias_by_default_and_returns_no_weights():
    """mlx.md: nn.MultiHeadAttention(bias=False) by default; its call returns the output only."""
    import mlx.nn as nn

    m = nn.MultiHeadAttention(8, 2)
    assert "bias" not in m.query_proj and "bias" not in m.out_proj
    x = mx.zeros((1, 3, 8))
    out = m(x, x, x)
    assert isinstance(out, mx.array) and out.shape == (1, 3, 8)


def test_additive_causal_mask_uses_the_dtype_minimum_not_minus_inf():
    """mlx.md: nn.MultiHeadAttention.create_additive_causal_mask is finfo.min above the diagonal."""
    import mlx.nn as nn

    m = _np(nn.MultiHeadAttention.create_additive_causal_mask(3))
    assert np.isfinite(m).all()
    assert m[0, 1] == np.finfo(np.float32).min and m[1, 0] == 0
