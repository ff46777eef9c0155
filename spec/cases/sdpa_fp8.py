"""sdpa_fp8: attention on float8 (e4m3fn, e5m2) q, k, v with descales, as flash-attn 3.

The float8 inputs are stored as float64 values exact in their format (and, being float8,
exact in float16 and bfloat16 too); the format is the attribute ``fp8_format``.
"""

import numpy as np

from ..oracle.sdpa_fp8 import sdpa_fp8 as oracle
from ._build import Component, Fn, error, gradient, value

COMPONENT = Component("sdpa_fp8", {
    "sdpa_fp8": Fn(module="attention", inputs=["q", "k", "v", "q_descale", "k_descale", "v_descale"],
                   optional=["q_descale", "k_descale", "v_descale"],
                   attributes={"fp8_format": "e4m3fn", "scale": None, "causal": False,
                               "num_kv_heads": None, "softcap": None},
                   returns=["output"], oracle=oracle),
})

# fraction bits, smallest normal exponent, largest exponent (e4m3fn's 2^8 only up to 1.75)
FORMATS = {"e4m3fn": (3, -6, 8), "e5m2": (2, -14, 15)}


def fp8(rng, shape, fmt="e4m3fn", lo=-1, hi=2, zeros=True):
    """Float8 values of ``fmt``: a random sign, exponent in [lo, hi], mantissa and (with
    ``zeros``) about one zero in sixteen; every value exact in the format."""
    bits = FORMATS[fmt][0]
    sign = np.where(rng.integers(0, 2, shape) == 1, -1.0, 1.0)
    e = rng.integers(lo, hi + 1, shape)
    m = rng.integers(0, 2 ** bits, shape)
    if fmt == "e4m3fn":
        m = np.where(e == 8, np.minimum(m, 6), m)  # 2^8 * 1.875 is e4m3fn's NaN encoding
    x = sign * (1 + m / 2.0 ** bits) * 2.0 ** e
    if zeros:
        x = np.where(rng.integers(0, 16, shape) == 0, 0.0, x)
    return x


def qkv(rng, b, h, h_kv, t, s, kw=4, vw=3, fmt="e4m3fn", q=(-1, 2), k=(-1, 2), v=(-1, 2)):
    """q (B, H, T, K), k (B, H_kv, S, K), v (B, H_kv, S, V) on the fp8 grid, exponents in
    the given ranges."""
    return {"q": fp8(rng, (b, h, t, kw), fmt, *q), "k": fp8(rng, (b, h_kv, s, kw), fmt, *k),
            "v": fp8(rng, (b, h_kv, s, vw), fmt, *v)}


def descales(q=None, k=None, v=None):
    """The given descales as float64 arrays (a float: per tensor, shape ())."""
    return {f"{n}_descale": np.asarray(d, dtype=np.float64)
            for n, d in zip("qkv", (q, k, v)) if d is not None}


