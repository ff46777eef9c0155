"""Fixtures and collection hooks of the suite. pytest applies a conftest to its own
folder only, so none of this reaches another project's tests."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from attnspec.conformance.plugin import (
    FAMILIES,
    OUTCOME_PROPERTY,
    RESULT_PROPERTY,
    differential_not_applicable,
    profile_for_suite,
    session,
)


def _session(config):
    s = session(config)
    if s.problem:  # the plugin stops the run at configure time; this is a direct run
        raise pytest.UsageError(f"attnspec: {s.problem}")
    return s


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """Import the suite's modules under attnspec's hypothesis profile: ``@given`` takes its
    settings when the module is imported, so the profile is in force for these tests only
    and the one in force before is restored."""
    name = profile_for_suite(collector.config) if isinstance(collector, pytest.Module) else None
    if name is None:
        return (yield)
    from hypothesis import settings

    before = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        return (yield)
    finally:
        settings.load_profile(before)


def pytest_generate_tests(metafunc):
    names = metafunc.fixturenames
    if "vector_dtype" not in names and "value_vector" not in names:
        return
    s = _session(metafunc.config)
    if "vector_dtype" in names:
        expect = getattr(metafunc.function, "expect", "value")
        params = [pytest.param((v, d), id=f"{v.id}[{d}]")
                  for v in s.spec.vectors if v.expect == expect and not v.deprecated
                  for d in s.dtypes if d in v.dtypes]
        metafunc.parametrize("vector_dtype", params)
    if "value_vector" in names:
        params = [pytest.param(v, id=v.id) for v in s.spec.vectors
                  if v.expect == "value" and not v.deprecated
                  and s.property_dtype in v.dtypes
                  and all(o.dtype.kind == "f" for o in v.outputs.values())]
        metafunc.parametrize("value_vector", params)


def family(item) -> str | None:
    """The family marker a suite test carries (plugin.FAMILIES), or None."""
    return next((m.name for m in item.iter_markers() if m.name in FAMILIES), None)


def group(item, property_dtype: str) -> str:
    """The xdist group of a suite test: the tests over vectors of one (component, dtype)
    share a process (a compiling backend compiles their shapes once), any other test is
    a group of its own function. (No "]" in a name: xdist reads ``nodeid@group`` only when
    the "@" comes after the last "]".)"""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "vector_dtype" in params:
        vector, dtype = params["vector_dtype"]
        return f"{vector.component}:{dtype}"
    if "value_vector" in params:
        return f"{params['value_vector'].component}:{property_dtype}"
    return item.nodeid.split("[")[0].rpartition("/")[2]


@pytest.hookimpl(tryfirst=True)  # before xdist's worker writes the group into the node id
def pytest_collection_modifyitems(config, items):
    """Drop the differential family where it does not apply (the NumPy backend against
    itself); mark every suite test with its xdist group."""
    s = _session(config)
    suite = Path(__file__).resolve().parent
    inside = {}  # item.path -> whether it is a suite module (thousands of items, a few paths)

    def in_suite(item) -> bool:
        if item.path not in inside:
            inside[item.path] = suite in Path(item.path).resolve().parents
        return inside[item.path]

    s.property_tests |= {item.originalname for item in items if family(item) == "properties"}
    if differential_not_applicable(s.backend):
        items[:] = [item for item in items if not in_suite(item) or family(item) != "differential"]
    for item in items:
        if in_suite(item):
            item.add_marker(pytest.mark.xdist_group(group(item, s.property_dtype)))


# -- known failures of the differential and property tests --------------------------


def outcome_key(item, s) -> tuple[str, str] | None:
    """What a known-failure pattern matches for a differential test (the vector id) or a
    property test (its function name), with the suite's property dtype; None for others."""
    kind = family(item)
    if kind == "differential":
        params = getattr(getattr(item, "callspec", None), "params", {})
        vector = params.get("value_vector")
        return (vector.id, s.property_dtype) if vector is not None else None
    if kind == "properties":
        return item.originalname, s.property_dtype
    return None


