"""The pytest plugin (entry point ``pytest11: attnspec``).

Installed with attnspec, so it is loaded into every pytest run on the machine. It
therefore only registers its own, namespaced options; everything else (the report
header, the hypothesis profile, the fixtures, the timeout) acts only when the
attnspec suite runs, and only on the suite's own tests (the fixtures and
collection hooks live in ``suite/conftest.py``, which pytest applies to that
folder alone).

Options (each with an environment variable):
  --attnspec-backend NAME           ATTNSPEC_BACKEND          default numpy
  --attnspec-device NAME            ATTNSPEC_DEVICE           default cpu
  --attnspec-dtype A,B              ATTNSPEC_DTYPE            default: every dtype the backend
                                                              supports on the device
  --attnspec-backend-option K=V     (repeatable)              passed to the backend
  --attnspec-json PATH                                        the machine-readable results
  --attnspec-vectors-dir DIR        ATTNSPEC_VECTORS_DIR      another vector directory
  --attnspec-known-failures FILE    ATTNSPEC_KNOWN_FAILURES   known-failure patterns
  --attnspec-timeout SECONDS        ATTNSPEC_TIMEOUT          per test: 0 (no limit) or 1 to
                                                              86400 (default 60)

The suite's tests carry a marker naming their family (FAMILIES: golden, errors,
gradients, differential, properties, completeness, extras), so ``-m golden`` or
``-k "golden or errors"`` picks families, and an ``xdist_group`` mark (one group per
(component, dtype) for the tests over vectors, one per test function otherwise), so
``pytest -n N --dist loadgroup`` (``attnspec verify --jobs N``) keeps a group in one
worker. Under xdist each worker ships its vector results to the controller with its
test reports; the controller judges known failures gone stale, decides the exit status
and writes the JSON.

Hypothesis: the suite's tests use attnspec's profile ``ci`` (or ``thorough`` or ``quick``,
from ATTNSPEC_HYPOTHESIS_PROFILE) unless ``--hypothesis-profile`` is given; no other
test's settings change.

The suite is ``attnspec.conformance.suite``; run it with ``attnspec verify`` or
``pytest --pyargs attnspec.conformance.suite --attnspec-backend torch``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
from pathlib import Path

import pytest

SUITE_DIR = Path(__file__).resolve().parent / "suite"
SUITE_MODULE = "attnspec.conformance.suite"
DTYPE_ORDER = ("float64", "float32", "float16", "bfloat16")
DEFAULT_TIMEOUT = 60.0
# 0 is "no limit"; below a second a first compile on a compiling backend is cut off, and
# setitimer refuses what does not fit a C long (inf, 1e300).
TIMEOUT_RANGE = (1.0, 86400.0)
FAMILIES = {
    "golden": "value vectors against the oracle's outputs",
    "errors": "error vectors: the spec's error class and message",
    "gradients": "gradient vectors: the backend's VJP against the oracle's",
    "differential": "perturbed value vectors against the NumPy backend in float64",
    "properties": "hypothesis properties of the spec functions",
    "completeness": "every function implemented, the backend's own declarations",
    "extras": "the backend's own extra checks (extra_checks)",
}
# The test reports' user_properties key under which a worker ships a vector's result.
RESULT_PROPERTY = "attnspec_result"
# ... and the outcome of a differential or property test (suite/conftest.py, Outcome).
OUTCOME_PROPERTY = "attnspec_outcome"

_NO_EXPLAIN = ("explicit", "reuse", "generate", "target", "shrink")
_NO_SHRINK = ("explicit", "reuse", "generate", "target")
HYPOTHESIS_PROFILES = {
    # What tox and `attnspec verify` use: reproducible, bounded, no timing flakiness; a
    # failure is shrunk but not "explained" (the explain phase annotates the lines of
    # NumPy's own printing code) and prints no @reproduce_failure blob (it points into the
    # installed package; the rerun line the suite prints is the way back).
    "ci": dict(derandomize=True, max_examples=20, deadline=None, database=None,
               print_blob=False, phases=_NO_EXPLAIN),
    # For local hunting: many more examples, random seeds, the example database.
    "thorough": dict(max_examples=500, deadline=None, print_blob=True),
    # For iterating on a backend, and for tests of the runner itself: reproducible, three
    # examples per property (the vectors still all run), no shrinking: a red run is as
    # quick as a green one.
    "quick": dict(derandomize=True, max_examples=3, deadline=None, database=None,
                  print_blob=False, phases=_NO_SHRINK),
}

# option dest -> environment variable
_ENV = {"attnspec_backend": "ATTNSPEC_BACKEND", "attnspec_device": "ATTNSPEC_DEVICE",
        "attnspec_dtype": "ATTNSPEC_DTYPE", "attnspec_vectors_dir": "ATTNSPEC_VECTORS_DIR",
        "attnspec_known_failures": "ATTNSPEC_KNOWN_FAILURES",
        "attnspec_timeout": "ATTNSPEC_TIMEOUT"}
_SESSION = pytest.StashKey["Session"]()


class SuiteConfigError(Exception):
    """A fault in how the suite was asked to run; its message is one line for the user."""


def pytest_addoption(parser):
    g = parser.getgroup("attnspec", "attnspec conformance suite (attnspec.conformance.suite)")
    g.addoption("--attnspec-backend", default=None,
                help="backend name (env ATTNSPEC_BACKEND; numpy)")
    g.addoption("--attnspec-device", default=None, help="device (env ATTNSPEC_DEVICE; cpu)")
    g.addoption("--attnspec-dtype", default=None,
                help="comma-separated dtypes (env ATTNSPEC_DTYPE; all the device supports)")
    g.addoption("--attnspec-backend-option", action="append", default=[], metavar="KEY=VALUE",
                help="option passed to the backend, e.g. mode=graph (repeatable)")
    g.addoption("--attnspec-json", default=None, metavar="PATH",
                help="write per-vector results as JSON")
    g.addoption("--attnspec-vectors-dir", default=None, metavar="DIR",
                help="load vectors from this directory (env ATTNSPEC_VECTORS_DIR)")
    g.addoption("--attnspec-known-failures", default=None, metavar="FILE",
                help="known-failure patterns for this backend (one 'pattern  # reason' a line)")
    g.addoption("--attnspec-timeout", default=None, metavar="SECONDS",
                help=f"fail a suite test that runs longer (env ATTNSPEC_TIMEOUT; "
                     f"{DEFAULT_TIMEOUT:g}; 0: no limit; else {TIMEOUT_RANGE[0]:g} to "
                     f"{TIMEOUT_RANGE[1]:g})")


def _value(config, dest: str):
    return config.getoption(dest) or (os.environ.get(_ENV[dest]) if dest in _ENV else None)


def parse_dtypes(text: str | None) -> list[str] | None:
    if not text:
        return None
    dtypes = [d.strip() for d in text.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPE_ORDER]
    if unknown or not dtypes:
        raise SuiteConfigError(f"unknown dtype(s) {unknown or [text]}; the spec's dtypes are "
                               f"{', '.join(DTYPE_ORDER)}")
    return dtypes


def parse_backend_options(pairs) -> dict[str, str]:
    bad = [p for p in pairs if "=" not in p or not p.partition("=")[0].strip()]
    if bad:
        raise SuiteConfigError(f"backend option {bad[0]!r} is not KEY=VALUE (e.g. mode=graph)")
    return dict(p.split("=", 1) for p in pairs)


def parse_timeout(text) -> float:
    """Seconds per test: 0 (no limit) or within TIMEOUT_RANGE; SuiteConfigError else."""
    if text in (None, ""):
        return DEFAULT_TIMEOUT
    low, high = TIMEOUT_RANGE
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds != 0 and not low <= seconds <= high:
        raise SuiteConfigError(f"timeout {text!r} (ATTNSPEC_TIMEOUT or --attnspec-timeout) is "
                               f"not 0 (no limit) or a number of seconds from {low:g} to "
                               f"{high:g}")
    return seconds


class Session:
    """What the suite runs against, resolved once per pytest session.

    ``problem`` is the first fault that stops the suite from running at all (unknown
    backend, framework not installed, no such device or dtype, unreadable vectors or
    known-failures file), as one line, or None.
    """

    def __init__(self, backend="numpy", device="cpu", dtype=None, options=(),
                 vectors_dir=None, json_path=None, known_path=None, timeout=None):
        """Arguments as the user gave them (``dtype`` "float32,float64", ``options``
        ["KEY=VALUE", ...], ``timeout`` seconds as text); faults end in ``problem``."""
        self.backend_name, self.device = backend, device
        self.vectors_dir, self.json_path, self.known_path = vectors_dir, json_path, known_path
        self.requested_dtypes, self.options, self.timeout = None, {}, DEFAULT_TIMEOUT
        self.known: list = []
        self.results: list = []
        self.outcomes: list = []  # differential and property tests: known.Outcome
        self.property_tests: set[str] = set()  # the property tests' names (collected)
        self.backend = None
        self.spec = None
        self.problem: str | None = None
        self.notes: list[str] = []
        self.stale: list[str] = []
        self.workers: set[str] = set()  # the xdist workers whose reports came in
        self.doc: dict | None = None  # the results document, once the run is over
        self.interrupted: int | None = None  # the signal that stopped the run
        try:
            self.requested_dtypes = parse_dtypes(dtype)
            self.options = parse_backend_options(options)
            self.timeout = parse_timeout(timeout)
            self._load()
        except SuiteConfigError as exc:
            self.problem = str(exc)

    @classmethod
    def from_config(cls, config) -> Session:
        return cls(backend=_value(config, "attnspec_backend") or "numpy",
                   device=_value(config, "attnspec_device") or "cpu",
                   dtype=_value(config, "attnspec_dtype"),
                   options=config.getoption("attnspec_backend_option"),
                   vectors_dir=_value(config, "attnspec_vectors_dir"),
                   json_path=config.getoption("attnspec_json"),
                   known_path=_value(config, "attnspec_known_failures"),
                   timeout=_value(config, "attnspec_timeout"))

    def _load(self) -> None:
        from attnspec.backends import get_backend
        from attnspec.spec.vectors import default_spec, load

        try:
            self.spec = load(self.vectors_dir) if self.vectors_dir else default_spec()
        except Exception as exc:  # reported as the one line
            raise SuiteConfigError(f"the golden vectors cannot be loaded: {exc}") from None
        try:
            self.backend = get_backend(self.backend_name, **self.options)
        except Exception as exc:
            raise SuiteConfigError(_one_line(exc)) from None
        devices = self.backend.devices()
        if self.device not in devices:
            raise SuiteConfigError(f"device {self.device!r} is not available to backend "
                                   f"{self.backend_name!r} on this machine (available: "
                                   f"{', '.join(devices)})")
        supported = self.backend.dtypes(self.device)
        unsupported = [d for d in self.requested_dtypes or () if d not in supported]
        if unsupported:
            raise SuiteConfigError(f"backend {self.backend_name!r} does not support "
                                   f"{', '.join(unsupported)} on {self.device!r} (it supports "
                                   f"{', '.join(supported)})")
        self.backend.select_device(self.device)
        self._load_known()
        if differential_not_applicable(self.backend):
            self.notes.append("differential tests: not applicable (the backend under test is "
                              "the NumPy reference itself)")

    def _load_known(self) -> None:
        if self.known_path is None:
            found = self.backend.known_failures_file()
            self.known_path = str(found) if found else None
        if self.known_path:
            from .known import KnownFailuresError, parse

            try:
                self.known = parse(self.known_path)
            except KnownFailuresError as exc:
                raise SuiteConfigError(str(exc)) from None

    @property
    def dtypes(self) -> list[str]:
        if self.requested_dtypes:
            return self.requested_dtypes
        return self.backend.dtypes(self.device)

    @property
    def property_dtype(self) -> str:
        """Property and differential tests run at the most precise dtype requested."""
        return sorted(self.dtypes, key=DTYPE_ORDER.index)[0]

    def header(self) -> list[str]:
        lines = [f"attnspec: backend={self.backend_name} device={self.device} "
                 f"dtypes={','.join(self.dtypes)} options={self.options or '{}'} "
                 f"timeout={self.timeout:g}s"]
        lines.append(f"attnspec: spec {self.spec.version}, {len(self.spec.vectors)} vectors, "
                     f"{len(self.spec.functions)} functions in "
                     f"{len(self.spec.components)} components")
        versions = dict(self.backend.versions())
        versions["python"] = platform.python_version()
        lines.append("attnspec: versions " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        if self.known_path:
            lines.append(f"attnspec: known failures: {self.known_path} "
                         f"({len(self.known)} pattern(s))")
        describe = self.backend.describe()
        if describe != self.backend_name:
            lines.append(f"attnspec: {describe}")
        lines += [f"attnspec: {note}" for note in self.notes]
        return lines

    def stale_known_failures(self, results=None) -> list[str]:
        """Known-failure patterns whose every result in this run (or in ``results``,
        objects with id, dtype and status) passed, the outcomes of the differential and
        property tests they name included."""
        from .known import now_passing

        found = now_passing(self.known, [*(self.results if results is None else results),
                                         *self.outcomes])
        return [f"{self.known_path}:{k.line}: {k.pattern} now passes ({n} result(s)); remove "
                f"it from the known failures" for k, n in found]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if text else type(exc).__name__


def differential_not_applicable(backend) -> bool:
    """The differential family compares against the NumPy backend: on NumPy itself it
    would compare a function with itself."""
    from attnspec.backends.numpy import NumpyBackend

    return type(backend) is NumpyBackend


def suite_requested(config) -> bool:
    """Whether this pytest run is (or includes) the attnspec suite: an ``--attnspec-*``
    option, or an argument naming the suite's package or a path inside it."""
    opt = config.option
    if any(getattr(opt, dest, None) for dest in (
            "attnspec_backend", "attnspec_device", "attnspec_dtype", "attnspec_backend_option",
            "attnspec_json", "attnspec_vectors_dir", "attnspec_known_failures",
            "attnspec_timeout")):
        return True
    for arg in config.args:
        name = str(arg).split("::")[0]
        if name == SUITE_MODULE or name.startswith(SUITE_MODULE + "."):
            return True
        try:
            path = Path(name).resolve()
        except (OSError, ValueError):
            continue
        if path == SUITE_DIR or SUITE_DIR in path.parents:
            return True
    return False


