"""What a case module is made of, and the deterministic number source it uses.

Inputs come from :class:`Rng`, a SplitMix64 stream seeded by the component id,
so vectors do not depend on NumPy's generator (whose streams may change) and
regenerate byte for byte. Every float it yields is a multiple of 2**-6 with at
most 8 significant bits, exactly representable in float16 and bfloat16.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..compare import DEFAULT_TOLERANCES
from ..tensor import FLOAT_DTYPES

ALL_DTYPES = FLOAT_DTYPES


@dataclass
class Fn:
    module: str
    inputs: list[str]
    returns: list[str]
    optional: list[str] = field(default_factory=list)
    attributes: dict = field(default_factory=dict)  # optional attributes and their defaults
    required: list[str] = field(default_factory=list)  # attributes without a default
    # Attributes added after a release, with their defaults: listed in the header, but
    # written into a vector only when its case sets them, so released vectors keep their
    # bytes (a vector without the attribute means its default).
    added: dict = field(default_factory=dict)
    params: bool = False
    trace: bool = False
    oracle: Callable | None = None  # (**inputs, **attributes[, params=]) -> {name: mp array}

    def __post_init__(self):
        # an attribute listed as required has no default, whatever `attributes` says
        self.attributes = {k: v for k, v in self.attributes.items() if k not in self.required}

    def header(self) -> dict:
        h = {"module": self.module, "inputs": self.inputs, "optional": self.optional}
        if self.required:
            h["required_attributes"] = self.required
        h.update({"attributes": {**self.attributes, **self.added}, "params": self.params, "trace": self.trace,
                  "returns": self.returns})
        return h


@dataclass
class Component:
    id: str
    functions: dict[str, Fn]
    # The default for the component's new vectors (a released vector keeps the tolerances
    # it was released with: see spec/CITING.md).
    tolerances: dict = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_TOLERANCES.items()})


@dataclass
class Case:
    id: str
    function: str
    description: str
    flags: list[str]
    attributes: dict
    inputs: dict
    params: dict
    expect: str
    dtypes: list[str]
    dtype_note: str | None = None
    error: str | None = None
    error_mentions: list[str] = field(default_factory=list)
    deprecated: bool = False
    # Names of intermediates to keep from the oracle's output (None: all it gives).
    keep: list[str] | None = None
    # Per-dtype {"rtol", "atol"} for this vector (None: derived, else the component's).
    tolerances: dict | None = None
    # The id this case corrects (its id is then that id plus "r2", "r3"...).
    supersedes: str | None = None
    # The vector states only the attributes the case gives (the required ones); the others
    # are left out, so the backend's own defaults are what the vector tests.
    omit_defaults: bool = False
    # A gradient vector: {output name: cotangent array}, exact in float16 and bfloat16.
    cotangents: dict | None = None


def value(id, function, description, *, inputs, attributes=None, params=None, flags=(),
          dtypes=ALL_DTYPES, dtype_note=None, keep=None, deprecated=False, tolerances=None,
          supersedes=None, omit_defaults=False) -> Case:
    return Case(id, function, description, list(flags), dict(attributes or {}), dict(inputs),
                dict(params or {}), "value", list(dtypes), dtype_note, keep=keep,
                deprecated=deprecated, tolerances=tolerances, supersedes=supersedes,
                omit_defaults=omit_defaults)


def error(id, function, description, *, error, mentions=(), inputs, attributes=None,
          params=None, flags=("error",), dtypes=ALL_DTYPES, dtype_note=None,
          deprecated=False, supersedes=None) -> Case:
    return Case(id, function, description, list(flags), dict(attributes or {}), dict(inputs),
                dict(params or {}), "error", list(dtypes), dtype_note, error=error,
                error_mentions=list(mentions), deprecated=deprecated, supersedes=supersedes)


def gradient(id, function, description, *, inputs, cotangents, attributes=None, params=None,
             flags=("gradient",), dtypes=ALL_DTYPES, dtype_note=None, tolerances=None,
             omit_defaults=False) -> Case:
    """A gradient vector: the forward call of a value vector plus a cotangent per output;
    the expected gradients (every float input, every parameter) come from the oracle's VJP."""
    return Case(id, function, description, list(flags), dict(attributes or {}), dict(inputs),
                dict(params or {}), "gradient", list(dtypes), dtype_note, tolerances=tolerances,
                cotangents=dict(cotangents), omit_defaults=omit_defaults)


class Rng:
    """SplitMix64: tiny, fully specified, identical on every platform and version."""

    def __init__(self, name: str):
        self.state = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")

    def _next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def integers(self, lo: int, hi: int, shape=()) -> np.ndarray:
        """Uniform integers in [lo, hi)."""
        n = int(np.prod(shape, dtype=np.int64))
        vals = [lo + self._next() % (hi - lo) for _ in range(n)]
        return np.array(vals, dtype=np.int64).reshape(shape)

    def uniform(self, shape, lo: float = -2.0, hi: float = 2.0, step: float = 2.0**-6) -> np.ndarray:
        """Multiples of ``step`` in [lo, hi]: exact in float16 and bfloat16 for the defaults."""
        k_lo, k_hi = int(np.ceil(lo / step)), int(np.floor(hi / step))
        return self.integers(k_lo, k_hi + 1, shape).astype(np.float64) * step

    def weights(self, shape, scale: float = 1.0) -> np.ndarray:
        """Parameter-like values: multiples of 2**-7 in [-scale, scale], exact in bf16/f16.

        A value with magnitude below 2 needs at most 8 significant bits when it is a
        multiple of 2**-7, which bfloat16 holds exactly.
        """
        step = 2.0 ** -7 if scale <= 2 else 2.0 ** -6
        return self.uniform(shape, -scale, scale, step)

    def bools(self, shape, p_true: float = 0.7) -> np.ndarray:
        return self.integers(0, 1000, shape) < int(p_true * 1000)

    def choice(self, seq):
        return seq[int(self.integers(0, len(seq)))]
