"""The primitive ops the shared composites (``backends/composite/``) call, in TensorFlow.

Every op works eagerly and while tracing a graph (``mode=graph`` / ``mode=xla``):
``known_all`` is only True when the values are known (eagerly), and ``value_check`` goes
through :func:`._core.value_check`, which a traced graph reports after it has run.
"""

from __future__ import annotations

import tensorflow as tf
from attnspec.spec.errors import DTypeError

from ._core import floating as _floating
from ._core import integers, size, tensor, value_check  # noqa: F401
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import _split_heads as split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


def floating(name: str, x, like=None):
    """A floating tensor (DTypeError naming it); with ``like``, of like's dtype."""
    x = _floating(name, x)
    if like is not None and x.dtype != like.dtype:
        raise DTypeError(f"{name} has dtype {x.dtype.name} but the input has {like.dtype.name}")
    return x


def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V)."""
    b, h, t, v = (int(d) for d in x.shape)
    return tf.reshape(tf.transpose(x, (0, 2, 1, 3)), (b, t, h * v))


def matmul(a, b):
    return a @ b


tanh = tf.tanh


def concat(xs, axis: int):
    return tf.concat(xs, axis=axis)


def stack(xs, axis: int):
    return tf.stack(xs, axis=axis)


def unstack(x, axis: int):
    return tf.unstack(x, axis=axis)


def where(c, a, b):
    """tf.where with a Python scalar on either side taking the other side's dtype."""
    if not tf.is_tensor(a):
        a = tf.constant(a, dtype=tensor(b).dtype)
    if not tf.is_tensor(b):
        b = tf.constant(b, dtype=a.dtype)
    return tf.where(c, a, b)


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    if x.dtype == tf.bool:
        x = tf.cast(x, tf.int32)
    return tf.argmax(x, axis=axis, output_type=tf.int64)


def any_(x, axis: int):
    return tf.reduce_any(x, axis=axis)


def all_(x):
    return tf.reduce_all(x) if size(x) else tf.constant(True)


def known_all(x) -> bool:
    """Every element is known to be True: eagerly; a graph runs on (to max_len)."""
    return tf.executing_eagerly() and bool(tf.reduce_all(x))


def zeros(shape, like):
    return tf.zeros(shape, dtype=like.dtype)


def falses(shape, like=None):
    return tf.zeros(shape, dtype=tf.bool)


def full(shape, value: int, like=None):
    """int64 filled with ``value``."""
    return tf.fill(shape, tf.constant(value, tf.int64))


def arange(start: int, stop: int, like=None):
    return tf.range(start, stop, dtype=tf.int64)


def cast(x, like):
    """x in like's dtype."""
    return tf.cast(x, like.dtype)


def int64(x):
    return tf.cast(x, tf.int64)


def take_rows(x, index):
    """x[b, index[b]] for every row b: (B, S, ...) and (B,) -> (B, ...)."""
    return tf.gather(x, index, batch_dims=1)


def reverse(x, axis: int):
    return tf.reverse(x, axis=[axis])
