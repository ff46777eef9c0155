"""Small TensorFlow helpers shared by the component modules.

Data-dependent checks (a token id past the vocabulary, a negative weight) cannot
raise while a graph is being traced, since the values do not exist yet. They go
through :func:`value_check`: eagerly it raises at once; inside a graph built by
the backend's mode wrapper (``mode=graph`` / ``mode=xla``) it records the
condition as an extra output of the graph, and the wrapper raises the same
spec error, with the same message, once the graph has run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import DomainError, DTypeError

from .. import _checks as check

FLOATS = (tf.float64, tf.float32, tf.float16, tf.bfloat16)
INTS = (tf.int64, tf.int32, tf.int16, tf.int8, tf.uint8, tf.uint16, tf.uint32, tf.uint64)


def tensor(x) -> tf.Tensor:
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def floating(name: str, x) -> tf.Tensor:
    """A floating tensor (float64/32/16, bfloat16), or DTypeError naming the argument."""
    return check.floating_dtype(name, tensor(x))


def boolean(name: str, x) -> tf.Tensor:
    x = tensor(x)
    if x.dtype != tf.bool:
        raise DTypeError(f"{name} must be boolean (True = may attend), got {x.dtype.name} "
                         f"with shape {tuple(x.shape)}")
    return x


def integers(name: str, x) -> tf.Tensor:
    x = tensor(x)
    if x.dtype not in INTS:
        raise DTypeError(f"{name} must hold integer token ids, got {x.dtype.name} "
                         f"with shape {tuple(x.shape)}")
    return x


def const(value, like) -> tf.Tensor:
    """A scalar of ``like``'s dtype."""
    return tf.constant(value, dtype=like.dtype)


def zeros(like) -> tf.Tensor:
    return tf.zeros_like(like)


def size(x) -> int:
    return int(np.prod([int(d) for d in x.shape]))


# ---- data-dependent checks --------------------------------------------------------------

_local = threading.local()


class Pending:
    """A check recorded while tracing: ``ok`` (scalar bool) and the values its message needs."""

    __slots__ = ("ok", "values", "message", "error")

    def __init__(self, ok, values, message, error):
        self.ok, self.values, self.message, self.error = ok, values, message, error


def collecting(into: list | None):
    """Set (or clear, with None) the list that value checks are recorded into; returns the old."""
    old = getattr(_local, "pending", None)
    _local.pending = into
    return old


def value_check(ok, message: Callable[..., str], *values, error=DomainError) -> None:
    """Raise ``error(message(*numpy values))`` unless ``ok`` (a scalar bool tensor) holds."""
    if tf.executing_eagerly():
        if not bool(ok):
            raise error(message(*[np.asarray(v) for v in values]))
        return
    pending = getattr(_local, "pending", None)
    if pending is not None:
        pending.append(Pending(ok, list(values), message, error))
    else:  # a graph the backend does not manage: a runtime assertion
        tf.debugging.Assert(ok, [f"attnspec {error.__name__}: a value check failed", *values])


def in_range(name: str, ids, lo: int, hi: int, describe: Callable[[int, int], str]) -> None:
    """Every id in [lo, hi); ``describe(min, max)`` writes the DomainError message."""
    if size(ids) == 0:
        return
    mn, mx = tf.reduce_min(ids), tf.reduce_max(ids)
    value_check((mn >= lo) & (mx < hi), lambda a, b: describe(int(a), int(b)), mn, mx)


def take(table, ids, hi: int):
    """table[ids] along axis 0; ids are clipped so a graph never faults before its check runs."""
    return tf.gather(table, tf.clip_by_value(tf.cast(ids, tf.int64), 0, max(hi - 1, 0)))


def matmul(x, w):
    """x @ w over the last axis of x (any rank >= 1), w of shape (in, out)."""
    if len(x.shape) == 1:
        return tf.linalg.matvec(w, x, transpose_a=True)
    return x @ w


def same_device(name: str, x, like) -> None:
    """Every array of this backend is on its one device: nothing to check."""