def rerun_line(item, s) -> str:
    """The command that runs this one test again, as `attnspec verify` runs it (the same
    dtypes, so the same property dtype; the same hypothesis profile)."""
    import shlex

    options = "".join(f" --backend-option {shlex.quote(f'{k}={v}')}" for k, v in s.options.items())
    profile = os.environ.get("ATTNSPEC_HYPOTHESIS_PROFILE") or "ci"
    return (f"attnspec verify --backend {s.backend_name} --device {s.device} --dtype "
            f"{','.join(s.dtypes)}{options} --jobs 1 --hypothesis-profile {profile} "
            f"-k {shlex.quote(item.name)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A differential or property test's outcome: recorded (a known-failure line whose
    every test passes is stale), and a failure a known-failure line names becomes xfail."""
    report = yield
    s = _session(item.config)
    if report.failed and report.when == "call":
        report.sections.append(("attnspec: rerun", rerun_line(item, s)))
    key = outcome_key(item, s) if report.when == "call" else None
    if key is None or report.skipped:
        return report
    from attnspec.conformance.known import Outcome, match

    outcome = Outcome(item.originalname, *key, "pass" if report.passed else "fail")
    s.outcomes.append(outcome)
    report.user_properties.append((OUTCOME_PROPERTY, vars(outcome)))
    known = match(s.known, *key) if report.failed else None
    if known is not None:
        report.outcome = "skipped"
        report.wasxfail = f"known failure ({s.known_path}:{known.line}): {known.reason}"
    return report


# -- a time limit per test -------------------------------------------------------------


class SuiteTimeout(BaseException):
    """Raised in the main thread when a test runs past --attnspec-timeout. A BaseException,
    so neither a backend's ``except Exception`` nor hypothesis (which would shrink) keeps it."""


# After the alarm, how long native code that never returns to Python gets before the
# watchdog stops the process (a signal handler only runs between bytecodes).
GRACE_SECONDS = 10.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    seconds = _session(item.config).timeout
    usable = (seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        return (yield)
    what = f"{item.name} did not finish within {seconds:g} s (--attnspec-timeout)"
    s = _session(item.config)

    def expire(signum, frame):
        raise SuiteTimeout()

    def hard_stop():  # the alarm could not interrupt it: one line, and stop
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=False)  # back to the real stderr
        os.write(2, f"attnspec: {what} and cannot be interrupted (native code); stopping "
                    f"the run\n".encode())
        os._exit(3)

    watchdog = threading.Timer(seconds + GRACE_SECONDS, hard_stop)
    watchdog.daemon = True
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    watchdog.start()
    try:
        return (yield)
    except SuiteTimeout:
        _record_timeout(item, s, f"{what}: a hanging backend?")
        pytest.fail(f"{what}: a hanging backend?", pytrace=False)
    finally:
        watchdog.cancel()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _record_timeout(item, s, why: str) -> None:
    """A test over one vector that timed out is that vector's failure, in the results."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "vector_dtype" in params:
        from attnspec.conformance.runner import Result

        vector, dtype = params["vector_dtype"]
        record(item, s, Result(vector.id, dtype, "fail", messages=[why],
                               component=vector.component))


def record(item, s, result) -> None:
    """One vector's result: in this process's session, and in the test's report (for the
    xdist controller, plugin.WorkerResults)."""
    s.results.append(result)
    item.user_properties.append((RESULT_PROPERTY, result.as_json()))


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def attnspec_session(request):
    return _session(request.config)


@pytest.fixture(scope="session")
def backend(attnspec_session):
    return attnspec_session.backend


@pytest.fixture(scope="session")
def device(attnspec_session):
    return attnspec_session.device


@pytest.fixture(scope="session")
def spec(attnspec_session):
    return attnspec_session.spec


@pytest.fixture(scope="session")
def ops(attnspec_session):
    from attnspec.conformance.ops import Ops

    s = attnspec_session
    s.ops = Ops(s.backend, s.spec, s.device, s.property_dtype)
    return s.ops


def pytest_runtest_setup(item):
    """A property test's failure names the spec functions it called: start the list."""
    ops = getattr(_session(item.config), "ops", None)
    if ops is not None:
        ops.called.clear()


@pytest.fixture
def record_result(attnspec_session, request):
    """Record a runner Result; a failure matching a known-failure pattern becomes xfail."""
    s = attnspec_session

    def record_one(result):
        from attnspec.conformance.known import match

        known = match(s.known, result.id, result.dtype) if result.status != "pass" else None
        if known is not None:
            result.known_failure = known.reason
        record(request.node, s, result)
        if known is not None:
            pytest.xfail(f"known failure ({s.known_path}:{known.line}): {known.reason}")
        return result

    return record_one
