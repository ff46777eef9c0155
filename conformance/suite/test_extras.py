"""Backend-specific checks the backend declares (``Backend.extra_checks``, which finds
``<package>.extras.extra_checks(backend, device)``): agreement with the framework's own
built-ins, gradients, execution modes.
Extras are optional: a backend that declares none gets one test, reported as
skipped with that reason (never a pass that asserted nothing)."""

import re

import pytest

pytestmark = pytest.mark.extras


def _checks(config):
    from attnspec.conformance.plugin import session

    s = session(config)
    return [] if s.problem else s.backend.extra_checks(s.device)


# Every backend names its extra checks alike, ``<kind>/<subject>``: ``agree/`` a framework
# built-in the vectors are run through (``agree/nn.LayerNorm``), ``grad/`` a spec function
# whose gradient is checked (``grad/sdpa``), ``pinned/`` a documented difference of a
# built-in, ``errors/`` an error contract of the framework's own (``errors/wrong-device``).
# The device, dtype and mode are the run's (printed in its header), never part of the id.
EXTRA_ID = re.compile(r"(agree|grad|pinned|errors)/[A-Za-z0-9_.+\-]+")


def pytest_generate_tests(metafunc):
    if "extra_check" in metafunc.fixturenames:
        checks = _checks(metafunc.config)
        metafunc.parametrize("extra_check", [pytest.param(c, id=c[0]) for c in checks]
                             or [pytest.param(None, id="none-declared")])


def test_extra(extra_check, spec):
    if extra_check is None:
        pytest.skip("the backend declares no extra checks (an extras.extra_checks module "
                    "is optional)")
    name, check = extra_check
    assert EXTRA_ID.fullmatch(name), (f"extra check {name!r} is not named <kind>/<subject> "
                                      f"with kind agree, grad, pinned or errors")
    check(spec)
