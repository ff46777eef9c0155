"""The primitive ops the shared composites (``backends/composite/``) call, in jax.numpy.
Arrays are created on JAX's default device, which the backend sets to the one asked for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from . import buckets
from ._core import concrete, floating, host, integers  # noqa: F401  (dtype checks naming the argument)
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


@jax.jit
def _merge_heads(x):
    b, h, t, v = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * v)


def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V), moved on the host where it can be (buckets.moved)."""
    b, h, t, v = x.shape
    return buckets.moved(_merge_heads, lambda a: a.transpose(0, 2, 1, 3).reshape(b, t, h * v),
                         lambda g: g.reshape(b, t, h, v).transpose(0, 2, 1, 3), x)


@jax.jit
def _matmul(a, b):
    return a @ b


def matmul(a, b):
    """a @ b. With b a matrix (the composites' projections h W), each row of a is mapped on
    its own, so the call runs at bucket sizes, and so does its VJP under jax.vjp of concrete
    arrays (buckets.rowwise): one program per (row bucket, D, d_out), not per shape."""
    if getattr(b, "ndim", 0) == 2 and getattr(a, "ndim", 0) >= 1 and a.shape[-1] == b.shape[0]:
        return buckets.rowwise(_matmul, a, b)
    return a @ b


@jax.jit
def _tanh(x):
    return jnp.tanh(x)


def tanh(x):
    """tanh, elementwise: row-wise bucketed (buckets.rowwise), as matmul."""
    if getattr(x, "ndim", 0) >= 1:
        return buckets.rowwise(_tanh, x)
    return jnp.tanh(x)


# The ops that only move, select or compare values run on the host (NumPy) when their
# arrays are concrete and on the CPU (as the bucketed kernels' padding does, and under the
# same backend option, buckets=on): each would otherwise compile a program per shape, and
# the composites call them at every vector's shapes. They compute no arithmetic, so NumPy
# and XLA give the same bits. Under a transformation (tracers) they are jax.numpy's.

def _on_host(*xs) -> bool:
    return buckets.applies(*xs) and all(isinstance(x, (jax.Array, np.ndarray, np.generic, bool,
                                                       int, float)) for x in xs)


def _moved_many(exact, forward, adjoint, xs):
    """A map of several arrays that only moves values, under jax.vjp of concrete arrays: the
    host ``forward`` and its host ``adjoint`` as the custom VJP (buckets.differentiable)."""
    return buckets.differentiable(
        lambda *a: jax.tree_util.tree_map(host, forward([np.asarray(x) for x in a])),
        lambda a, ct: [host(g) for g in adjoint(jax.tree_util.tree_map(np.asarray, ct))],
        lambda *a: exact(list(a)), *xs)


def concat(xs, axis: int):
    if _on_host(*xs):
        return host(np.concatenate([np.asarray(x) for x in xs], axis=axis))
    if buckets.traced(*xs):
        cuts = np.cumsum([x.shape[axis] for x in xs])[:-1]
        return _moved_many(lambda a: jnp.concatenate(a, axis=axis),
                           lambda a: np.concatenate(a, axis=axis),
                           lambda g: np.split(g, cuts, axis=axis), xs)
    return jnp.concatenate(xs, axis=axis)


def stack(xs, axis: int):
    if _on_host(*xs):
        return host(np.stack([np.asarray(x) for x in xs], axis=axis))
    if buckets.traced(*xs):
        return _moved_many(lambda a: jnp.stack(a, axis=axis), lambda a: np.stack(a, axis=axis),
                           lambda g: [np.take(g, i, axis=axis) for i in range(len(xs))], xs)
    return jnp.stack(xs, axis=axis)


def unstack(x, axis: int):
    if _on_host(x):
        return [host(np.array(np.take(np.asarray(x), i, axis=axis)))
                for i in range(x.shape[axis])]
    if buckets.traced(x):
        n = x.shape[axis]
        return _moved_many(lambda a: [jnp.take(a[0], i, axis=axis) for i in range(n)],
                           lambda a: [np.take(a[0], i, axis=axis) for i in range(n)],
                           lambda g: [np.stack(g, axis=axis)], [x])
    return [jnp.take(x, i, axis=axis) for i in range(x.shape[axis])]


def where(c, a, b):
    dtypes = {x.dtype for x in (a, b) if hasattr(x, "dtype")}
    if len(dtypes) == 1 and _on_host(c, a, b):
        dtype = dtypes.pop()  # a Python scalar takes the array's dtype, as in jnp
        return host(np.where(np.asarray(c), np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)))
    return jnp.where(c, a, b)


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    if _on_host(x):  # NumPy's argmax also takes the first maximum (NaN: the first NaN)
        return host(np.argmax(np.asarray(x), axis=axis).astype(np.int64))
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    return jnp.argmax(x, axis=axis).astype(jnp.int64)


def any_(x, axis: int):
    if _on_host(x):
        return host(np.any(np.asarray(x), axis=axis))
    return jnp.any(x, axis=axis)


def all_(x):
    if _on_host(x):
        return host(np.all(np.asarray(x)))
    return jnp.all(x)


def known_all(x) -> bool:
    """True when every element is known to be True (False while tracing under jax.jit)."""
    if isinstance(x, jax.core.Tracer):
        return False
    return bool(jnp.all(x))


def value_check(ok, message, *values, error=DomainError) -> None:
    """Raise ``error(message(*values))`` unless ``ok`` (values as NumPy). Under ``jax.vjp``
    of concrete arrays the values are the tracers' concrete primals (_core.concrete); under
    ``jax.jit`` (values not known) the check is skipped."""
    ok = concrete(ok)
    if ok is None:
        return
    if not bool(ok):
        raise error(message(*(np.asarray(concrete(v)) for v in values)))


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
    if _on_host(x, index):
        return host(np.asarray(x)[np.arange(x.shape[0]), np.asarray(index)])
    return x[np.arange(x.shape[0]), index]


def reverse(x, axis: int):
    if _on_host(x):
        return host(np.flip(np.asarray(x), axis=axis))
    return jnp.flip(x, axis=axis)
