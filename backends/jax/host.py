"""The shared composites on concrete CPU arrays: their kernels in XLA, their glue on the host.

A composite (``backends/composite/``) is kernels (sdpa, mha, the norms, the feed-forward
blocks, the projections, embedding, rope...) joined by glue: residual adds, slices,
concatenations, casts, comparisons, a scale by a Python number. Called on concrete float32
or float64 arrays on the CPU with ``buckets=on`` (the default), the JAX backend runs each
kernel in XLA at bucket sizes (``buckets.py``) and the glue in NumPy, through the NumPy
backend's ``ops``; the glue is elementwise IEEE arithmetic, rounded once per operation in
NumPy as in XLA, and moves. JAX would compile every glue operator once per shape (an
``add`` is a program of its own, ~15 ms to build on the CPU), which was over half of the
conformance suite's compilations.

Under a JAX transformation (``jax.jit``, ``jax.vjp``, ``nnx``: tracers), with
``buckets=off``, on a GPU, or in float16/bfloat16 (whose elementwise rounding XLA may
fuse away), the same composite runs every operator in JAX. The suite's gradient vectors
take that path (``jax.vjp``), so the glue in JAX is judged by them, and the glue on the
host by the value vectors.
"""

from __future__ import annotations

import functools
import importlib
from contextvars import ContextVar

import jax
import numpy as np

from .. import _checks as check
from ..composite import MODULES, Kernels
from . import buckets
from ._core import host

HOST_DTYPES = frozenset(np.dtype(d) for d in ("float64", "float32", "bool", "int64", "int32",
                                                "int16", "int8", "uint8", "uint32", "uint64"))
COMPUTED_OPS = ("linear", "matmul", "tanh")  # ops that compute: JAX's, their result on the host

_inside: ContextVar[bool] = ContextVar("attnspec_jax_host_glue", default=False)


def _leaves(x):
    if isinstance(x, check.Params):
        yield from x.store.values()
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


def _host_ready(x) -> bool:
    if isinstance(x, jax.core.Tracer):
        return False
    if isinstance(x, jax.Array):
        return x.dtype in HOST_DTYPES and next(iter(x.devices())).platform == "cpu"
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype in HOST_DTYPES
    return True  # None, Python numbers, strings, a Trace


def applies(args, kwargs) -> bool:
    """Whether a composite call runs its glue on the host: bucketing on, and every array in
    its arguments (parameters and caches included) concrete, on the CPU, of a host dtype."""
    return buckets.enabled() and all(_host_ready(x) for x in _leaves((args, kwargs)))


def numpy_of(x):
    """x with every JAX array in it (tuples, lists, dicts, Params) as a NumPy array."""
    if isinstance(x, jax.Array):
        return np.asarray(x)
    if isinstance(x, check.Params):
        return check.Params({k: numpy_of(v) for k, v in x.store.items()}, x.prefix)
    if isinstance(x, dict):
        return {k: numpy_of(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(numpy_of(v) for v in x)
    return x


def device_of(x):
    """x with every NumPy array (or scalar) in it as a JAX array on the default device."""
    if isinstance(x, (np.ndarray, np.generic)):
        return host(x)
    if isinstance(x, dict):
        return {k: device_of(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(device_of(v) for v in x)
    return x


def _numpy_out(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return numpy_of(fn(*args, **kwargs))
    return call


class HostOps:
    """The NumPy backend's ops, but for those that compute (COMPUTED_OPS): JAX's, with their
    result on the host."""

    def __getattr__(self, name: str):
        if name in COMPUTED_OPS:
            fn = _numpy_out(getattr(importlib.import_module(f"{__package__}.ops"), name))
        else:
            fn = getattr(importlib.import_module("attnspec.backends.numpy.ops"), name)
        setattr(self, name, fn)
        return fn


class HostKernels(Kernels):
    """The JAX backend's kernels with their results on the host, and HostOps."""

    def __init__(self, package: str):
        super().__init__(package)
        self._ops = HostOps()

    def __getattr__(self, name: str):
        if name not in MODULES:
            raise AttributeError(f"composites call no spec function {name!r}")
        fn = _numpy_out(getattr(importlib.import_module(f"{self.package}.{MODULES[name]}"), name))
        setattr(self, name, fn)
        return fn


def _dispatch(in_jax, on_host):
    @functools.wraps(in_jax)
    def composite(*args, **kwargs):
        if not applies(args, kwargs):
            return in_jax(*args, **kwargs)
        if _inside.get():  # a composite inside another: its caller takes NumPy
            return on_host(*numpy_of(args), **numpy_of(kwargs))
        token = _inside.set(True)
        try:
            out = on_host(*numpy_of(args), **numpy_of(kwargs))
        finally:
            _inside.reset(token)
        trace = kwargs.get("trace")
        if trace is not None:
            trace.convert(device_of)
        return device_of(out)
    return composite


def bind(family, package: str, *names: str) -> tuple:
    """``family.bind(package, *names)``, each function running its glue on the host where
    :func:`applies`."""
    in_jax = family.bind(package, *names)
    on_host = tuple(getattr(family(HostKernels(package)), name) for name in names or family.EXPORTS)
    return tuple(_dispatch(j, h) for j, h in zip(in_jax, on_host))
