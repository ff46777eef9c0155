"""The dtype contract beyond the vectors (a vector holds one dtype at a time, so none can mix
them): an array or parameter of another dtype than the input it meets, an integer array
where a float is due, and a dtype the device does not support are DTypeErrors, never a
silent promotion or the framework's own error. Once here for every backend (it was three
backends' extra checks)."""

import numpy as np
import pytest
from attnspec.spec.errors import DTypeError

pytestmark = pytest.mark.errors

FLOATS = ("float64", "float32", "float16", "bfloat16")


def _two_dtypes(backend, device) -> tuple[str, str]:
    dtypes = backend.dtypes(device)
    if len(dtypes) < 2:
        pytest.skip(f"{backend.name} on {device} computes in {dtypes[0]} only: nothing to mix")
    return dtypes[0], dtypes[1]


def _calls(backend, device, a, b):
    """(what, call) pairs: each call mixes dtype ``b`` (or an integer array) into ``a``."""
    def arr(shape, dtype):
        return backend.asarray(np.ones(shape), dtype=dtype, device=device)

    sdpa = backend.function("sdpa", "attention")
    mha = backend.function("mha", "multihead")
    q, k = arr((1, 2, 4), a), arr((1, 3, 4), a)
    ints = backend.asarray(np.ones((1, 2, 4), dtype=np.int64), dtype=None, device=device)
    params = {n: arr((4, 4), a) for n in ("w_q", "w_k", "w_v", "w_o")}
    return [
        ("sdpa with an integer q", lambda: sdpa(ints, k, k)),
        (f"sdpa with q {a}, k {b}", lambda: sdpa(q, arr((1, 3, 4), b), k)),
        (f"sdpa with q {a}, v {b}", lambda: sdpa(q, k, arr((1, 3, 4), b))),
        (f"sdpa with q {a}, bias {b}", lambda: sdpa(q, k, k, bias=arr((2, 3), b))),
        (f"mha with inputs {a}, key {b}", lambda: mha(q, arr((1, 3, 4), b), k, num_heads=1,
                                                       params=params)),
        (f"mha with inputs {a}, w_q {b}", lambda: mha(q, k, k, num_heads=1, params={
            **params, "w_q": arr((4, 4), b)})),
    ]


def test_mixed_dtypes_raise_dtype_error(backend, device):
    a, b = _two_dtypes(backend, device)
    silent, wrong = [], []
    for what, call in _calls(backend, device, a, b):
        try:
            call()
        except DTypeError:
            continue
        except Exception as exc:  # the framework's own error: the contract is DTypeError
            wrong.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        else:
            silent.append(what)
    assert not silent and not wrong, (f"accepted without DTypeError: {silent}; "
                                      f"raised another class: {wrong}")


def test_an_unsupported_dtype_is_refused_by_asarray(backend, device):
    for dtype in [d for d in FLOATS if d not in backend.dtypes(device)] + ["int8"]:
        with pytest.raises(DTypeError):
            backend.asarray(np.ones(2), dtype=dtype, device=device)
