"""The MLX backend (Apple's ``mlx.core``): kernels ported from backends/numpy/, composites
from backends/composite/, gradients from ``mx.vjp``, eager (no ``mx.compile``).

Devices: ``cpu``; ``gpu`` where MLX reports a Metal GPU (Apple silicon; not tested on
Linux). Dtypes: float32, float16 and bfloat16. A call whose float arrays are all float16
(or all bfloat16) is computed in float32 and its float outputs rounded to that dtype once
(as MLX's own fast kernels accumulate): a half-precision chain of reductions misses the
spec's half tolerances (rms_norm grad-005 in bfloat16: 10.7 ULP). Mixed dtypes are passed
through unchanged, so the kernels' dtype checks still see them.

float64 is **not claimed**: MLX 0.32.4 computes float64 on the CPU only, and its float64
``exp``, ``sin``, ``cos``, ``erf`` and ``sigmoid`` are float32-accurate (issue 23: 344 of
740 float64 results fail), so a float64 request is a DTypeError naming the dtypes supported.

Backend options: none yet (an unknown one is a ConfigError).
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import ConfigError

from ..base import Backend, returns_of

MLX_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
DEVICES = ("cpu", "gpu")


def _has_gpu() -> bool:
    try:
        return bool(mx.metal.is_available())
    except AttributeError:
        return False


def _floats(tree):
    if isinstance(tree, mx.array):
        if mx.issubdtype(tree.dtype, mx.floating):
            yield tree.dtype
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _floats(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _floats(v)


def _half_dtype(kwargs):
    """float16 or bfloat16 when every float array among the arguments is of it, else None."""
    found = set(_floats(kwargs))
    return found.pop() if len(found) == 1 and found <= {mx.float16, mx.bfloat16} else None


def _cast(tree, src, dst):
    if isinstance(tree, mx.array):
        return tree.astype(dst) if tree.dtype == src else tree
    if isinstance(tree, dict):
        return {k: _cast(v, src, dst) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cast(v, src, dst) for v in tree)
    return tree


class MlxBackend(Backend):
    name = "mlx"
    package = __name__

    def __init__(self, **options):
        if options:
            raise ConfigError(f"unknown mlx backend option(s) {sorted(options)}; the mlx "
                              f"backend takes none")
        super().__init__()
        self.default_device = "cpu"

    def devices(self) -> list[str]:
        return ["cpu", "gpu"] if _has_gpu() else ["cpu"]

    def dtypes(self, device: str) -> list[str]:
        return ["float32", "float16", "bfloat16"]

    def _device(self, device: str):
        return mx.gpu if device == "gpu" else mx.cpu

    def select_device(self, device: str) -> None:
        self.default_device = self.check_device(device)
        mx.set_default_device(self._device(device))

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        self.check_device(device)
        a = np.asarray(x)
        if a.dtype.kind in "biu" or dtype is None:
            if a.dtype.kind in "iu":
                return mx.array(a.astype(np.int64))
            if a.dtype.kind == "f":  # no float64 here: the nearest supported
                return mx.array(a.astype(np.float32))
            return mx.array(a)
        self.check_dtype(dtype, device)
        return mx.array(a.astype(np.float32)).astype(MLX_DTYPES[dtype])

    def to_numpy(self, x) -> np.ndarray:
        if not isinstance(x, mx.array):
            return np.asarray(x)
        if x.dtype in (mx.float16, mx.bfloat16):
            x = x.astype(mx.float32)
        return np.array(x)

    def device_of(self, x) -> str | None:
        return self.default_device if isinstance(x, mx.array) else None

    def vjp(self, name: str, module: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
        """Gradients by ``mx.vjp`` through the spec function: every float input and parameter
        is a primal; outputs without a cotangent get zeros."""
        fn = self.function(name, module)
        floats = {k: a for k, a in call.items()
                  if isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating)}
        params = dict(call["params"]) if isinstance(call.get("params"), dict) else {}
        names = returns_of(name)
        fn(**call)  # the checks run here, with their own errors
        keys, pkeys = list(floats), list(params)

        def f(*primals):
            inputs = dict(zip(keys, primals[:len(keys)]))
            p = dict(zip(pkeys, primals[len(keys):]))
            out = fn(**{**call, **inputs, **({"params": p} if "params" in call else {})})
            return list(out if len(names) > 1 else (out,))

        outs = f(*floats.values(), *params.values())
        cts = [cotangents[n].astype(o.dtype) if n in cotangents else mx.zeros(o.shape, o.dtype)
               for n, o in zip(names, outs)]
        _, grads = mx.vjp(f, [*floats.values(), *params.values()], cts)
        return dict(zip(keys, grads[:len(keys)])), dict(zip(pkeys, grads[len(keys):]))

    def function(self, name: str, module: str):
        """The spec function, computed in float32 when every float array is one half dtype."""
        fn = super().function(name, module)

        @functools.wraps(fn)
        def in_float32(*args, **kwargs):
            half = _half_dtype(kwargs)
            if half is None or args:
                return fn(*args, **kwargs)
            out = fn(**_cast(kwargs, half, mx.float32))
            return _cast(out, mx.float32, half)
        return in_float32

    def versions(self) -> dict[str, str]:
        return {"mlx": mx.__version__, "numpy": np.__version__}

    def describe(self) -> str:
        return f"mlx backend, eager, default device {self.default_device}, float64 not claimed"


Backend = MlxBackend  # the name the scaffold's entry point uses
