"""Compile once per shape bucket, not once per shape.

A kernel called on concrete arrays on the CPU runs on inputs padded, on the host, to
bucket sizes (the next power of two, at least MIN), and its outputs are cut back to the
exact shapes on the host. Each kernel pads only where padding changes no output value:

- rows (batch, queries, positions) that no other row reads: padded, then cut off;
- keys: padded keys are masked out, so they get weight 0 and add nothing;
- contraction widths: padded with zeros on both sides, so each product adds an exact 0.

Under a JAX transformation (``jax.jit``, ``jax.vjp``, ``nnx``) the inputs are tracers and
the kernel runs at the exact shapes, as it does for calls past MAX_ELEMENTS, on another
device, or with ``--backend-option buckets=off``; except that ``jax.vjp`` of concrete arrays
(the suite's gradient vectors) gives each bucketed kernel's custom VJP concrete values, so
its forward and its pullback run at bucket sizes too (``differentiable``, ``vjp_of``).

Why: the conformance suite calls each kernel at hundreds of distinct tiny shapes, and on
the CPU one compilation (tracing, lowering, XLA) costs 20-80 ms against microseconds of
arithmetic; the spec's sizes fall into a handful of buckets of 8 and 16. Padding and
cutting are copies on the host (NumPy), which compile nothing.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
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


def traced(*arrays) -> bool:
    """Whether a call on these arrays holds a tracer and could still run bucketed once the
    tracers are gone: bucketing is on and every concrete array is on the CPU. Under
    ``jax.vjp`` of concrete arrays (the suite's gradients) the forward and backward passes of
    a :func:`differentiable` call see concrete arrays, and run at bucket sizes."""
    if not _on[0] or not any(isinstance(x, jax.core.Tracer) for x in arrays):
        return False
    return all(not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer)
               or next(iter(x.devices())).platform == "cpu" for x in arrays if x is not None)


def unbroadcast(g, shape: tuple) -> np.ndarray:
    """The adjoint of broadcasting to g's shape: g summed over the axes broadcast from
    ``shape``."""
    g = np.asarray(g)
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape)) if b == 1 and a != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


@functools.cache
def vjp_of(kernel, static: tuple):
    """``(primals, cotangents) -> the primals' cotangents`` of ``kernel(*primals, **static)``,
    one ``jax.jit`` (compiled once per bucket shape, as the kernel's forward is)."""
    def pullback(primals, cotangents):
        _, pull = jax.vjp(lambda *a: kernel(*a, **dict(static)), *primals)
        return pull(cotangents)
    return jax.jit(pullback)


def _float(x) -> bool:
    return x is not None and jnp.issubdtype(np.asarray(x).dtype if not isinstance(x, jax.Array)
                                            else x.dtype, jnp.floating)


def differentiable(forward, backward, exact, *args):
    """``exact(*args)`` under a JAX transformation, with a custom VJP that runs bucketed where
    the transformation is ``jax.vjp`` of concrete arrays: ``forward(*args)`` (host-padded,
    as a call on concrete arrays runs) and ``backward(args, cotangents)`` -> one cotangent
    per arg (None for the non-float ones). Where the values are tracers still (jax.jit,
    nnx.jit around the gradient), the exact kernel and its own VJP."""
    @jax.custom_vjp
    def call(*a):
        return exact(*a)

    def fwd(*a):
        if applies(*a):
            return forward(*a), a
        return exact(*a), a

    def bwd(a, cts):
        if applies(*a, *jax.tree_util.tree_leaves(cts)):
            grads = backward(a, cts)
        else:
            keep = [i for i, x in enumerate(a) if _float(x)]
            _, pull = jax.vjp(lambda *f: exact(*(f[keep.index(i)] if i in keep else x
                                                 for i, x in enumerate(a))),
                              *(a[i] for i in keep))
            got = pull(cts)
            grads = [got[keep.index(i)] if i in keep else None for i in range(len(a))]
        return tuple(g if _float(x) else None for g, x in zip(grads, a))

    call.defvjp(fwd, bwd)
    return call(*args)


def moved(exact, forward, adjoint, x):
    """A map that only moves values (reshape, transpose, repeat): ``forward(x)`` in NumPy on
    the host where x is concrete (nothing compiled per shape), ``exact(x)`` in JAX under a
    transformation, with the host ``adjoint`` (the transposed map: a cut, a sum over the
    copies) as its VJP where ``jax.vjp`` runs on concrete arrays."""
    if applies(x):
        return host(forward(np.asarray(x)))
    if traced(x):
        return differentiable(lambda x: host(forward(np.asarray(x))),
                              lambda a, ct: (host(adjoint(np.asarray(ct))),), exact, x)
    return exact(x)


def sliced(x, index: tuple):
    """``x[index]`` for a tuple of static slices, as :func:`moved`: the adjoint puts the
    cotangent back into zeros of x's shape."""
    def adjoint(g):
        grad = np.zeros(np.shape(x), g.dtype)
        grad[index] = g
        return grad
    return moved(lambda x: x[index], lambda x: x[index], adjoint, x)


def gathered(exact, table, index):
    """``table[index]`` (rows of table along its first axis, index any int array on the
    host) as :func:`moved`: a NumPy gather where table is concrete, ``exact(table)`` under a
    transformation, and under ``jax.vjp`` of concrete arrays the adjoint on the host, each
    cotangent row added into the row it was read from (``np.add.at``, in index order)."""
    index = np.asarray(index)

    def adjoint(ct):
        grad = np.zeros(np.shape(table), ct.dtype)
        np.add.at(grad, index, ct)
        return grad
    return moved(exact, lambda t: t[index], adjoint, table)


def rowwise(kernel, x, *args, item_rank: int = 1, **static):
    """``kernel(x, *args, **static)`` for a kernel that maps each item of x (its last
    ``item_rank`` axes) on its own: the leading axes flattened to rows, the rows padded, the
    result (or each result of a tuple, every one with x's rows first) cut back to x's leading
    shape. At the exact shape where bucketing does not apply;
    under ``jax.vjp`` of concrete arrays the backward pass is bucketed too (the args other
    than x are not padded: the padded rows are zeros and their cotangents zeros, so they add
    an exact 0 to the args' cotangents)."""
    lead, item = x.shape[:x.ndim - item_rank], x.shape[x.ndim - item_rank:]
    n = math.prod(lead)
    if not small((size(n), *item)):
        return kernel(x, *args, **static)
    if traced(x, *args):
        return _rowwise_traced(kernel, x, args, item_rank, static)
    if not applies(x, *args):
        return kernel(x, *args, **static)
    return _rows(kernel, x, args, item_rank, static)


def _rows(kernel, x, args, item_rank, static):
    lead, item = x.shape[:x.ndim - item_rank], x.shape[x.ndim - item_rank:]
    n = math.prod(lead)
    xp = pad(np.asarray(x).reshape((n, *item)), (size(n), *item))  # (N', *item)
    out = kernel(*on_device(xp), *args, **static)  # (N', ...), or a tuple of such
    ys = [np.asarray(y) for y in (out if isinstance(out, tuple) else (out,))]
    ys = tuple(cut(y[:n].reshape((*lead, *y.shape[1:])), ...) for y in ys)
    return ys if isinstance(out, tuple) else ys[0]


def _rowwise_traced(kernel, x, args, item_rank, static):
    exact = functools.partial(kernel, **static)
    key = tuple(sorted(static.items()))

    def forward(x, *a):
        return _rows(kernel, x, a, item_rank, static)

    def backward(primals, ct):
        x, *a = primals
        lead, item = x.shape[:x.ndim - item_rank], x.shape[x.ndim - item_rank:]
        n, N = math.prod(lead), size(math.prod(lead))
        xp = pad(np.asarray(x).reshape((n, *item)), (N, *item))
        cts = tuple(np.asarray(c) for c in (ct if isinstance(ct, tuple) else (ct,)))
        cps = on_device(*(pad(c.reshape((n, *c.shape[len(lead):])), (N, *c.shape[len(lead):]))
                          for c in cts))
        gx, *ga = vjp_of(kernel, key)((*on_device(xp), *a), cps if isinstance(ct, tuple)
                                      else cps[0])
        gx = None if not _float(x) else cut(np.asarray(gx)[:n].reshape(x.shape), ...)
        return (gx, *ga)

    return differentiable(forward, backward, exact, x, *args)
