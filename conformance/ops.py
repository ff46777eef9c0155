"""Calling a backend with NumPy data, for property and differential tests.

``ops.sdpa(q=..., k=..., v=...)`` converts the NumPy inputs to the backend's
arrays at the dtype under test, calls the backend's ``sdpa`` and converts the
results back, returning a tuple (or the single output). Parameters go in as
``params={path: ndarray}``.
"""

from __future__ import annotations

import numpy as np
from attnspec.spec.compare import DEFAULT_TOLERANCES
from attnspec.spec.errors import NotImplementedComponent

from .runner import call


class MissingFunction(BaseException):
    """A spec function the backend does not implement, met inside a property test.

    A BaseException, so hypothesis does not catch it and spend minutes shrinking
    a failure that every example shares: the test fails at once, naming the function.
    """


class Ops:
    def __init__(self, backend, spec, device: str, dtype: str):
        self.backend, self.spec, self.device, self.dtype = backend, spec, device, dtype
        self.tol = DEFAULT_TOLERANCES[dtype]
        self.called: list[str] = []  # the spec functions this test called, in order

    def __call__(self, name: str, *, params=None, trace: bool = False, **kwargs):
        fn = self.spec.functions[name]
        if name not in self.called:
            self.called.append(name)
        inputs = {k: v for k, v in kwargs.items() if k in fn.inputs and v is not None}
        attributes = {k: v for k, v in kwargs.items() if k not in fn.inputs}
        try:
            outputs, inter = call(self.backend, fn, inputs, attributes, params, self.dtype,
                                  self.device, trace=trace)
        except NotImplementedComponent as exc:
            raise MissingFunction(f"missing: {exc}") from None
        values = tuple(outputs[r] for r in fn.returns)
        result = values[0] if len(values) == 1 else values
        return (result, inter) if trace else result

    def raw(self, name: str, module: str):
        """A backend function that takes backend arrays (for API beyond the vectors, such as
        the decoding cache); a missing one fails the test at once (MissingFunction)."""
        try:
            impl = self.backend.function(name, module)
        except NotImplementedComponent as exc:
            raise MissingFunction(f"missing: {exc}") from None

        def checked(*args, **kwargs):
            try:
                return impl(*args, **kwargs)
            except NotImplementedComponent as exc:
                raise MissingFunction(f"missing: {exc}") from None

        return checked

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self.spec.functions:
            raise AttributeError(name)
        return lambda **kw: self(name, **kw)

    def assert_close(self, actual, desired, *, scale: float = 1.0, what: str = "") -> None:
        """Equal within the dtype's default tolerance (times ``scale``). A failure names
        the backend, the spec functions called, the dtype and the tolerance, and prints
        the arrays in full precision (at NumPy's default 8 digits a float32 mismatch can
        print ACTUAL and DESIRED alike)."""
        where = (f"{self.backend.name} {', '.join(self.called) or 'no spec function'} at "
                 f"{self.dtype} (rtol={self.tol['rtol'] * scale:g}, "
                 f"atol={self.tol['atol'] * scale:g})")
        with np.printoptions(precision=17, floatmode="maxprec", threshold=200):
            np.testing.assert_allclose(
                np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64),
                rtol=self.tol["rtol"] * scale, atol=self.tol["atol"] * scale,
                err_msg=f"{what}: {where}" if what else where)