def cases(rng):
    x = qkv(rng, 1, 2, 2, 3, 4, q=(0, 3), k=(-1, 2))
    yield value("sdpa_fp8/basic-001", "sdpa_fp8",
                "e4m3fn, a descale per tensor for each of q, k, v (0.125, 0.375, 0.3125): the "
                "output is sdpa of q * 0.125, k * 0.375, v * 0.3125. Dropping a descale, or "
                "applying v's to the scores, fails.",
                inputs={**x, **descales(0.125, 0.375, 0.3125)}, flags=["basic", "scale"])
    x = qkv(rng, 2, 4, 2, 3, 4, q=(-1, 2), k=(-1, 2), v=(-1, 2))
    for name, (lo, hi) in (("q", (5, 7)), ("k", (5, 7)), ("v", (4, 6))):
        x[name][:, -1] = fp8(rng, x[name][:, -1].shape, "e4m3fn", lo, hi)  # the last kv group
    yield value("sdpa_fp8/per-head-001", "sdpa_fp8",
                "e4m3fn, GQA H = 4 over H_kv = 2, descales (B, H_kv) = (2, 2) as flash-attn 3: "
                "kv head 1's values are about 2^6 larger and their descales 2^6 to 2^8 smaller. "
                "Query head h takes q_descale[b, h // 2]; a per-tensor descale (the first "
                "head's), or q_descale indexed by h % 2, fails.",
                inputs={**x, **descales([[0.5, 2.0 ** -7], [0.375, 2.0 ** -8]],
                                        [[0.25, 2.0 ** -6], [0.75, 1.5 * 2.0 ** -7]],
                                        [[1.0, 2.0 ** -5], [0.5, 1.25 * 2.0 ** -6]])},
                attributes={"num_kv_heads": 2}, flags=["per-head", "gqa", "head-grouping"])
    x = qkv(rng, 1, 2, 1, 3, 4, fmt="e5m2", q=(10, 14), k=(-14, -11), v=(-2, 2))
    yield value("sdpa_fp8/e5m2-001", "sdpa_fp8",
                "e5m2 values outside e4m3fn's range: q in 2^10..2^14 (descale 2^-13), k in "
                "2^-14..2^-11 (descale 2^11), MQA (H_kv = 1). Reading them as e4m3fn (an "
                "overflow to NaN, a flush to 0, or the bits reinterpreted) fails.",
                inputs={**x, **descales(2.0 ** -13, 2.0 ** 11, 0.5)},
                attributes={"fp8_format": "e5m2", "num_kv_heads": 1},
                flags=["mqa", "exponent-spread", "underflow", "overflow"])
    x = qkv(rng, 2, 2, 2, 3, 5)
    yield value("sdpa_fp8/causal-001", "sdpa_fp8",
                "causal with T = 3 < S = 5, aligned bottom-right (query i sees keys j <= i + 2), "
                "per-(B, H_kv) descales, scale 0.375.",
                inputs={**x, **descales([[0.5, 0.25], [1.0, 0.75]], [[0.75, 0.5], [0.25, 1.5]],
                                        [[0.5, 1.0], [2.0, 0.25]])},
                attributes={"causal": True, "scale": 0.375}, flags=["causal", "t-ne-s", "per-head"])
    x = qkv(rng, 1, 2, 2, 3, 4, q=(1, 4), k=(1, 4))
    yield value("sdpa_fp8/softcap-001", "sdpa_fp8",
                "softcap = 4 on the dequantised scores (descales 0.5 and 0.25 on q, k in "
                "2^1..2^4): scores up to about 16 are capped, so a cap before the descales "
                "fails.",
                inputs={**x, **descales(0.5, 0.25, 0.75)}, attributes={"softcap": 4.0},
                flags=["softcap", "saturation"])
    x = qkv(rng, 2, 2, 2, 2, 4)
    yield value("sdpa_fp8/zero-descale-001", "sdpa_fp8",
                "Zero descales: q_descale 0 for batch entry 1 (every score 0: the uniform mean "
                "of its values) and v_descale 0 for kv head 0 (a zero output there).",
                inputs={**x, **descales([[0.5, 0.25], [0.0, 0.0]], 0.5,
                                        [[0.0, 0.5], [0.0, 1.5]])},
                flags=["zero", "per-head", "edge"])
    x = qkv(rng, 1, 2, 2, 2, 3)
    x["q"][0, 0, 0, :2] = [448.0, -448.0]
    x["k"][0, 1, 2, 1:3] = [-448.0, 448.0]
    x["v"][0, 0, 1, 0] = 448.0
    yield value("sdpa_fp8/saturate-001", "sdpa_fp8",
                "e4m3fn's largest finite values +-448 (S.1111.110) in q, k and v, with per-head "
                "descales 2^-8 where they are (448 * 2^-8 = 1.75).",
                inputs={**x, **descales([[2.0 ** -8, 0.5]], [[0.5, 2.0 ** -8]], [[2.0 ** -8, 0.5]])},
                flags=["saturation", "per-head", "edge"])
    x = qkv(rng, 1, 2, 2, 2, 3, fmt="e5m2", q=(12, 15), k=(-2, 1), v=(-2, 1))
    x["q"][0, 1, 1, :2] = [57344.0, -57344.0]
    yield value("sdpa_fp8/saturate-002", "sdpa_fp8",
                "e5m2's largest finite value +-57344 (S.11110.11) in q with q_descale 2^-15 "
                "(57344 * 2^-15 = 1.75).",
                inputs={**x, **descales(2.0 ** -15, 0.5, 1.0)}, attributes={"fp8_format": "e5m2"},
                flags=["saturation", "edge"])
    x = qkv(rng, 1, 2, 2, 3, 3)
    x["v"][0, 0, 2, 1] = np.nan
    x["k"][0, 1, 2, 0] = np.nan
    yield value("sdpa_fp8/nan-001", "sdpa_fp8",
                "e4m3fn NaN encodings (S.1111.111; e4m3fn has no inf) in the last key of each "
                "head, causal T = S = 3: rows 0 and 1 never see it and stay finite; row 2 is "
                "NaN where the NaN is multiplied in (head 0's value column 1; all of head 1).",
                inputs={**x, **descales(0.5, 0.5, 0.5)}, attributes={"causal": True},
                flags=["nan-propagation", "non-finite", "causal"])
    x = qkv(rng, 1, 2, 2, 3, 3, kw=4)
    yield value("sdpa_fp8/defaults-001", "sdpa_fp8",
                "Defaults left out: no descale (1), fp8_format e4m3fn (the values have three "
                "fraction bits: not on e5m2's grid), scale 1/sqrt(K) = 1/2, not causal (T = S), "
                "no softcap.",
                inputs=x, omit_defaults=True, flags=["defaults"])
    x = qkv(rng, 1, 2, 2, 2, 3, v=(3, 5))
    yield value("sdpa_fp8/mixed-001", "sdpa_fp8",
                "Only some descales given: q per tensor (0.25), k none (1), v per head "
                "((1, 2) = (2^-4, 2^-3)).",
                inputs={**x, **descales(0.25, None, [[2.0 ** -4, 2.0 ** -3]])},
                flags=["per-head", "optional-params"])
    x = qkv(rng, 1, 2, 2, 3, 5, kw=4, q=(1, 3), k=(1, 3))
    yield value("sdpa_fp8/defaults-002", "sdpa_fp8",
                "Every attribute left out with q, k in 2^1..2^4 (e4m3fn): scores up to a few "
                "hundred, so a default cap (Gemma 2's 50) fails.",
                inputs=x, omit_defaults=True, flags=["defaults", "softcap"])
    yield from large_cases(rng)
    yield from error_cases(rng)


