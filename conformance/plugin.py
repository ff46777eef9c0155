"""The pytest plugin (entry point ``pytest11: attnspec``).

Options (each with an environment variable):
  --backend NAME      ATTNSPEC_BACKEND   default numpy
  --device NAME       ATTNSPEC_DEVICE    default cpu
  --dtype A,B         ATTNSPEC_DTYPE     default: every dtype the backend supports there
  --backend-option K=V (repeatable)      passed to the backend (e.g. mode=graph)
  --attnspec-json PATH                   write the machine-readable results
  --vectors-dir DIR   ATTNSPEC_VECTORS_DIR  another vector directory (same manifest rules)

The suite itself is ``attnspec.conformance.suite``; run it with
``pytest --pyargs attnspec.conformance.suite --backend torch`` or ``attnspec verify``.
"""

from __future__ import annotations

import json
import os
import platform

import pytest

HYPOTHESIS_PROFILES = {
    # What tox and `attnspec verify` use: reproducible, bounded, no timing flakiness.
    "ci": dict(derandomize=True, max_examples=20, deadline=None, database=None,
               print_blob=True),
    # For local hunting: many more examples, random seeds, the example database.
    "thorough": dict(max_examples=500, deadline=None, print_blob=True),
}


def _register_profiles() -> None:
    from hypothesis import HealthCheck, settings

    for name, kw in HYPOTHESIS_PROFILES.items():
        settings.register_profile(
            name, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], **kw)


