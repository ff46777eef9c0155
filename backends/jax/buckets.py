"""Compile once per shape bucket, not once per shape.

A kernel called on concrete arrays on the CPU runs on inputs padded, on the host, to
bucket sizes (the next power of two, at least MIN), and its outputs are cut back to the
exact shapes on the host. Each kernel pads only where padding changes no output value:

- rows (batch, queries, positions) that no other row reads: padded, then cut off;
- keys: padded keys are masked out, so they get weight 0 and add nothing;
- contraction widths: padded with zeros on both sides, so each product adds an exact 0.

Under a JAX transformation (``jax.jit``, ``jax.vjp``, ``nnx``) the inputs are tracers and
the kernel runs at the exact shapes, as it does for calls past MAX_ELEMENTS, on another
device, or with ``--backend-option buckets=off``.

Why: the conformance suite calls each kernel at hundreds of distinct tiny shapes, and on
the CPU one compilation (tracing, lowering, XLA) costs 20-80 ms against microseconds of
arithmetic; the spec's sizes fall into a handful of buckets of 8 and 16. Padding and
cutting are copies on the host (NumPy), which compile nothing.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from ._core import host

MIN = 8
MAX_ELEMENTS = 1 << 16  # a padded input larger than this runs at its exact shape
_on = [True]


def enable(on: bool) -> None:
    """Bucketing on or off for the process (the backend option ``buckets``)."""
    _on[0] = bool(on)


def enabled() -> bool:
    return _on[0]


def size(n: int) -> int:
    """The bucket of a size: the next power of two, at least MIN."""
    return max(MIN, 1 << max(0, n - 1).bit_length())


def applies(*arrays) -> bool:
    """Whether a call on these arrays (None allowed) runs bucketed: bucketing is on, no
    array is a tracer, every array is on the CPU."""
    if not _on[0]:
        return False
    for x in arrays:
        if x is None:
            continue
        if isinstance(x, jax.core.Tracer):
            return False
        if isinstance(x, jax.Array) and next(iter(x.devices())).platform != "cpu":
            return False
    return True


def small(*shapes) -> bool:
    """Whether every padded shape is at most MAX_ELEMENTS elements."""
    return all(math.prod(s) <= MAX_ELEMENTS for s in shapes)


def pad(x, shape: tuple, fill=0) -> np.ndarray:
    """x on the host, filled out to ``shape`` at the end of each axis with ``fill``."""
    x = np.asarray(x)
    out = np.full(shape, fill, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def keep(mask, shape: tuple, padded: tuple) -> np.ndarray:
    """The boolean mask (None: every key kept) broadcast to ``shape``, then padded to
    ``padded`` with False: padded keys (and rows) are masked out."""
    return pad(np.broadcast_to(True if mask is None else np.asarray(mask), shape), padded, False)


def flat(x, batch: tuple, tail: tuple, shape: tuple, fill=0) -> np.ndarray:
    """x broadcast to (*batch, *tail), its batch flattened to one axis, then padded to
    ``shape`` (len(tail) + 1 axes) with ``fill``."""
    x = np.broadcast_to(np.asarray(x), (*batch, *tail)).reshape((math.prod(batch), *tail))
    return pad(x, shape, fill)


def cut(y, *index) -> jax.Array:
    """y[index], cut on the host, as a JAX array on the default device."""
    return host(np.array(np.asarray(y)[index]))  # a contiguous copy, any rank


def on_device(*xs):
    """NumPy arrays (or None) as JAX arrays on the default device, nothing compiled."""
    return tuple(None if x is None else host(x) for x in xs)


def rowwise(kernel, x, *args, item_rank: int = 1, **static):
    """``kernel(x, *args, **static)`` for a kernel that maps each item of x (its last
    ``item_rank`` axes) on its own: the leading axes flattened to rows, the rows padded, the
    result cut back to x's leading shape. At the exact shape where bucketing does not apply."""
    lead, item = x.shape[:x.ndim - item_rank], x.shape[x.ndim - item_rank:]
    n = math.prod(lead)
    if not (applies(x, *args) and small((size(n), *item))):
        return kernel(x, *args, **static)
    xp = pad(np.asarray(x).reshape((n, *item)), (size(n), *item))  # (N', *item)
    y = np.asarray(kernel(*on_device(xp), *args, **static))  # (N', ...)
    return cut(y[:n].reshape((*lead, *y.shape[1:])), ...)
