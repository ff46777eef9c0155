"""The primitive ops the shared composites (``backends/composite/``) call, in MLX."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import DomainError

from ._core import floating, integers  # noqa: F401  (floating with like: of like's dtype)
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import _split_heads as split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V)."""
    b, h, t, v = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * v)


def matmul(a, b):
    return a @ b


tanh = mx.tanh


def concat(xs, axis: int):
    return mx.concatenate(list(xs), axis=axis)


def stack(xs, axis: int):
    return mx.stack(list(xs), axis=axis)


def unstack(x, axis: int):
    axis = axis % x.ndim
    return [x[(slice(None),) * axis + (i,)] for i in range(x.shape[axis])]


def where(c, a, b):
    return mx.where(c, a, b)


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    return mx.argmax(x, axis=axis).astype(mx.int64)


def any_(x, axis: int):
    return mx.any(x, axis=axis)


def all_(x):
    return mx.all(x)


def known_all(x) -> bool:
    """True when every element is known to be True (always known in eager MLX)."""
    return bool(mx.all(x).item())


def value_check(ok, message, *values, error=DomainError) -> None:
    """Raise ``error(message(*values))`` unless ``ok``; the message reads NumPy copies (MLX
    has no boolean indexing)."""
    if not bool(ok.item() if isinstance(ok, mx.array) else ok):
        raise error(message(*(np.array(v) if isinstance(v, mx.array) else v for v in values)))


def zeros(shape, like):
    return mx.zeros(shape, dtype=like.dtype)


def falses(shape, like=None):
    return mx.zeros(shape, dtype=mx.bool_)


def full(shape, value: int, like=None):
    """int64 filled with ``value``."""
    return mx.full(shape, value, dtype=mx.int64)


def arange(start: int, stop: int, like=None):
    return mx.arange(start, stop)


def cast(x, like):
    """x in like's dtype."""
    return mx.array(x).astype(like.dtype)


def int64(x):
    return mx.array(x).astype(mx.int64)


def take_rows(x, index):
    """x[b, index[b]] for every row b: (B, S, ...) and (B,) -> (B, ...)."""
    return x[mx.arange(x.shape[0]), index]


def reverse(x, axis: int):
    n = x.shape[axis]
    return mx.take(x, mx.arange(n - 1, -1, -1), axis=axis)