def pytest_addoption(parser):
    g = parser.getgroup("attnspec", "attnspec conformance")
    g.addoption("--backend", default=None, help="backend name (env ATTNSPEC_BACKEND; numpy)")
    g.addoption("--device", default=None, help="device (env ATTNSPEC_DEVICE; cpu)")
    g.addoption("--dtype", default=None,
                help="comma-separated dtypes (env ATTNSPEC_DTYPE; all the device supports)")
    g.addoption("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                help="option passed to the backend, e.g. mode=graph (repeatable)")
    g.addoption("--attnspec-json", default=None, metavar="PATH",
                help="write per-vector results as JSON")
    g.addoption("--vectors-dir", default=None,
                help="load vectors from this directory (env ATTNSPEC_VECTORS_DIR)")
    g.addoption("--known-failures", default=None, metavar="FILE",
                help="known-failure patterns for this backend (one 'pattern  # reason' a line)")


class Session:
    """What the suite runs against, resolved once per pytest session."""

    def __init__(self, config):
        opt = config.getoption
        self.backend_name = opt("backend") or os.environ.get("ATTNSPEC_BACKEND") or "numpy"
        self.device = opt("device") or os.environ.get("ATTNSPEC_DEVICE") or "cpu"
        dtype = opt("dtype") or os.environ.get("ATTNSPEC_DTYPE")
        self.requested_dtypes = [d.strip() for d in dtype.split(",")] if dtype else None
        self.options = dict(kv.split("=", 1) for kv in opt("backend_option"))
        self.vectors_dir = opt("vectors_dir") or os.environ.get("ATTNSPEC_VECTORS_DIR")
        self.json_path = opt("attnspec_json")
        self.known_path = opt("known_failures") or os.environ.get("ATTNSPEC_KNOWN_FAILURES")
        self.known: list = []
        self.results: list = []
        self.backend = None
        self.backend_problem = None
        self.spec = None
        self.spec_problem = None
        self._load()

    def _load(self) -> None:
        from attnspec.backends import get_backend
        from attnspec.spec.vectors import VECTORS_DIR, load

        try:
            self.spec = load(self.vectors_dir or VECTORS_DIR)
        except Exception as exc:  # reported by test_completeness and at collection
            self.spec_problem = f"{type(exc).__name__}: {exc}"
        try:
            self.backend = get_backend(self.backend_name, **self.options)
            if self.device not in self.backend.devices():
                self.backend_problem = (
                    f"device {self.device!r} is not available to backend "
                    f"{self.backend_name!r} on this machine (available: "
                    f"{self.backend.devices()})")
            else:
                self.backend.select_device(self.device)
        except Exception as exc:
            self.backend_problem = f"{type(exc).__name__}: {exc}"
        if self.known_path is None and self.backend is not None:
            found = self.backend.known_failures_file()
            self.known_path = str(found) if found else None
        if self.known_path:
            from .known import parse

            self.known = parse(self.known_path)

    @property
    def dtypes(self) -> list[str]:
        if self.requested_dtypes:
            return self.requested_dtypes
        if self.backend is None or self.backend_problem:
            return ["float64"]
        return self.backend.dtypes(self.device)

    @property
    def property_dtype(self) -> str:
        """Property and differential tests run at the most precise dtype requested."""
        order = ["float64", "float32", "float16", "bfloat16"]
        return sorted(self.dtypes, key=lambda d: order.index(d) if d in order else 9)[0]

    def header(self) -> list[str]:
        lines = [f"attnspec: backend={self.backend_name} device={self.device} "
                 f"dtypes={','.join(self.dtypes)} options={self.options or '{}'}"]
        if self.spec is not None:
            lines.append(f"attnspec: spec {self.spec.version}, {len(self.spec.vectors)} vectors, "
                         f"{len(self.spec.functions)} functions in "
                         f"{len(self.spec.components)} components")
        if self.backend is not None:
            versions = dict(self.backend.versions())
            versions["python"] = platform.python_version()
            lines.append("attnspec: versions " + ", ".join(f"{k} {v}" for k, v in versions.items()))
            if self.known_path:
                lines.append(f"attnspec: known failures: {self.known_path} "
                             f"({len(self.known)} pattern(s))")
            describe = self.backend.describe()
            if describe != self.backend_name:
                lines.append(f"attnspec: {describe}")
        for problem in (self.spec_problem, self.backend_problem):
            if problem:
                lines.append(f"attnspec: PROBLEM: {problem}")
        return lines


def pytest_configure(config):
    _register_profiles()
    from hypothesis import settings

    if not config.getoption("hypothesis_profile", default=None):
        settings.load_profile(os.environ.get("ATTNSPEC_HYPOTHESIS_PROFILE", "ci"))
    config.addinivalue_line("markers", "attnspec: a conformance test")
    config._attnspec = None


def session(config) -> Session:
    if config._attnspec is None:
        config._attnspec = Session(config)
    return config._attnspec


def _in_suite(config) -> bool:
    return any("conformance" in str(a) for a in config.args) or bool(
        config.getoption("backend") or os.environ.get("ATTNSPEC_BACKEND"))


def pytest_report_header(config):
    if _in_suite(config):
        return session(config).header()
    return None


def pytest_generate_tests(metafunc):
    if "vector_dtype" not in metafunc.fixturenames and "value_vector" not in metafunc.fixturenames:
        return
    s = session(metafunc.config)
    if s.spec is None:
        metafunc.parametrize("vector_dtype", [pytest.param(None, id="vectors-unloadable")])
        return
    if "vector_dtype" in metafunc.fixturenames:
        expect = getattr(metafunc.function, "expect", "value")
        params = [pytest.param((v, d), id=f"{v.id}[{d}]")
                  for v in s.spec.vectors if v.expect == expect and not v.deprecated
                  for d in s.dtypes if d in v.dtypes]
        metafunc.parametrize("vector_dtype", params)
    if "value_vector" in metafunc.fixturenames:
        params = [pytest.param(v, id=v.id) for v in s.spec.vectors
                  if v.expect == "value" and not v.deprecated
                  and s.property_dtype in v.dtypes
                  and all(o.dtype.kind == "f" for o in v.outputs.values())]
        metafunc.parametrize("value_vector", params)


@pytest.fixture(scope="session")
def attnspec_session(request) -> Session:
    s = session(request.config)
    if s.spec_problem:
        pytest.fail(f"the golden vectors cannot be loaded: {s.spec_problem}", pytrace=False)
    if s.backend_problem:
        pytest.fail(s.backend_problem, pytrace=False)
    return s


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
    from .ops import Ops

    s = attnspec_session
    return Ops(s.backend, s.spec, s.device, s.property_dtype)


@pytest.fixture
def record_result(request):
    """Record a runner Result; a failure matching a known-failure pattern becomes xfail."""
    s = session(request.config)

    def record(result):
        from .known import match

        s.results.append(result)
        if result.status != "pass":
            known = match(s.known, result.id, result.dtype)
            if known is not None:
                result.known_failure = known.reason
                pytest.xfail(f"known failure ({s.known_path}:{known.line}): {known.reason}")
        return result

    return record


def pytest_sessionfinish(session, exitstatus):
    s = session.config._attnspec
    if s is None or not s.json_path:
        return
    doc = {
        "backend": s.backend_name,
        "device": s.device,
        "dtypes": s.dtypes,
        "options": s.options,
        "spec_version": s.spec.version if s.spec else None,
        "versions": ({**s.backend.versions(), "python": platform.python_version()}
                     if s.backend else {}),
        "problems": [p for p in (s.spec_problem, s.backend_problem) if p],
        "exitstatus": int(exitstatus),
        "results": [r.as_json() for r in s.results],
    }
    tmp = s.json_path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, s.json_path)

