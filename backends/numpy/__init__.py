"""The NumPy backend: the whole stack in float64 and float32 on the CPU.

It is written from the equations, independently of the arbitrary-precision
reference that produced the vectors (it imports nothing of it). The differential
tests of the other backends compare against it, and it is checked against the
golden vectors like every other backend.
"""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import ConfigError, DTypeError

from ..base import Backend

DTYPES = {"float64": np.float64, "float32": np.float32}


class NumpyBackend(Backend):
    name = "numpy"
    package = __name__

    def __init__(self, **options):
        if options:
            raise ConfigError(f"unknown numpy backend option(s) {sorted(options)}; the numpy "
                              f"backend takes none")
        super().__init__()

    def devices(self) -> list[str]:
        return ["cpu"]

    def dtypes(self, device: str) -> list[str]:
        return list(DTYPES)

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        self.check_device(device)
        x = np.asarray(x)
        if dtype is None or x.dtype.kind in "biu":
            return x.copy()
        if dtype not in DTYPES:
            raise DTypeError(f"the numpy backend has no dtype {dtype!r}; supported: {list(DTYPES)}")
        return x.astype(DTYPES[dtype])

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}
