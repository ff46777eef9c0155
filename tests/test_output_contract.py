"""The output contract is judged once, in the runner, for every backend and golden
vector: float outputs keep the requested dtype, ids are int64, and outputs live on the
requested device (when the backend can tell)."""

import numpy as np
from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.runner import run_vector
from attnspec.spec.vectors import default_spec


class Returning(NumpyBackend):
    """The NumPy backend with every output passed through ``self.change``."""

    name = "returning"

    def __init__(self, change, device=None):
        super().__init__()
        self.change, self.device = change, device

    def function(self, name, module):
        fn = super().function(name, module)

        def changed(**kwargs):
            out = fn(**kwargs)
            return tuple(map(self.change, out)) if isinstance(out, tuple) else self.change(out)

        return changed

    def device_of(self, x):
        return self.device


def _vectors(function, dtype):
    spec = default_spec()
    vs = [v for v in spec.vectors if v.function == function and v.expect == "value"
          and not v.deprecated and dtype in v.dtypes]
    assert vs
    return spec, vs


def _results(backend, function, dtype):
    spec, vs = _vectors(function, dtype)
    return [run_vector(backend, spec, v, dtype, "cpu") for v in vs]


def test_a_float32_request_answered_in_float64_fails():
    results = _results(Returning(lambda y: np.asarray(y, dtype=np.float64)), "sdpa", "float32")
    assert all(r.status == "fail" for r in results)
    assert all("output 'output' is float64, the spec's dtype here is float32" in r.messages
               for r in results)


def test_the_same_backend_unchanged_passes():
    """The harness is sound: the identity change passes, so the failures above are the
    dtype's doing (and float64 answered in float64 is right)."""
    assert {r.status for r in _results(Returning(lambda y: y), "sdpa", "float32")} == {"pass"}
    wide = Returning(lambda y: np.asarray(y, dtype=np.float64))
    assert {r.status for r in _results(wide, "sdpa", "float64")} == {"pass"}


def test_ids_must_be_int64():
    results = _results(Returning(lambda ids: np.asarray(ids).astype(np.int32)),
                       "greedy_decode", "float64")
    assert all(r.status == "fail" for r in results)
    assert all("output 'ids' is int32, the spec's dtype here is int64" in r.messages
               for r in results)


def test_outputs_on_another_device_fail():
    results = _results(Returning(lambda y: y, device="gpu"), "softmax", "float64")
    assert all(r.status == "fail" for r in results)
    assert all("output 'y' is on device 'gpu', requested 'cpu'" in r.messages for r in results)


class Spelled:
    """An array whose framework spells its dtype ``fw.float32`` (as MLX's
    ``mlx.core.float32``)."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.dtype = type("DType", (), {"name": f"fw.{self.a.dtype.name}"})()
        self.shape = self.a.shape

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


class SpelledBackend(Returning):
    def __init__(self):
        super().__init__(Spelled)

    def to_numpy(self, x):
        return np.asarray(x)


def test_a_framework_dtype_spelling_fails_with_the_hook_named():
    results = _results(SpelledBackend(), "softmax", "float32")
    assert all(r.status == "fail" for r in results)
    assert all(any("is fw.float32, the spec's dtype here is float32" in m
                   and "override Backend.dtype_name" in m for m in r.messages) for r in results)


def test_the_dtype_name_hook_reads_the_spelling():
    class Hooked(SpelledBackend):
        def dtype_name(self, x):
            return x.dtype.name.removeprefix("fw.") if isinstance(x, Spelled) else super().dtype_name(x)

    assert {r.status for r in _results(Hooked(), "softmax", "float32")} == {"pass"}
