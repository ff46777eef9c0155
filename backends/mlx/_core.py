"""Small MLX helpers shared by the component modules: dtype checks."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from attnspec.spec.errors import DTypeError

from .. import _checks as check


def array(name: str, x):
    if isinstance(x, mx.array):
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float, bool)):
        a = np.asarray(x)
        return mx.array(a.astype(np.int64) if a.dtype.kind in "iu" else a)
    raise DTypeError(f"{name} must be an mlx.core.array (or a NumPy array), got {type(x).__name__}")


def floating(name: str, x, like=None):
    """A float array, or DTypeError naming the argument; with ``like``, of like's dtype."""
    x = array(name, x)
    check.floating_dtype(name, x, ("float32", "float16", "bfloat16"))
    if like is not None and x.dtype != like.dtype:
        raise DTypeError(f"{name} has dtype {dtype_name(x)} but the input has {dtype_name(like)}")
    return x


dtype_name = check.dtype_name


def boolean(name: str, x):
    x = array(name, x)
    if x.dtype != mx.bool_:
        raise DTypeError(f"{name} must be boolean (True = may attend), got {dtype_name(x)} "
                         f"with shape {tuple(x.shape)}")
    return x


def integers(name: str, x):
    x = array(name, x)
    if not mx.issubdtype(x.dtype, mx.integer):
        raise DTypeError(f"{name} must hold integer token ids, got {dtype_name(x)} with shape "
                         f"{tuple(x.shape)}")
    return x


def same_device(name: str, x, like) -> None:
    """MLX arrays live in unified memory: nothing to check."""
