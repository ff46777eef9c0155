"""The primitive ops the shared composites (``backends/composite/``) call, in jax.numpy.
Arrays are created on JAX's default device, which the backend sets to the one asked for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from ._core import floating, host, integers  # noqa: F401  (dtype checks naming the argument)
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import _split_heads as split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


@jax.jit
def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V)."""
    b, h, t, v = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * v)


def matmul(a, b):
    return a @ b


tanh = jnp.tanh


def concat(xs, axis: int):
    return jnp.concatenate(xs, axis=axis)


def stack(xs, axis: int):
    return jnp.stack(xs, axis=axis)


def unstack(x, axis: int):
    return [jnp.take(x, i, axis=axis) for i in range(x.shape[axis])]


def where(c, a, b):
    return jnp.where(c, a, b)


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    return jnp.argmax(x, axis=axis).astype(jnp.int64)


def any_(x, axis: int):
    return jnp.any(x, axis=axis)


def all_(x):
    return jnp.all(x)


def known_all(x) -> bool:
    """True when every element is known to be True (False while tracing under jax.jit)."""
    if isinstance(x, jax.core.Tracer):
        return False
    return bool(jnp.all(x))


def value_check(ok, message, *values, error=DomainError) -> None:
    """Raise ``error(message(*values))`` unless ``ok`` (values as NumPy). Under a JAX
    transformation (``ok`` traced) the check is skipped: ``vjp`` runs it on the concrete
    forward call first."""
    if isinstance(ok, jax.core.Tracer):
        return
    if not bool(ok):
        raise error(message(*(np.asarray(v) for v in values)))


# Constants are built on the host and copied to the device: jnp.zeros, jnp.full and
# jnp.arange would each compile once per shape (see _core.host).

def zeros(shape, like):
    return host(np.zeros(shape, dtype=like.dtype))


def falses(shape, like=None):
    return host(np.zeros(shape, dtype=bool))


def full(shape, value: int, like=None):
    """int64 filled with ``value``."""
    return host(np.full(shape, value, dtype=np.int64))


def arange(start: int, stop: int, like=None):
    return host(np.arange(start, stop, dtype=np.int64))


def cast(x, like):
    """x in like's dtype."""
    return jnp.asarray(x).astype(like.dtype)


def int64(x):
    return jnp.asarray(x).astype(jnp.int64)


def take_rows(x, index):
    """x[b, index[b]] for every row b: (B, S, ...) and (B,) -> (B, ...)."""
    return x[np.arange(x.shape[0]), index]


def reverse(x, axis: int):
    return jnp.flip(x, axis=axis)
