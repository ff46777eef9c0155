"""The backend imports, the device exists, the dtypes are supported, and every
spec function is implemented. None of these is ever a skip."""

import pytest
from attnspec.spec.errors import NotImplementedComponent

pytestmark = pytest.mark.completeness


def test_backend_and_device(attnspec_session):
    s = attnspec_session
    assert s.device in s.backend.devices()
    unsupported = [d for d in s.dtypes if d not in s.backend.dtypes(s.device)]
    assert not unsupported, (f"backend {s.backend_name!r} does not support {unsupported} on "
                             f"{s.device!r}; it supports {s.backend.dtypes(s.device)}")


def test_conversion_round_trip(backend, device, attnspec_session):
    import numpy as np

    x = np.array([[0.5, -1.25], [3.0, 0.0]])
    for dtype in attnspec_session.dtypes:
        y = backend.to_numpy(backend.asarray(x, dtype=dtype, device=device))
        assert y.shape == x.shape and np.array_equal(y.astype(np.float64), x), dtype
    ids = np.array([[1, 2, 0]], dtype=np.int64)
    assert np.array_equal(backend.to_numpy(backend.asarray(ids, dtype=None, device=device)), ids)


def test_every_function_implemented(backend, spec):
    missing = []
    for fn in spec.functions.values():
        try:
            impl = backend.function(fn.name, fn.module)
        except NotImplementedComponent as exc:
            missing.append(f"{fn.component}.{fn.name}: {exc}")
            continue
        if not callable(impl):
            missing.append(f"{fn.component}.{fn.name}: not callable")
        elif getattr(impl, "attnspec_stub", False):
            missing.append(f"{fn.component}.{fn.name}: still a scaffold stub (@missing)")
    from attnspec.conformance.contract import EXTRA_FUNCTIONS

    for name, module, _, _ in EXTRA_FUNCTIONS:
        try:
            impl = backend.function(name, module)
        except NotImplementedComponent as exc:
            missing.append(f"(decoding API) {name}: {exc}")
            continue
        if getattr(impl, "attnspec_stub", False):
            missing.append(f"(decoding API) {name}: still a scaffold stub (@missing)")
    if missing:
        pytest.fail(f"{len(missing)} spec function(s) missing:\n" + "\n".join(missing),
                    pytrace=False)


def test_known_failure_patterns_all_match_a_vector(attnspec_session):
    """A pattern in the known-failures file that matches no vector and no property test
    (by its function name) is reported."""
    from attnspec.conformance.known import unmatched

    s = attnspec_session
    ids = [*(v.id for v in s.spec.vectors), *sorted(s.property_tests)]
    stale = unmatched(s.known, ids, s.dtypes)
    assert not stale, "known-failure patterns that match no vector or property test:\n" + "\n".join(
        f"{s.known_path}:{k.line}: {k.pattern}" for k in stale)
