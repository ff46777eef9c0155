"""What the bfloat16 row of sdpa_fp8 admits of a flash-attn-3-like FP8 kernel, emulated in
NumPy (ml_dtypes): the scores of the float8 inputs accumulated in float32 and scaled by the
descales, the softmax in float32, P V accumulated in float32, the output rounded to
bfloat16. With P kept in float32 every value vector passes with wide headroom; with the
unnormalised P rounded to e4m3fn before P V (flash-attn 3's FP8 path: both of its matrix
products take float8 operands) some fail: the page's "A flash-attn 3 FP8 kernel"."""

import ml_dtypes
import numpy as np
import pytest
from attnspec.spec.vectors import default_spec

E4M3, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16


def per_head(d, heads: int, h_kv: int):
    if d is None:
        return np.float32(1)
    d = np.asarray(d, np.float32)
    return d if d.ndim == 0 else np.repeat(d, heads // h_kv, axis=1)[:, :, None, None]


def fa3_like(v, p_dtype):
    """The vector's output by the emulated kernel; P rounded to p_dtype before P V."""
    x, a = v.inputs, v.attributes
    q, k, val = (np.asarray(x[n], np.float32) for n in "qkv")
    h, h_kv, t, s = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    dq, dk, dv = (per_head(x.get(f"{n}_descale"), h, h_kv) for n in "qkv")  # over H heads
    kr, vr = (np.repeat(y, h // h_kv, axis=1) for y in (k, val))  # (B, H, S, .)
    c = np.float32(a.get("scale") or 1 / np.sqrt(q.shape[-1]))
    scores = (q @ np.swapaxes(kr, -1, -2)) * (dq * dk * c)  # (B, H, T, S)
    if a.get("softcap"):
        scores = a["softcap"] * np.tanh(scores / a["softcap"])
    if a.get("causal"):
        keep = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
        scores = np.where(keep, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))  # the unnormalised P, in [0, 1]
    p = e.astype(p_dtype).astype(np.float32)
    out = (p @ vr) / e.sum(-1, keepdims=True) * dv
    return out.astype(BF16).astype(np.float64)


def worst_ratio(p_dtype) -> dict:
    """Per value vector: max |got - expected| / (atol + rtol |expected|) at bfloat16."""
    ratios = {}
    for v in default_spec().vectors:
        if v.component != "sdpa_fp8" or v.expect != "value" or v.deprecated \
                or any(np.isnan(np.asarray(x, dtype=np.float64)).any() for x in v.inputs.values()):
            continue  # NaN inputs: masked keys' values are left out, not emulated here
        tol, want = v.tolerances["bfloat16"], v.outputs["output"]
        with np.errstate(all="ignore"):
            got = fa3_like(v, p_dtype)
        ratios[v.id] = float(np.max(np.abs(got - want) / (tol["atol"] + tol["rtol"] * np.abs(want))))
    return ratios


def test_an_fp8_kernel_keeping_p_in_float32_passes_with_headroom():
    ratios = worst_ratio(np.float32)
    assert len(ratios) >= 12 and max(ratios.values()) < 1 / 1.5, ratios


def test_an_fp8_kernel_rounding_p_to_e4m3fn_fails_the_bfloat16_row():
    """Documented on the page: P rounded to e4m3fn (3 fraction bits) is not among the correct
    orders the tolerances admit (TOLERANCES.md); this records by how much it misses."""
    ratios = worst_ratio(E4M3)
    failing = sorted(i for i, r in ratios.items() if r > 1)
    assert failing and max(ratios.values()) == pytest.approx(1.75, abs=0.3), ratios
