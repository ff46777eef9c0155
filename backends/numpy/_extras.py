"""The NumPy backend's own conformance checks (run by the suite as ``test_extras``)."""

from __future__ import annotations

import numpy as np


def float32_stays_float32(spec) -> None:
    """Every float output of every value vector keeps float32 when its float inputs are
    float32 (functions with no float input, such as sinusoidal_pe, return float64)."""
    from attnspec.backends.numpy import NumpyBackend
    from attnspec.conformance.runner import convert_inputs

    backend = NumpyBackend()
    for v in spec.vectors:
        if v.expect != "value" or "float32" not in v.dtypes or v.deprecated:
            continue
        if not any(a.dtype.kind == "f" for a in (*v.inputs.values(), *v.params.values())):
            continue
        fn = spec.functions[v.function]
        impl = backend.function(fn.name, fn.module)
        kwargs = {**convert_inputs(backend, v.inputs, "float32", "cpu"), **v.attributes}
        if fn.params:
            kwargs["params"] = convert_inputs(backend, v.params, "float32", "cpu")
        out = impl(**kwargs)
        for name, arr in zip(fn.returns, out if len(fn.returns) > 1 else (out,)):
            arr = np.asarray(arr)
            if arr.dtype.kind == "f":
                assert arr.dtype == np.float32, f"{v.id} output {name!r} is {arr.dtype}"


CHECKS = [("float32-stays-float32", float32_stays_float32)]