def large_cases(rng):
    """Kernel sizes (not the stress family of spec/STRESS.md: they are ordinary vectors)."""
    x = qkv(rng, 1, 2, 2, 33, 65, kw=128, vw=128, q=(-2, 1), k=(-2, 1))
    for name, (lo, hi) in (("q", (4, 7)), ("k", (4, 7)), ("v", (6, 8))):
        x[name][:, 1] = fp8(rng, x[name][:, 1].shape, "e4m3fn", lo, hi)
    yield value("sdpa_fp8/large-001", "sdpa_fp8",
                "Kernel size: T = 33 over S = 65 (both odd: partial tiles), K = V = 128, causal "
                "bottom-right, per-head descales that differ by 2^8 (head 1's values are 2^6 to "
                "2^8 larger): a per-tensor descale fails.",
                inputs={**x, **descales([[0.25, 2.0 ** -8]], [[0.125, 2.0 ** -9]],
                                        [[1.0, 2.0 ** -8]])},
                attributes={"causal": True, "scale": 2.0 ** -5},
                flags=["tile-boundary", "t-ne-s", "per-head", "exponent-spread", "causal"])
    x = qkv(rng, 1, 4, 1, 65, 33, kw=128, vw=64, fmt="e5m2", q=(8, 12), k=(-12, -8), v=(-1, 1))
    yield value("sdpa_fp8/large-002", "sdpa_fp8",
                "Kernel size, e5m2: T = 65 over S = 33 (T > S), K = 128, V = 64, MQA (4 query "
                "heads over 1 kv head), q in 2^8..2^12 and k in 2^-12..2^-8 (descales 2^-12 and "
                "2^8), not causal.",
                inputs={**x, **descales(2.0 ** -12, 2.0 ** 8, 0.5)},
                attributes={"fp8_format": "e5m2", "num_kv_heads": 1, "scale": 2.0 ** -4},
                flags=["tile-boundary", "t-ne-s", "mqa", "exponent-spread"])


