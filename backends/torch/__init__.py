"""The PyTorch backend: the whole stack on CPU (float64, float32) and CUDA (also
float16 and bfloat16), plus an idiomatic layer of ``torch.nn.Module``s
(:mod:`.modules`) and converters to and from PyTorch's built-ins (:mod:`.convert`).

Importing this package imports torch; nothing else in attnspec does.

Backend options (``--backend-option KEY=VALUE``):
  attention=explicit  (default) softmax(q k^T) v written out;
  attention=fused     outputs of attention through F.scaled_dot_product_attention; sdpa and
                      mha, which return the weights, still compute them explicitly, but the
                      composites (layers, stacks, models, decoding) called without a trace
                      compute none: a causal mask becomes is_causal=True, any other mask
                      stays compact, so memory is linear in T.
  Outside a backend: ``with attention_path("fused"): layers.llama_layer(...)``; the
  nn.Modules take the fused kernels whenever no weights are asked for (need_weights=False).
  threads=N           torch.set_num_threads(N) (default 1: the vectors are tiny; 0 leaves
                      torch's default).
  device=NAME         device for functions without tensor inputs (default: the last device
                      asked of ``asarray``, else ATTNSPEC_DEVICE, else cpu).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch
from attnspec.spec.errors import ConfigError

from ..base import Backend, returns_of
from ._core import Paths, attention_path, using  # noqa: F401  (attention_path: public)

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32,
                "float16": torch.float16, "bfloat16": torch.bfloat16}
# Functions with no tensor input: they take the device as a keyword.
_DEVICELESS = {"causal_mask", "sinusoidal_pe"}


class TorchBackend(Backend):
    name = "torch"
    package = __name__

    def __init__(self, **options):
        super().__init__(**options)
        attention = options.get("attention", "explicit")
        if attention not in ("explicit", "fused"):
            raise ConfigError(f"torch backend option attention must be 'explicit' or 'fused', "
                              f"got {attention!r}")
        unknown = set(options) - {"attention", "device", "threads"}
        if unknown:
            raise ConfigError(f"unknown torch backend option(s) {sorted(unknown)}; "
                              f"known: attention, device, threads")
        # The vectors' tensors are tiny: intra-op parallelism only costs thread wake-ups
        # (a 5x8 softmax took 30 ms with 2 threads on a loaded 2-core machine, 3 us with 1).
        threads = int(options.get("threads", 1))
        if threads > 0:
            torch.set_num_threads(threads)
        self.paths = Paths(attention)  # this instance's choice, never process-wide
        self.default_device = options.get("device") or os.environ.get("ATTNSPEC_DEVICE") or "cpu"
        # The spec's float32 tolerances assume true float32 matmuls (no TF32 on Ampere+).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def devices(self) -> list[str]:
        if self._devices is None:
            self._devices = self._find_devices()
        return list(self._devices)

    _devices = None

    @staticmethod
    def _find_devices() -> list[str]:
        found = ["cpu"]
        if torch.cuda.is_available():
            found.append("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            found.append("mps")
        return found

    def dtypes(self, device: str) -> list[str]:
        if device == "cuda":
            return ["float64", "float32", "float16", "bfloat16"]
        if device == "mps":
            return ["float32", "float16"]
        return ["float64", "float32"]

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        self.check_device(device)
        self.default_device = device
        a = np.asarray(x)
        if a.dtype.kind in "biu" or dtype is None:
            if a.dtype.kind in "iu":
                a = a.astype(np.int64)
            return torch.from_numpy(a.copy()).to(device)
        self.check_dtype(dtype, device)  # DTypeError naming the ones supported there
        t = torch.from_numpy(np.array(a, dtype=np.float64))  # (ascontiguousarray makes 0-d 1-d)
        return t.to(device=device, dtype=TORCH_DTYPES[dtype])

    def to_numpy(self, x) -> np.ndarray:
        if not isinstance(x, torch.Tensor):
            return np.asarray(x)
        x = x.detach()
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.to(torch.float64)
        return x.cpu().numpy()

    def device_of(self, x) -> str | None:
        return x.device.type if isinstance(x, torch.Tensor) else None

    def function(self, name: str, module: str):
        """The spec function, run with this backend's attention path (and, for the
        functions without a tensor input, its device)."""
        fn = super().function(name, module)
        deviceless = name in _DEVICELESS

        @functools.wraps(fn)
        def in_backend(*args, **kwargs):
            if deviceless:
                kwargs["device"] = kwargs.get("device") or self.default_device
            with using(self.paths):
                return fn(*args, **kwargs)
        return in_backend

    def vjp(self, name: str, module: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
        """Gradients by autograd through the spec function (this backend's attention path):
        every float input and parameter becomes a leaf, then ``torch.autograd.grad`` with
        the cotangents as ``grad_outputs``; a leaf the outputs do not reach gets zeros."""
        fn = self.function(name, module)
        call = dict(call)
        leaves: dict = {}
        for k, a in call.items():
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                call[k] = leaves[("inputs", k)] = a.detach().clone().requires_grad_(True)
        if isinstance(call.get("params"), dict):
            call["params"] = dict(call["params"])
            for k, a in call["params"].items():
                call["params"][k] = leaves[("params", k)] = a.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = fn(**call)
            names = returns_of(name)
            out = dict(zip(names, out if len(names) > 1 else (out,)))
            pairs = [(out[k], c) for k, c in cotangents.items()]
            grads = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()),
                                        grad_outputs=[c for _, c in pairs], allow_unused=True,
                                        materialize_grads=True)
        result: tuple[dict, dict] = ({}, {})
        for (group, k), g in zip(leaves, grads):
            result[group == "params"][k] = g
        return result

    def select_device(self, device: str) -> None:
        """The device for functions with no tensor input (causal_mask, sinusoidal_pe)."""
        self.default_device = self.check_device(device)

    def versions(self) -> dict[str, str]:
        v = {"torch": torch.__version__}
        v["cuda"] = (f"{torch.version.cuda} ({torch.cuda.get_device_name(0)})"
                     if torch.cuda.is_available() else "not available")
        return v

    def describe(self) -> str:
        what = ("fused: attention outputs through F.scaled_dot_product_attention, weights "
                "explicit" if self.paths.attention == "fused"
                else "explicit: softmax(q k^T / sqrt(K)) v written out")
        return f"torch backend, attention={what}"

    def synchronize(self, device: str) -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def extra_checks(self, device: str):
        """The checks of ``extras.py``, run with this backend's attention path."""
        def in_backend(check):
            def run(spec):
                with using(self.paths):
                    return check(spec)
            return run
        return [(name, in_backend(check)) for name, check in super().extra_checks(device)]
