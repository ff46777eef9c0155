"""Backend-specific checks the backend declares (``Backend.extra_checks``, which finds
``<package>.extras.extra_checks(backend, device)``): agreement with the framework's own
built-ins, gradients, execution modes.
Extras are optional: a backend that declares none gets one test, reported as
skipped with that reason (never a pass that asserted nothing)."""

import pytest

pytestmark = pytest.mark.extras


def _checks(config):
    from attnspec.conformance.plugin import session

    s = session(config)
    return [] if s.problem else s.backend.extra_checks(s.device)


def pytest_generate_tests(metafunc):
    if "extra_check" in metafunc.fixturenames:
        checks = _checks(metafunc.config)
        metafunc.parametrize("extra_check", [pytest.param(c, id=c[0]) for c in checks]
                             or [pytest.param(None, id="none-declared")])


def test_extra(extra_check, spec):
    if extra_check is None:
        pytest.skip("the backend declares no extra checks (an extras.extra_checks module "
                    "is optional)")
    _, check = extra_check
    check(spec)