def session(config) -> Session:
    """The resolved Session of a suite run (created at configure time)."""
    s = config.stash.get(_SESSION, None)
    if s is None:
        s = config.stash[_SESSION] = Session.from_config(config)
    return s


def pytest_configure(config):
    if not suite_requested(config):
        return
    s = session(config)
    if s.problem:
        raise pytest.UsageError(f"attnspec: {s.problem}")
    for name, what in FAMILIES.items():
        config.addinivalue_line("markers", f"{name}: the suite's {what}")
    _register_hypothesis_profiles()
    profile_for_suite(config)  # an unknown ATTNSPEC_HYPOTHESIS_PROFILE stops here
    if not is_worker(config):
        config.pluginmanager.register(WorkerResults(s), "attnspec-worker-results")


def is_worker(config) -> bool:
    """Whether this process is a pytest-xdist worker (its controller judges the run)."""
    return hasattr(config, "workerinput")


class WorkerResults:
    """On the controller (or a run in one process): the vector results workers ship in
    their reports' user_properties, collected into the session's results."""

    def __init__(self, s: Session):
        self.s = s

    def pytest_runtest_logreport(self, report):
        if getattr(report, "node", None) is None or report.when != "call":
            return  # a report of this process: its results are recorded already
        from .known import Outcome
        from .runner import Result

        self.s.workers.add(str(getattr(report.node, "gateway", report.node).id))
        self.s.results += [Result.from_json(value) for key, value in report.user_properties
                           if key == RESULT_PROPERTY]
        self.s.outcomes += [Outcome(**value) for key, value in report.user_properties
                            if key == OUTCOME_PROPERTY]


