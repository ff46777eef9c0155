"""Running a component function eagerly, as a graph (``tf.function``) or through XLA
(``tf.function(jit_compile=True)``), on an explicit device.

Every call is traced for its exact shapes, dtypes and attributes, so static
shapes are known while tracing and the shape checks of ``backends/_checks.py``
raise the spec's errors at trace time, in every mode. Named intermediates
(``trace=``) and data-dependent checks (:func:`._core.value_check`) become extra
outputs of the graph; the wrapper records the former and raises the latter.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import DeviceError
from attnspec.spec.trace import Trace

from .. import _checks as check
from . import _core

MODES = ("eager", "graph", "xla")


def _is_array(x) -> bool:
    return isinstance(x, (tf.Tensor, tf.Variable, np.ndarray))


def _spec(x) -> tuple:
    return (tuple(int(d) for d in x.shape), tf.as_dtype(x.dtype).name)


def _device_of(tensors: list, default: str) -> str:
    """The device the float inputs live on ('cpu'/'gpu'); DeviceError if they disagree."""
    found = {}
    for name, x in tensors:
        if isinstance(x, (tf.Tensor, tf.Variable)) and x.dtype.is_floating:
            dev = x.device.rsplit("device:", 1)[-1].split(":")[0].lower() or default
            found.setdefault(dev, name)
    if len(found) > 1:
        raise DeviceError("inputs live on different devices: " +
                          ", ".join(f"{n} on {d}" for d, n in found.items()))
    return next(iter(found), default)


# Integer inputs whose values are shapes (sdpa_varlen's offsets decide its slices): in
# graph and XLA modes they are host values, part of the trace's key, traced once per value.
HOST_INTEGERS = frozenset({"cu_seqlens_q", "cu_seqlens_k"})


def host_integers(arrays: dict) -> dict:
    """The HOST_INTEGERS among ``arrays`` that hold integers, as NumPy arrays."""
    return {k: np.asarray(v) for k, v in arrays.items()
            if k in HOST_INTEGERS and _is_array(v) and tf.as_dtype(v.dtype).is_integer}


def _hashable(v):
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (type(v).__name__, v)


class ModeFunction:
    """A spec function run in one mode; call it like the function itself."""

    def __init__(self, fn: Callable, mode: str, default_device: Callable[[], str]):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.fn, self.mode, self.default_device = fn, mode, default_device
        self.signature = inspect.signature(fn)
        self.cache: dict = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        trace = arguments.pop("trace", None)
        params = arguments.pop("params", None) if "params" in arguments else None
        has_params = "params" in self.signature.parameters
        tensors = {k: v for k, v in arguments.items() if _is_array(v)}
        host = host_integers(tensors) if self.mode != "eager" else {}
        tensors = {k: v for k, v in tensors.items() if k not in host}
        static = {k: host.get(k, v) for k, v in arguments.items() if k not in tensors}
        store, prefix = _flat_params(params) if has_params else ({}, "")
        device = _device_of(list(tensors.items()) + list(store.items()), self.default_device())
        with tf.device(f"/{device.upper()}:0"):
            if self.mode == "eager":
                return self._eager(tensors, static, store, prefix, has_params, trace)
            return self._graph(tensors, static, store, prefix, has_params, trace, device)

    def _call_fn(self, tensors, static, store, prefix, has_params, trace):
        kw = dict(tensors, **static)
        if has_params:
            kw["params"] = check.Params(store, prefix)
        if trace is not None:
            kw["trace"] = trace
        return self.fn(**kw)

    def _eager(self, tensors, static, store, prefix, has_params, trace):
        tensors = {k: _core.tensor(v) for k, v in tensors.items()}
        store = {k: _core.tensor(v) for k, v in store.items()}
        return self._call_fn(tensors, static, store, prefix, has_params, trace)

    def _graph(self, tensors, static, store, prefix, has_params, trace, device):
        tensors = {k: _core.tensor(v) for k, v in tensors.items()}
        store = {k: _core.tensor(v) for k, v in store.items()}
        key = (device, prefix, has_params, trace is not None,
               tuple(sorted((k, _hashable(v)) for k, v in static.items())),
               tuple(sorted((k, _spec(v)) for k, v in tensors.items())),
               tuple(sorted((k, _spec(v)) for k, v in store.items())))
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = self._build(static, prefix, has_params, trace is not None,
                                                  tensors, store)
        compiled, checks = entry
        out, inter, flags = compiled(tensors, store)
        for pending, (ok, values) in zip(checks, flags):
            if not bool(ok):
                raise pending.error(pending.message(*[np.asarray(v) for v in values]))
        if trace is not None:
            for name, value in inter.items():
                trace.record(name, value)
        return out

    def _build(self, static, prefix, has_params, want_trace, tensors, store):
        """One concrete function for exactly these shapes, dtypes and attributes (the cache
        key), traced once; calling it does no signature matching and never retraces."""
        checks: list = []

        def body(tensors, store):
            checks.clear()
            old = _core.collecting(checks)
            try:
                tr = Trace() if want_trace else None
                out = self._call_fn(tensors, static, store, prefix, has_params, tr)
            finally:
                _core.collecting(old)
            inter = tr.as_dict() if tr is not None else {}
            return out, inter, [(c.ok, c.values) for c in checks]

        compiled = tf.function(body, autograph=False, reduce_retracing=False,
                               jit_compile=(self.mode == "xla"))
        spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), (tensors, store))
        return compiled.get_concrete_function(*spec), checks


def _flat_params(params) -> tuple[dict, str]:
    """A plain ``{path: tensor}`` and the prefix a ``Params`` view reads under."""
    if params is None:
        return {}, ""
    if isinstance(params, check.Params):
        return dict(params.store), params.prefix
    if isinstance(params, Mapping):
        return dict(params), ""
    return check.params_of(params), ""  # raises ParameterError naming the type
