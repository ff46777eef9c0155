"""Invariants of sdpa_fp8 (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

_PROFILE = settings.default
_FEWER = settings(_PROFILE, max_examples=max(3, _PROFILE.max_examples // 4))

BITS = {"e4m3fn": 3, "e5m2": 2}  # fraction bits


@st.composite
def fp8_values(draw, shape, fmt, lo=-2, hi=1):
    """Values of float8 ``fmt``, sign * (1 + m / 2^bits) * 2^e with e in [lo, hi] (normal in
    both formats, so halving one stays in the format), or 0."""
    n = int(np.prod(shape))
    bits = BITS[fmt]
    e = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    m = draw(st.lists(st.integers(0, 2 ** bits - 1), min_size=n, max_size=n))
    sign = draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 1.0]), min_size=n, max_size=n))
    x = np.array(sign) * (1 + np.array(m) / 2.0 ** bits) * 2.0 ** np.array(e, dtype=np.float64)
    return x.reshape(shape)


# descales of at most two significant bits in [2^-2, 3]: x * d is exact in bfloat16
descale_value = st.sampled_from([0.25, 0.375, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0])


@st.composite
def problems(draw):
    """q (B, H, T, K), k, v (B, H_kv, S, .) in a format, descales per tensor or (B, H_kv)
    (or absent), and the attributes."""
    fmt = draw(st.sampled_from(sorted(BITS)))
    b, h_kv, g = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    t, s, kw, vw = (draw(st.integers(1, 3)) for _ in range(4))
    x = {"q": draw(fp8_values((b, h_kv * g, t, kw), fmt)),
         "k": draw(fp8_values((b, h_kv, s, kw), fmt)),
         "v": draw(fp8_values((b, h_kv, s, vw), fmt))}
    for name in ("q", "k", "v"):
        layout = draw(st.sampled_from(["none", "tensor", "head"]))
        if layout == "tensor":
            x[f"{name}_descale"] = np.asarray(draw(descale_value))
        elif layout == "head":
            x[f"{name}_descale"] = np.array(draw(st.lists(descale_value, min_size=b * h_kv,
                                                          max_size=b * h_kv))).reshape(b, h_kv)
    attrs = {"fp8_format": fmt, "causal": draw(st.booleans())}
    if g > 1:
        attrs["num_kv_heads"] = h_kv
    return x, attrs


def dequantised(x: dict, name: str, heads: int, h_kv: int):
    """x[name] * its descale in float64 (exact), the descale read per head as the page says."""
    d = x.get(f"{name}_descale")
    if d is None:
        return x[name]
    if np.ndim(d) == 0:
        return x[name] * d
    return x[name] * np.repeat(d, heads // h_kv, axis=1)[:, :, None, None]


@_FEWER
@given(p=problems())
def test_fp8_attention_equals_sdpa_on_the_dequantised_inputs(ops, p):
    x, attrs = p
    out = ops.sdpa_fp8(**x, **attrs)
    h, h_kv = x["q"].shape[1], x["k"].shape[1]
    q, k, v = (dequantised(x, n, h if n == "q" else h_kv, h_kv) for n in ("q", "k", "v"))
    t, s = q.shape[2], k.shape[2]
    mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)  # bottom-right
    kw = {"mask": mask} if attrs["causal"] else {}
    want, _ = ops.sdpa(q=q, k=k, v=v, **kw, num_kv_heads=attrs.get("num_kv_heads"))
    ops.assert_close(out, want, scale=4)


@_FEWER
@given(p=problems(), which=st.sampled_from(["q", "k", "v"]))
def test_doubling_a_descale_and_halving_its_input_changes_nothing(ops, p, which):
    """(x / 2) * (2 d) = x d exactly: halving stays in the format (every exponent >= -2)."""
    x, attrs = p
    out = ops.sdpa_fp8(**x, **attrs)
    y = dict(x)
    y[which] = x[which] / 2
    y[f"{which}_descale"] = 2 * np.asarray(x.get(f"{which}_descale", 1.0))
    ops.assert_close(ops.sdpa_fp8(**y, **attrs), out, scale=1, what=f"{which} halved")


@_FEWER
@given(p=problems())
def test_a_per_tensor_descale_equals_the_per_head_one_filled_with_it(ops, p):
    x, attrs = p
    b, h_kv = x["k"].shape[:2]
    y = dict(x)
    for name in ("q", "k", "v"):
        d = x.get(f"{name}_descale")
        if d is not None and np.ndim(d) == 0:
            y[f"{name}_descale"] = np.full((b, h_kv), float(d))
    ops.assert_close(ops.sdpa_fp8(**y, **attrs), ops.sdpa_fp8(**x, **attrs), scale=1)
