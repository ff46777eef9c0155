"""The primitive ops the shared composites (``backends/composite/``) call, in NumPy."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DomainError, DTypeError

from ._core import floating as _floating
from ._core import integers as _integers
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import _split_heads as split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


def floating(name: str, x, like=None):
    """A float array (DTypeError naming it); with ``like``, of like's dtype."""
    x = _floating(name, x)
    if like is not None and x.dtype != like.dtype:
        raise DTypeError(f"{name} has dtype {x.dtype} but the input has {like.dtype}")
    return x


def integers(name: str, x):
    return _integers(name, x)


def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V)."""
    b, h, t, v = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * v)


def matmul(a, b):
    return a @ b


tanh = np.tanh


def concat(xs, axis: int):
    return np.concatenate(xs, axis=axis)


def stack(xs, axis: int):
    return np.stack(xs, axis=axis)


def unstack(x, axis: int):
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


where = np.where


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    return np.argmax(x, axis=axis).astype(np.int64)


def any_(x, axis: int):
    return np.any(x, axis=axis)


def all_(x):
    return np.all(x)


def known_all(x) -> bool:
    """True when every element is known to be True (always known in NumPy)."""
    return bool(np.all(x))


def value_check(ok, message, *values, error=DomainError) -> None:
    """Raise ``error(message(*values))`` unless ``ok``."""
    if not bool(ok):
        raise error(message(*values))


def zeros(shape, like):
    return np.zeros(shape, dtype=like.dtype)


def falses(shape, like=None):
    return np.zeros(shape, dtype=bool)


def full(shape, value: int, like=None):
    """int64 filled with ``value``."""
    return np.full(shape, value, dtype=np.int64)


def arange(start: int, stop: int, like=None):
    return np.arange(start, stop)


def cast(x, like):
    """x in like's dtype."""
    return np.asarray(x).astype(like.dtype)


def int64(x):
    return np.asarray(x).astype(np.int64)


def take_rows(x, index):
    """x[b, index[b]] for every row b: (B, S, ...) and (B,) -> (B, ...)."""
    return x[np.arange(x.shape[0]), index]


def reverse(x, axis: int):
    return np.flip(x, axis=axis)
