"""Small NumPy helpers shared by the component modules."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DTypeError

FLOATS = (np.float32, np.float64)


def floating(name: str, x) -> np.ndarray:
    """A float32/float64 array, or DTypeError naming the argument."""
    x = np.asarray(x)
    if x.dtype.type not in FLOATS:
        raise DTypeError(f"{name} must be float32 or float64, got {x.dtype} with shape {x.shape}")
    return x


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
