"""Input checks shared by every backend: they read only ``.shape``, so one copy
serves NumPy, torch and TensorFlow arrays alike, and every backend raises the
same error class with the same message for the same mistake."""

from __future__ import annotations

from collections.abc import Mapping

from attnspec.spec.errors import ConfigError, ParameterError, ShapeError


def shape(x) -> tuple:
    return tuple(int(d) for d in x.shape)


def rank(name: str, x, *, min_rank: int = 0, max_rank: int | None = None) -> tuple:
    s = shape(x)
    if len(s) < min_rank or (max_rank is not None and len(s) > max_rank):
        want = (f"rank {min_rank}" if max_rank == min_rank else
                f"rank >= {min_rank}" if max_rank is None else f"rank {min_rank}..{max_rank}")
        raise ShapeError(f"{name} must have {want}, got shape {s}")
    return s


def same(what: str, **dims: int) -> int:
    """All named sizes must be equal: ``same("key width", **{"q.shape[-1]": 4, ...})``."""
    values = set(dims.values())
    if len(values) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in dims.items())
        raise ShapeError(f"{what} mismatch: {detail}")
    return values.pop()


def broadcastable(name: str, x, target: tuple) -> None:
    """``x`` must broadcast to ``target`` (it may not add dimensions or grow it)."""
    s = shape(x)
    ok = len(s) <= len(target) and all(
        a in (1, b) for a, b in zip(reversed(s), reversed(target)))
    if not ok:
        raise ShapeError(f"{name} of shape {s} does not broadcast to {tuple(target)}")


def batch_broadcast(what: str, **shapes: tuple) -> tuple:
    """Broadcast leading (batch) shapes, naming them in the error."""
    out: list[int] = []
    for s in shapes.values():
        s = tuple(s)
        width = max(len(out), len(s))
        a, b = (1,) * (width - len(out)) + tuple(out), (1,) * (width - len(s)) + s
        merged = []
        for x, y in zip(a, b):
            if x != y and 1 not in (x, y):
                detail = ", ".join(f"{k}={tuple(v)}" for k, v in shapes.items())
                raise ShapeError(f"{what}: batch dimensions do not broadcast: {detail}")
            merged.append(max(x, y))
        out = merged
    return tuple(out)


def integer(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer attribute within [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if int(value) != value:
                raise ValueError
            value = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ConfigError(f"{name} must be in {rng}, got {value}")
    return value


def choice(name: str, value, options) -> str:
    if value not in options:
        raise ConfigError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def divides(what: str, heads: int, width: int, width_name: str) -> int:
    if heads < 1 or width % heads:
        raise ConfigError(f"{what}: num_heads={heads} does not divide {width_name}={width}")
    return width // heads


class Params:
    """A view of a flat ``{canonical path: array}`` mapping under a prefix.

    ``p.scope("layers.1").scope("cross_attn")["w_k"]`` reads
    ``layers.1.cross_attn.w_k``, and every error names that whole path.
    """

    __slots__ = ("store", "prefix")

    def __init__(self, store: Mapping, prefix: str = ""):
        self.store, self.prefix = store, prefix

    def path(self, name: str) -> str:
        return self.prefix + name

    def scope(self, name: str) -> Params:
        return Params(self.store, f"{self.prefix}{name}.")

    def __contains__(self, name: str) -> bool:
        return self.path(name) in self.store

    def get(self, name: str, expected: tuple | None = None):
        if name not in self:
            return None
        return self.require(name, expected)

    def require(self, name: str, expected: tuple | None = None):
        """The parameter, its shape checked against ``expected`` (None = any size)."""
        path = self.path(name)
        if path not in self.store:
            raise ParameterError(f"missing parameter {path!r}")
        x = self.store[path]
        if expected is not None:
            s = shape(x)
            if len(s) != len(expected) or any(e is not None and a != e for a, e in zip(s, expected)):
                want = tuple("*" if e is None else e for e in expected)
                raise ParameterError(f"parameter {path!r} has shape {s}, expected {want}")
        return x

    __getitem__ = require

    def keys(self):
        return [k[len(self.prefix):] for k in self.store if k.startswith(self.prefix)]


def params_of(params) -> Params:
    if isinstance(params, Params):
        return params
    if params is None:
        return Params({})
    if not isinstance(params, Mapping):
        raise ParameterError(f"params must be a mapping of canonical paths to arrays, "
                             f"got {type(params).__name__}")
    return Params(params)
