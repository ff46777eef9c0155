"""Small torch helpers shared by the component modules: dtype and device checks.

Every tensor argument goes through one of these, so a wrong dtype raises DTypeError and
a tensor on another device raises DeviceError (naming the argument) before torch would
raise its own RuntimeError. Nothing is ever moved between devices silently.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from contextvars import ContextVar

import numpy as np
import torch
from attnspec.spec.errors import ConfigError, DeviceError, DTypeError

from .. import _checks as check


def tensor(name: str, x) -> torch.Tensor:
    """``x`` as a tensor: tensors pass through untouched, NumPy arrays and scalars become
    CPU tensors (a NumPy array has no device; the device checks below then apply)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float, bool)):
        return torch.as_tensor(np.asarray(x))
    raise DTypeError(f"{name} must be a torch.Tensor (or a NumPy array), got {type(x).__name__}")


def floating(name: str, x, like: torch.Tensor | None = None) -> torch.Tensor:
    """A floating tensor, or DTypeError naming the argument; with ``like``, also on the same
    device (DeviceError) and of the same dtype (DTypeError)."""
    x = check.floating_dtype(name, tensor(name, x))
    if like is not None:
        same_device(name, x, like)
        if x.dtype != like.dtype:
            raise DTypeError(f"{name} has dtype {_dt(x.dtype)} but the input has "
                             f"{_dt(like.dtype)}")
    return x


def boolean(name: str, x, like: torch.Tensor | None = None) -> torch.Tensor:
    x = tensor(name, x)
    if x.dtype != torch.bool:
        raise DTypeError(f"{name} must be boolean (True = may attend), got {_dt(x.dtype)} "
                         f"with shape {tuple(x.shape)}")
    if like is not None:
        same_device(name, x, like)
    return x


def integers(name: str, x, like: torch.Tensor | None = None) -> torch.Tensor:
    x = tensor(name, x)
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise DTypeError(f"{name} must hold integer token ids, got {_dt(x.dtype)} with shape "
                         f"{tuple(x.shape)}")
    if like is not None:
        same_device(name, x, like)
    return x


def same_device(name: str, x: torch.Tensor, like: torch.Tensor) -> None:
    if x.device != like.device:
        raise DeviceError(f"{name} is on device {x.device} but the input is on {like.device} "
                          f"(shape {tuple(x.shape)}); attnspec never moves tensors between "
                          f"devices")


def param(p, name: str, expected: tuple | None, like: torch.Tensor) -> torch.Tensor:
    """A required parameter, shape-checked (ParameterError), same dtype and device as ``like``."""
    return floating(p.path(name), p.require(name, expected), like)


def opt_param(p, name: str, expected: tuple | None, like: torch.Tensor):
    x = p.get(name, expected)
    return None if x is None else floating(p.path(name), x, like)


def _dt(dtype) -> str:
    return str(dtype).replace("torch.", "")


class Paths:
    """Which attention path the component functions take (the backend option
    ``attention=explicit|fused``) and which paths actually ran: one per backend instance.

    A backend's functions run with its own ``Paths`` as the current one (:func:`using`, a
    context variable: per thread and per asyncio task), so two backends with different
    options, in one process or in two threads, never see each other's choice.
    """

    def __init__(self, attention: str = "explicit"):
        self.attention = attention
        self.ran: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, path: str) -> None:
        with self._lock:
            self.ran[path] = self.ran.get(path, 0) + 1


_paths: ContextVar[Paths | None] = ContextVar("attnspec_torch_paths", default=None)
_DIRECT = Paths()  # for functions called directly, outside any backend: explicit
# set by the nn.Modules when no weights are asked for (their fast path)
_skip_weights: ContextVar[bool] = ContextVar("attnspec_torch_skip_weights", default=False)


@contextlib.contextmanager
def using(paths: Paths):
    """Run the component functions with ``paths`` as the current one."""
    token = _paths.set(paths)
    try:
        yield paths
    finally:
        _paths.reset(token)


@contextlib.contextmanager
def skipping_weights(on: bool):
    """The modules' fast path: attention weights are not computed (sdpa returns None)."""
    token = _skip_weights.set(on)
    try:
        yield
    finally:
        _skip_weights.reset(token)


def current() -> Paths:
    return _paths.get() or _DIRECT


def skip_weights() -> bool:
    return _skip_weights.get()


def fused() -> bool:
    """PyTorch's fused kernels (sdpa, layer_norm, addmm) instead of the written-out sums."""
    return current().attention == "fused" or skip_weights()


def note(path: str) -> None:
    current().note(path)


@contextlib.contextmanager
def attention_path(attention: str = "fused"):
    """Public: run the component functions called directly (outside a backend) with this
    attention path; ``"fused"`` makes the composites (layers, stacks, models, decoding)
    call PyTorch's fused kernels without the weights they do not return (linear memory)."""
    if attention not in ("explicit", "fused"):
        raise ConfigError(f"attention_path: attention must be 'explicit' or 'fused', "
                          f"got {attention!r}")
    with using(Paths(attention)) as p:
        yield p


def no_weights_unless_traced(fn):
    """A bound composite: under the fused path and with no ``trace`` asked for, nothing
    above the attention reads its weights, so sdpa returns none (F.sdpa, linear memory)."""
    @functools.wraps(fn)
    def composite(*args, **kwargs):
        if current().attention != "fused" or kwargs.get("trace") is not None:
            return fn(*args, **kwargs)
        with skipping_weights(True):
            return fn(*args, **kwargs)
    return composite
