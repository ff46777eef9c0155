"""The TensorFlow backend: the whole stack, eager, as a graph or through XLA, on an
explicit device.

Options (``--backend-option KEY=VALUE``):
  mode=eager|graph|xla   how every component function runs (default eager):
                         ``graph`` wraps it in ``tf.function``, ``xla`` in
                         ``tf.function(jit_compile=True)``, traced per shape.

Devices are ``cpu`` and, when TensorFlow sees one, ``gpu``; every array is
created and every op placed with ``tf.device`` on the device of its inputs,
never silently elsewhere. float64 and float32 everywhere, and on the GPU also
float16 and bfloat16.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError, DTypeError

from ..base import Backend, returns_of
from ._modes import MODES, ModeFunction, host_integers

DTYPES = {"float64": tf.float64, "float32": tf.float32, "float16": tf.float16,
          "bfloat16": tf.bfloat16}


class TensorFlowBackend(Backend):
    name = "tensorflow"
    package = __name__

    def __init__(self, **options):
        super().__init__(**options)
        unknown = set(options) - {"mode"}
        if unknown:
            raise ConfigError(f"the tensorflow backend has no option(s) {sorted(unknown)}; "
                              f"known: mode={'|'.join(MODES)}")
        self.mode = options.get("mode", "eager")
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        self._device = "cpu"
        self._functions: dict = {}

    def devices(self) -> list[str]:
        return ["cpu"] + (["gpu"] if tf.config.list_physical_devices("GPU") else [])

    def dtypes(self, device: str) -> list[str]:
        if device == "gpu":
            return list(DTYPES)
        return ["float64", "float32"]

    def _tf_device(self, device: str) -> str:
        self.check_device(device)
        self._device = device
        return f"/{device.upper()}:0"

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        where = self._tf_device(device)
        x = np.asarray(x)
        if dtype is not None and x.dtype.kind not in "biu":
            if dtype not in DTYPES:
                raise DTypeError(f"the tensorflow backend has no dtype {dtype!r}; "
                                 f"supported: {list(DTYPES)}")
            self.check_dtype(dtype, device)
        with tf.device(where):
            if dtype is None or x.dtype.kind in "biu":
                t = tf.constant(x)
            elif dtype in ("float64", "float32"):
                # one op: NumPy rounds float64 -> float32 to nearest, as tf.cast does
                t = tf.constant(x.astype(dtype, copy=False))
            else:
                t = tf.cast(tf.constant(x), DTYPES[dtype])
            # an eager constant lives on the host; identity puts it on the device
            return t if device == "cpu" else tf.identity(t)

    def to_numpy(self, x) -> np.ndarray:
        if isinstance(x, (tf.Tensor, tf.Variable)):
            # widened on the host (exact, as tf.cast is): no TensorFlow op per conversion
            a = x.numpy()
            return a.astype(np.float64) if x.dtype.is_floating else a
        x = np.asarray(x)
        return x.astype(np.float64) if x.dtype.kind == "f" else x

    def device_of(self, x) -> str | None:
        if not isinstance(x, (tf.Tensor, tf.Variable)) or not x.device:
            return None
        return x.device.rsplit("device:", 1)[-1].split(":")[0].lower()  # .../device:GPU:0

    def function(self, name: str, module: str):
        key = (name, module)
        if key not in self._functions:
            fn = super().function(name, module)
            self._functions[key] = ModeFunction(fn, self.mode, lambda: self._device)
        return self._functions[key]

    def vjp(self, name: str, module: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
        """Gradients by ``tf.GradientTape`` around the spec function in this backend's mode
        (eager, or the traced graph / XLA function, which the tape differentiates too):
        every float input and parameter is watched; one it does not reach gets zeros.
        Under XLA the forward and backward passes compile together into one function:
        differentiating across a jit-compiled call's boundary needs ops XLA lacks
        (OptionalFromValue, for the tf.cond of attention's finite fast path)."""
        if self.mode == "xla":
            return self._vjp_compiled(name, module, call, cotangents)
        fn = self.function(name, module)
        sources = {("inputs", k): a for k, a in call.items()
                   if isinstance(a, (tf.Tensor, tf.Variable)) and a.dtype.is_floating}
        sources.update({("params", k): a for k, a in (call.get("params") or {}).items()})
        with tf.GradientTape(persistent=False) as tape:
            for a in sources.values():
                tape.watch(a)
            out = fn(**call)
        names = returns_of(name)
        out = dict(zip(names, out if len(names) > 1 else (out,)))
        with tf.device(self._tf_device(self._device)):
            grads = tape.gradient([out[k] for k in cotangents], list(sources.values()),
                                  output_gradients=list(cotangents.values()),
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
        result: tuple[dict, dict] = ({}, {})
        for (group, k), g in zip(sources, grads):
            result[group == "params"][k] = _dense(g)
        return result

    def _vjp_compiled(self, name: str, module: str, call: dict, cotangents: dict):
        raw = Backend.function(self, name, module)  # the plain function, traced below
        names = returns_of(name)
        floats = {k: a for k, a in call.items()
                  if isinstance(a, (tf.Tensor, tf.Variable)) and a.dtype.is_floating}
        rest = {k: a for k, a in call.items() if k not in floats and k != "params"}
        rest.update(host_integers(rest))  # shapes' values stay on the host (_modes.py)
        has_params = "params" in call

        def forward_backward(inputs, params, cot):
            with tf.GradientTape() as tape:
                tape.watch((inputs, params))
                out = raw(**inputs, **rest, **({"params": params} if has_params else {}))
            out = dict(zip(names, out if len(names) > 1 else (out,)))
            grads = tape.gradient([out[k] for k in cot], (inputs, params),
                                  output_gradients=list(cot.values()),
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return tf.nest.map_structure(_dense, grads, expand_composites=False)

        compiled = tf.function(forward_backward, jit_compile=True, autograph=False)
        with tf.device(self._tf_device(self._device)):
            grad_inputs, grad_params = compiled(floats, dict(call.get("params") or {}),
                                                dict(cotangents))
        return ({k: _dense(g) for k, g in grad_inputs.items()},
                {k: _dense(g) for k, g in grad_params.items()})

    def versions(self) -> dict[str, str]:
        import keras

        return {"tensorflow": tf.__version__, "keras": keras.__version__,
                "numpy": np.__version__}

    def describe(self) -> str:
        how = {"eager": "eager execution", "graph": "tf.function graphs",
               "xla": "tf.function(jit_compile=True), XLA"}[self.mode]
        return f"tensorflow mode={self.mode} ({how})"

    def synchronize(self, device: str) -> None:
        if device == "gpu":
            tf.test.experimental.sync_devices()


def _dense(g):
    """A gradient as a dense tensor: tf.gather's (relative_attention's tables, an embedding)
    is a tf.IndexedSlices, rows and values to be summed."""
    return tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
