"""How tensors are written in vector files, and the dtype facts the spec relies on.

A tensor is ``{"dtype": D, "shape": [...], "data": [...]}`` with ``data`` the
row-major flattening. ``D`` is ``"float"`` (cast to the dtype under test),
``"int64"`` or ``"bool"``. Non-finite floats are the strings ``"inf"``,
``"-inf"``, ``"nan"``. Floats are written with Python's shortest round-trip
repr, so reading gives back the exact float64.
"""

from __future__ import annotations

import math

import numpy as np

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def encode(x) -> dict:
    a = np.asarray(x)
    if a.dtype == np.bool_:
        kind, data = "bool", [bool(v) for v in a.ravel()]
    elif np.issubdtype(a.dtype, np.integer):
        kind, data = "int64", [int(v) for v in a.ravel()]
    else:
        kind, data = "float", [_encode_float(float(v)) for v in a.astype(np.float64).ravel()]
    return {"dtype": kind, "shape": list(a.shape), "data": data}


def _encode_float(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def decode(t: dict) -> np.ndarray:
    kind, shape, data = t["dtype"], tuple(t["shape"]), t["data"]
    if kind == "bool":
        return np.array(data, dtype=np.bool_).reshape(shape)
    if kind == "int64":
        return np.array(data, dtype=np.int64).reshape(shape)
    fast = np.array(data)  # a plain list of numbers converts in C; anything else below
    if fast.ndim == 1 and fast.dtype.kind in "fi":
        return fast.astype(np.float64).reshape(shape)
    vals = [_NONFINITE[v] if isinstance(v, str) else float(v) for v in data]
    return np.array(vals, dtype=np.float64).reshape(shape)


def round_bfloat16(x) -> np.ndarray:
    """Round float64 values to the nearest bfloat16 (ties to even), returned as float64."""
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isfinite(f), out, f.astype(np.float64))


def round_to(x, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` and back to float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "bfloat16":
        return round_bfloat16(x)
    with np.errstate(over="ignore"):
        return x.astype(dtype).astype(np.float64)


def representable(x, dtype: str) -> bool:
    """True if every finite value of ``x`` is exactly representable in ``dtype``."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    return bool(np.all(round_to(x[finite], dtype) == x[finite]))


def spacing(x, dtype: str) -> np.ndarray:
    """The ULP of ``dtype`` at each |x| (normal numbers; the subnormal step below)."""
    mant, min_exp = {"float64": (52, -1022), "float32": (23, -126),
                     "float16": (10, -14), "bfloat16": (7, -126)}[dtype]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    e = np.maximum(np.where(ax > 0, e, min_exp), min_exp)
    return np.exp2(e - mant)