def error_cases(rng):
    x = qkv(rng, 2, 4, 2, 2, 3)
    ds = descales(0.5, 0.5, 0.5)
    yield error("sdpa_fp8/format-001", "sdpa_fp8", "fp8_format 'e4m3' (not a format name).",
                inputs={**x, **ds}, attributes={"fp8_format": "e4m3", "num_kv_heads": 2},
                error="ConfigError", mentions=["fp8_format", "e4m3"])
    off = {**x, "q": x["q"].copy()}
    off["q"][1, 2, 0, 3] = 1.0625  # four fraction bits
    yield error("sdpa_fp8/off-grid-001", "sdpa_fp8",
                "q holds 1.0625 (1.0001 in binary): not an e4m3fn value.",
                inputs={**off, **ds}, attributes={"num_kv_heads": 2},
                error="DomainError", mentions=["q", "e4m3fn"])
    off = qkv(rng, 2, 4, 2, 2, 3, fmt="e5m2")
    off["k"][0, 1, 1, 2] = 1.125  # three fraction bits: e4m3fn's, not e5m2's
    yield error("sdpa_fp8/off-grid-002", "sdpa_fp8",
                "k holds 1.125 (1.001 in binary) under fp8_format e5m2 (two fraction bits).",
                inputs={**off, **ds}, attributes={"fp8_format": "e5m2", "num_kv_heads": 2},
                error="DomainError", mentions=["k", "e5m2"])
    off = {**x, "v": x["v"].copy()}
    off["v"][0, 0, 2, 1] = np.inf
    yield error("sdpa_fp8/inf-e4m3fn-001", "sdpa_fp8",
                "v holds +inf under e4m3fn, which has no infinity (its casts give NaN).",
                inputs={**off, **ds}, attributes={"num_kv_heads": 2},
                error="DomainError", mentions=["v", "e4m3fn"])
    yield error("sdpa_fp8/descale-shape-001", "sdpa_fp8",
                "k_descale of shape (2, 4) = (B, H): per kv head is (B, H_kv) = (2, 2).",
                inputs={**x, **descales(0.5, np.full((2, 4), 0.5), 0.5)},
                attributes={"num_kv_heads": 2},
                error="ShapeError", mentions=["k_descale", "(2, 4)", "(2, 2)"])
    yield error("sdpa_fp8/descale-negative-001", "sdpa_fp8", "q_descale = -0.5.",
                inputs={**x, **descales(-0.5, 0.5, 0.5)}, attributes={"num_kv_heads": 2},
                error="DomainError", mentions=["q_descale"])
    yield error("sdpa_fp8/descale-non-finite-001", "sdpa_fp8",
                "v_descale (B, H_kv) with +inf at (1, 0).",
                inputs={**x, **descales(0.5, 0.5, [[0.5, 0.5], [np.inf, 0.5]])},
                attributes={"num_kv_heads": 2},
                error="DomainError", mentions=["v_descale"])
    yield error("sdpa_fp8/rank-001", "sdpa_fp8",
                "q of rank 3 (H, T, K): sdpa_fp8 takes (B, H, T, K).",
                inputs={"q": x["q"][0], "k": x["k"][0], "v": x["v"][0]},
                error="ShapeError", mentions=["q", "(4, 2, 4)"])


def grad_cases(r):
    def grad(id, description, x, attrs=None, flags=(), omit=False):
        b, h, t = x["q"].shape[:3]
        cot = {"output": r.uniform((b, h, t, x["v"].shape[3]))}
        return gradient(id, "sdpa_fp8", description, inputs=x, cotangents=cot,
                        attributes=attrs or {}, flags=["gradient", *flags], omit_defaults=omit)

    # inputs and descales of order 1: d(descale) sums products of both, so large raw values
    # would make it, and the vector's one tolerance, large
    small = {"q": (-2, 0), "k": (-2, 0), "v": (-2, 0)}
    yield grad("sdpa_fp8/grad-001", "e4m3fn, no descale given: dq, dk, dv are the gradients "
               "w.r.t. the dequantised inputs (here the inputs themselves), causal T = S = 3.",
               qkv(r, 1, 2, 2, 3, 3), {"causal": True}, flags=["basic", "causal"])
    yield grad("sdpa_fp8/grad-002", "GQA H = 4 over H_kv = 2, causal, descales (B, H_kv): dq = "
               "q_descale[b, g] * dq^ (dq^ w.r.t. the dequantised q), and d(q_descale)[b, g] "
               "sums dq^ * q over the two query heads of group g.",
               {**qkv(r, 2, 4, 2, 2, 3, **small), **descales([[0.5, 2.0], [1.0, 1.5]],
                                                             [[2.0, 0.5], [1.0, 0.75]],
                                                             [[1.0, 0.5], [1.5, 2.0]])},
               {"causal": True, "num_kv_heads": 2}, flags=["gqa", "per-head", "causal"])
    yield grad("sdpa_fp8/grad-003", "e5m2 with softcap = 3, per-tensor descales of q and v "
               "only (k's absent: 1).",
               {**qkv(r, 1, 2, 2, 2, 3, fmt="e5m2", **small), **descales(2.0, None, 0.5)},
               {"fp8_format": "e5m2", "softcap": 3.0}, flags=["softcap"])
    yield grad("sdpa_fp8/grad-004", "Defaults left out, no descale: the gradients w.r.t. the "
               "dequantised inputs.", qkv(r, 1, 2, 2, 3, 3), flags=["defaults"], omit=True)