def _register_hypothesis_profiles() -> None:
    from hypothesis import HealthCheck, Phase, settings

    for name, kw in HYPOTHESIS_PROFILES.items():
        if "phases" in kw:
            kw = {**kw, "phases": [Phase[p] for p in kw["phases"]]}
        settings.register_profile(
            f"attnspec-{name}",
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], **kw)


def profile_for_suite(config) -> str | None:
    """The hypothesis profile the suite's tests are decorated under, or None to keep the
    one in force (``--hypothesis-profile`` given)."""
    if config.getoption("hypothesis_profile", default=None):
        return None
    name = os.environ.get("ATTNSPEC_HYPOTHESIS_PROFILE") or "ci"
    if name not in HYPOTHESIS_PROFILES:
        raise pytest.UsageError(f"attnspec: ATTNSPEC_HYPOTHESIS_PROFILE={name!r} is not one "
                                f"of {', '.join(HYPOTHESIS_PROFILES)}")
    return f"attnspec-{name}"


def pytest_report_header(config):
    s = config.stash.get(_SESSION, None)
    return s.header() if s is not None and not s.problem else None


def pytest_keyboard_interrupt(excinfo):
    """Ctrl-C, or SIGTERM/SIGHUP that ``attnspec verify`` turns into one: the results are
    partial (no JSON is written; verify prints no table)."""
    for s in _RUNNING:
        s.interrupted = getattr(excinfo.value, "signum", 2)


