"""Deliberately broken backends, to prove the suite can fail.

``mutant(sdpa=broken_sdpa)`` is the NumPy backend with those functions
replaced. ``rejections(m, component)`` runs every value vector of the
component through it and returns, per dtype, how many vectors fail. A planted
bug must fail at least one vector *at every dtype's tolerance*: the mutant runs
in float64 and float32, and its float64 outputs are also judged with the
float16 and bfloat16 tolerances (a bug that hid below bfloat16's tolerance
would pass on a bfloat16 backend).
"""

from __future__ import annotations

from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.runner import Result, call, judge, run_vector
from attnspec.spec.tensor import FLOAT_DTYPES
from attnspec.spec.vectors import default_spec


class Mutant(NumpyBackend):
    name = "mutant"

    def __init__(self, **overrides):
        super().__init__()
        self.overrides = overrides

    def function(self, name, module):
        if name in self.overrides:
            return self.overrides[name]
        return super().function(name, module)


def mutant(**overrides) -> Mutant:
    return Mutant(**overrides)


def rejections(backend, component: str) -> dict[str, int]:
    spec = default_spec()
    fails = dict.fromkeys(FLOAT_DTYPES, 0)
    for v in spec.vectors:
        if v.component != component or v.expect != "value" or v.deprecated:
            continue
        for dtype in ("float64", "float32"):
            if dtype in v.dtypes and run_vector(backend, spec, v, dtype, "cpu").status != "pass":
                fails[dtype] += 1
        if "float64" not in v.dtypes:
            continue
        fn = spec.functions[v.function]
        try:
            outputs, inter = call(backend, fn, v.inputs, v.attributes, v.params, "float64", "cpu")
        except Exception:  # noqa: BLE001 - a crash is a rejection at every dtype
            outputs = None
        for dtype in ("float16", "bfloat16"):
            if dtype not in v.dtypes:
                continue
            if outputs is None or judge(v, dtype, outputs, inter,
                                        Result(v.id, dtype, "pass")).status != "pass":
                fails[dtype] += 1
    return fails


def assert_rejected(backend, component: str) -> None:
    fails = rejections(backend, component)
    passed = [d for d, n in fails.items() if n == 0]
    assert not passed, (f"a planted bug in {component} passes every vector at {passed}: "
                        f"the vectors do not discriminate it ({fails})")
