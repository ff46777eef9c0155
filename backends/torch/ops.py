"""The primitive ops the shared composites (``backends/composite/``) call, in torch.
Arrays are created on the device of the ``like`` tensor: nothing is moved silently."""

from __future__ import annotations

import numpy as np
import torch
from attnspec.spec.errors import DomainError

from ._core import floating, integers  # noqa: F401  (dtype and, with like=, device checks)
from .multihead import _linear as linear  # noqa: F401  (x W + b from params, checked)
from .multihead import _split_heads as split_heads  # noqa: F401  (B, T, H*K) -> (B, H, T, K)


def merge_heads(x):
    """(B, H, T, V) -> (B, T, H*V)."""
    b, h, t, v = x.shape
    return x.transpose(1, 2).reshape(b, t, h * v)


def matmul(a, b):
    return a @ b


tanh = torch.tanh


def concat(xs, axis: int):
    return torch.cat(xs, dim=axis)


def stack(xs, axis: int):
    return torch.stack(xs, dim=axis)


def unstack(x, axis: int):
    return list(torch.unbind(x, dim=axis))


def where(c, a, b):
    return torch.where(c, a, b)


def argmax(x, axis: int):
    """int64 indices; ties go to the lowest index."""
    if x.dtype == torch.bool:
        x = x.to(torch.int8)
    return torch.argmax(x, dim=axis)


def any_(x, axis: int):
    return torch.any(x, dim=axis)


def all_(x):
    return torch.all(x)


def known_all(x) -> bool:
    """True when every element is known to be True (always known in eager torch)."""
    return bool(torch.all(x))


def value_check(ok, message, *values, error=DomainError) -> None:
    """Raise ``error(message(*numpy values))`` unless ``ok``."""
    if not bool(ok):
        raise error(message(*[np.asarray(v.detach().cpu()) for v in values]))


def zeros(shape, like):
    return like.new_zeros(shape)


def falses(shape, like=None):
    return torch.zeros(shape, dtype=torch.bool, device=None if like is None else like.device)


def full(shape, value: int, like):
    """int64 filled with ``value``, on like's device."""
    return torch.full(shape, value, dtype=torch.int64, device=like.device)


def arange(start: int, stop: int, like):
    return torch.arange(start, stop, device=like.device)


def cast(x, like):
    """x in like's dtype, on like's device (x is made by the backend, e.g. a PE table)."""
    return x.to(device=like.device, dtype=like.dtype)


def int64(x):
    return x.to(torch.int64)


def take_rows(x, index):
    """x[b, index[b]] for every row b: (B, S, ...) and (B,) -> (B, ...)."""
    return x[torch.arange(x.shape[0], device=x.device), index]


def reverse(x, axis: int):
    return torch.flip(x, dims=(axis,))