_RUNNING: list[Session] = []


def pytest_sessionstart(session):
    s = session.config.stash.get(_SESSION, None)
    if s is not None and not s.problem:
        _RUNNING.append(s)
        freeze_garbage_collector()


def pytest_collection_finish(session):
    s = session.config.stash.get(_SESSION, None)
    if s is not None and not s.problem:
        freeze_garbage_collector()


def freeze_garbage_collector() -> None:
    """The framework, the vectors and (once collected) the tests live as long as the run:
    move them out of the cyclic garbage collector's sight (``gc.freeze``), so that each
    full collection during the run, and the five pytest makes at its end, walk only what
    the tests create. With torch or TensorFlow loaded a full collection walks millions of
    objects, ~0.3 s each: 2-3 s of a suite process (docs/figures.md, 2026-11-29).
    ATTNSPEC_GC_FREEZE=0 leaves the collector alone."""
    if os.environ.get("ATTNSPEC_GC_FREEZE", "1") != "0":
        import gc

        gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    s = session.config.stash.get(_SESSION, None)
    if s is None or s.problem:
        return
    if s in _RUNNING:
        _RUNNING.remove(s)
    if is_worker(session.config):
        return  # the controller has this worker's results: it judges and writes
    s.stale = s.stale_known_failures() if s.results and not s.interrupted else []
    if s.stale and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    s.doc = results_doc(s, int(session.exitstatus))
    if s.json_path and not s.interrupted:  # partial results never replace a file
        write_json(s.doc, s.json_path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    s = config.stash.get(_SESSION, None)
    for line in getattr(s, "stale", ()):
        terminalreporter.write_line(f"attnspec: stale known failure: {line}", red=True)


def results_doc(s: Session, exitstatus: int) -> dict:
    return {
        "backend": s.backend_name,
        "device": s.device,
        "dtypes": s.dtypes,
        "options": s.options,
        "spec_version": s.spec.version,
        "versions": {**s.backend.versions(), "python": platform.python_version()},
        "problems": [],
        "notes": s.notes,
        "stale_known_failures": s.stale,
        "exitstatus": exitstatus,
        **({"jobs": len(s.workers), "workers": sorted(s.workers)} if s.workers else {}),
        **({"interrupted": True} if s.interrupted else {}),
        "results": [r.as_json() for r in s.results],
        "outcomes": [vars(o) for o in s.outcomes],
    }


def write_json(doc: dict, path: str) -> None:
    """Atomically: a temporary file in the same folder, then os.replace; an OSError leaves
    ``path`` as it was."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
