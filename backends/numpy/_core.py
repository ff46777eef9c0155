"""Small NumPy helpers shared by the component modules."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DTypeError

from .. import _checks as check


def floating(name: str, x) -> np.ndarray:
    """A float32/float64 array, or DTypeError naming the argument."""
    return check.floating_dtype(name, np.asarray(x), ("float64", "float32"))


def boolean(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.bool_:
        raise DTypeError(f"{name} must be boolean (True = may attend), got {x.dtype} "
                         f"with shape {x.shape}")
    return x


def integers(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise DTypeError(f"{name} must hold integer token ids, got {x.dtype} with shape {x.shape}")
    return x


def same_device(name: str, x, like) -> None:
    """Every array of this backend is on its one device: nothing to check."""
