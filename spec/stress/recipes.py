"""Stress inputs rebuilt from JSON recipes: data read by fixed code, never code from a file.

A recipe is ``{"op": ..., ...}``:

- ``uniform``: ``shape, lo, hi, step, stream`` -- the spec's SplitMix64 number source
  (cases/_build.Rng, seeded by ``stream``), vectorised here and equal to it number for number;
  optional ``mul`` and ``add`` (exact: powers of two and short dyadics), then ``set``;
- ``integers``: ``shape, lo, hi, stream`` (Rng.integers), then ``set``;
- ``full``: ``shape, value``, then ``set``;
- ``ints``: ``shape, values`` -- integers given one by one, row-major (sequence offsets,
  block tables), then ``set``;
- ``mask``: boolean ``(B, 1, T, S)`` or ``(T, S)``: ``t, s`` and any of ``causal`` (bottom-right,
  masks.md), ``window`` (W keys, bottom-right), ``left``/``right`` (a local window: keys
  p - left .. p + right), ``chunk`` (keys in the query's chunk of C positions), ``left_pad``
  (per batch row, the number of padded keys at the front), then ``set``;
- ``set``: a list of ``{"index": [per axis: null | i | [start, stop]], "value": v}``, v a
  number or "inf", "-inf", "nan" (or true/false for a mask).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ..errors import VectorFileError

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
MAX_ELEMENTS = 1 << 24  # a recipe above this many elements is refused (bounded reads)
_VALUES = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def splitmix(stream: str, n: int) -> np.ndarray:
    """The first n outputs of cases/_build.Rng(stream), as uint64."""
    state = np.uint64(int.from_bytes(hashlib.sha256(stream.encode()).digest()[:8], "little"))
    with np.errstate(over="ignore"):
        z = state + _GAMMA * np.arange(1, n + 1, dtype=np.uint64)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def integers(stream: str, lo: int, hi: int, shape) -> np.ndarray:
    n = _count(shape)
    z = splitmix(stream, n) % np.uint64(hi - lo)
    return (z.astype(np.int64) + lo).reshape(shape)


def uniform(stream: str, shape, lo=-2.0, hi=2.0, step=2.0 ** -6) -> np.ndarray:
    k_lo, k_hi = int(np.ceil(lo / step)), int(np.floor(hi / step))
    return integers(stream, k_lo, k_hi + 1, shape).astype(np.float64) * step


def _count(shape) -> int:
    n = int(np.prod(shape, dtype=np.int64))
    if n > MAX_ELEMENTS or any(int(d) < 0 for d in shape):
        raise VectorFileError(f"stress recipe: shape {tuple(shape)} is over {MAX_ELEMENTS} elements")
    return n


def build(recipe: dict, where: str = "") -> np.ndarray:
    op = recipe.get("op")
    shape = tuple(int(d) for d in recipe.get("shape", ()))
    if op == "uniform":
        a = uniform(recipe["stream"], shape, recipe["lo"], recipe["hi"], recipe["step"])
        a = a * recipe.get("mul", 1.0) + recipe.get("add", 0.0)
    elif op == "integers":
        a = integers(recipe["stream"], int(recipe["lo"]), int(recipe["hi"]), shape)
    elif op == "full":
        _count(shape)
        a = np.full(shape, _value(recipe["value"]))
    elif op == "ints":
        values = recipe.get("values")
        if (not isinstance(values, list) or len(values) != _count(shape)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
            raise VectorFileError(f"stress recipe {where}: ints needs {_count(shape)} integers "
                                  f"for shape {shape}")
        a = np.array(values, dtype=np.int64).reshape(shape)
    elif op == "mask":
        a = mask(recipe)
    elif op == "bools":
        a = integers(recipe["stream"], 0, 1000, shape) < int(recipe["p_true"] * 1000)
    else:
        raise VectorFileError(f"stress recipe {where}: unknown op {op!r}")
    if "pow2" in recipe:  # each element times 2**e, e uniform in [lo, hi]
        e = recipe["pow2"]
        a = np.ldexp(a, integers(e["stream"], int(e["lo"]), int(e["hi"]) + 1, a.shape))
    if "tile_last" in recipe:  # a (..., 1) draw repeated along the last axis
        a = np.repeat(a, int(recipe["tile_last"]), axis=-1)
    for edit in recipe.get("set", ()):
        if "uniform" in edit:
            u = edit["uniform"]
            target = a[_index(edit["index"])]
            a[_index(edit["index"])] = uniform(u["stream"], np.shape(target), u["lo"], u["hi"], u["step"])
        else:
            a[_index(edit["index"])] = _value(edit["value"])
    return a


def build_inputs(recipes: dict, where: str = "") -> dict:
    """Every input of a vector; ``fill_masked: {mask, value}`` sets the positions where the
    named (already built) boolean input, broadcast, is False."""
    out = {}
    for name, r in recipes.items():
        if not isinstance(r, dict):
            raise VectorFileError(f"stress recipe {where}.{name}: not an object")
        out[name] = build(r, f"{where}.{name}")
    for name, r in recipes.items():
        fill = r.get("fill_masked")
        if fill:
            keep = np.broadcast_to(out[fill["mask"]], out[name].shape)
            out[name] = np.where(keep, out[name], _value(fill["value"]))
    return out


def mask(r: dict) -> np.ndarray:
    t, s = int(r["t"]), int(r["s"])
    _count((t, s))
    i = np.arange(t)[:, None] + (s - t)  # the query's absolute position among the keys
    j = np.arange(s)[None, :]
    keep = np.ones((t, s), dtype=bool)
    if r.get("causal"):
        keep &= j <= i
    if r.get("window") is not None:
        keep &= (j <= i) & (j > i - int(r["window"]))
    if r.get("left") is not None:  # local window (masks.md): j >= p - left
        keep &= j >= i - int(r["left"])
    if r.get("right") is not None:  # j <= p + right
        keep &= j <= i + int(r["right"])
    if r.get("chunk") is not None:  # chunked: same chunk of C positions (floor division)
        keep &= (j // int(r["chunk"])) == (i // int(r["chunk"]))
    if r.get("left_pad") is None:
        return keep
    pads = np.asarray(r["left_pad"], dtype=np.int64)
    _count((len(pads), t, s))
    return (keep[None] & (j[None] >= pads[:, None, None]))[:, None]  # (B, 1, T, S)


def _index(index) -> tuple:
    return tuple(slice(None) if x is None else slice(x[0], x[1]) if isinstance(x, list) else int(x)
                 for x in index)


def _value(v):
    return _VALUES.get(v, v) if isinstance(v, str) else v


def digest(a: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and little-endian bytes."""
    a = np.ascontiguousarray(a)
    kind = "bool" if a.dtype == np.bool_ else "int64" if a.dtype.kind in "iu" else "float64"
    data = a.astype({"bool": np.uint8, "int64": "<i8", "float64": "<f8"}[kind]).tobytes()
    return hashlib.sha256(f"{kind}{list(a.shape)}".encode() + data).hexdigest()
