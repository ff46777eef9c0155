"""The ``attnspec`` command line.

  attnspec list [--json]                 every vector: id, component, function, expect
  attnspec verify [--backend numpy] [--device cpu] [--dtype ...] [--json PATH] [--jobs N]
  attnspec generate [--check]            regenerate the vector files, then the derived text
  attnspec show ID                       a vector, readably
  attnspec cite ID [--format text|bibtex] [--base-url URL]   (or: attnspec cite --verify "LINE")
  attnspec check FILE.py:NAME --component C [--framework numpy] [--dtype float64] [-k EXPR]
                                         [--grad: NAME is a backward function]
  attnspec export ID [--format npz|json]
  attnspec new-backend NAME [--path DIR]
  attnspec report --backends numpy,torch,tensorflow --out DIR [--force]

Exit status: 0 done; 1 the command ran and found a fault (a failing vector, an
invalid citation, a vector file that would change); 2 a fault in how it was called
or in its input (unknown id or component, a bad vector or results file, a missing
optional extra, a file that would be overwritten), printed as one line
``attnspec CMD: error: ...``; 130/143 interrupted (Ctrl-C/SIGTERM); 3 an internal
error, printed with its traceback: that is a bug in attnspec, please report it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import traceback

import numpy as np


class CommandError(Exception):
    """A fault the user can fix (bad argument, missing extra, file in the way):
    printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage fault is one line (``attnspec CMD: error: ...``), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _spec(args=None):
    from attnspec.spec.vectors import VECTORS_DIR, load

    return load(getattr(args, "vectors_dir", None) or os.environ.get("ATTNSPEC_VECTORS_DIR")
                or VECTORS_DIR)


def cmd_list(args) -> int:
    spec = _spec(args)
    if args.component is not None and args.component not in spec.components:
        raise CommandError(f"no component {args.component!r}; the components are: "
                           f"{', '.join(spec.components)}")
    rows = [{"id": v.id, "component": v.component, "function": v.function, "expect": v.expect,
             "dtypes": list(v.dtypes), "flags": list(v.flags), "deprecated": v.deprecated,
             **({"error": v.error} if v.error else {})}
            for v in spec.vectors if args.component in (None, v.component)]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    if args.components:
        print(components_table(spec))
        return 0
    for r in rows:
        tail = r.get("error", "")
        print(f"{r['id']:44s} {r['expect']:8s} {tail}")
    return 0


def components_table(spec) -> str:
    """A Markdown table: component, functions, value, error and gradient vector counts, page."""
    lines = ["| component | functions | value vectors | error vectors | gradient vectors |",
             "|---|---|---|---|---|"]
    for comp, vs in spec.by_component().items():
        live = [v for v in vs if not v.deprecated]
        fns = ", ".join(f"`{f}`" for f in spec.components[comp])
        lines.append(f"| [{comp}](spec/components/{comp}.md) | {fns} | "
                     f"{sum(v.expect == 'value' for v in live)} | "
                     f"{sum(v.expect == 'error' for v in live)} | "
                     f"{sum(v.expect == 'gradient' for v in live)} |")
    return "\n".join(lines)


def pytest_args(backend, device, dtype, json_path, extra=(), options=(), *, vectors_dir=None,
                known_failures=None, timeout=None) -> list[str]:
    """The pytest command line of one suite run. Options are written ``--opt=value`` and
    pytest's rootdir and configuration are the suite's own, so no pytest.ini, tox.ini,
    setup.cfg or pyproject.toml of the current or temporary folder takes part."""
    from .plugin import SUITE_DIR

    args = ["--pyargs", "attnspec.conformance.suite", "-p", "no:cacheprovider", "--tb=short",
            f"--rootdir={SUITE_DIR}", f"--config-file={SUITE_DIR / 'pytest.ini'}",
            f"--attnspec-backend={backend}", f"--attnspec-device={device}"]
    if json_path:
        args.append(f"--attnspec-json={json_path}")
    if dtype:
        args.append(f"--attnspec-dtype={dtype}")
    args += [f"--attnspec-backend-option={o}" for o in options]
    if vectors_dir:
        args.append(f"--attnspec-vectors-dir={vectors_dir}")
    if known_failures:
        args.append(f"--attnspec-known-failures={known_failures}")
    if timeout is not None:
        args.append(f"--attnspec-timeout={timeout}")
    return args + list(extra)


def verify_session(args):
    """The suite's Session for ``attnspec verify``'s arguments, or CommandError (one line)
    naming what stops the run before the suite starts. Sets ``args.jobs`` to a count and
    ``args.hypothesis_profile`` to a profile name."""
    from .jobs import JobsError, parse_jobs
    from .plugin import Session, SuiteConfigError

    try:
        if args.json:
            _check_writable(args.json)
        args.hypothesis_profile = _hypothesis_profile(args.hypothesis_profile)
        _check_keyword(args.k)
        args.jobs, clamped = parse_jobs(args.jobs or default_jobs(args.device))
    except (SuiteConfigError, JobsError) as exc:
        raise CommandError(str(exc)) from None
    if clamped:
        print(f"attnspec verify: {clamped}", file=sys.stderr, flush=True)
    session = Session(backend=args.backend, device=args.device, dtype=args.dtype,
                      options=args.backend_option, vectors_dir=args.vectors_dir,
                      known_path=args.known_failures, timeout=_timeout(args))
    if session.problem:
        raise CommandError(session.problem)
    return session


def jax_compile_cache() -> str:
    """Where ``attnspec verify --backend jax`` keeps JAX's compiled programs between runs
    (JAX's persistent compilation cache; keyed by the program, jaxlib, XLA flags and
    device): $XDG_CACHE_HOME/attnspec/jax-compile, else ~/.cache/attnspec/jax-compile."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "attnspec", "jax-compile")


def verify_environment(backend: str) -> dict[str, str]:
    """What ``attnspec verify`` sets for a backend's processes, each unless already set (an
    empty value included, which turns it off): the JAX backend's compile cache, so a
    second run on a machine compiles nearly nothing (the ci hypothesis profile draws the
    same shapes every run)."""
    return {"ATTNSPEC_JAX_COMPILE_CACHE": jax_compile_cache()} if backend == "jax" else {}


def default_jobs(device: str) -> str:
    """``--jobs`` when neither it nor ATTNSPEC_JOBS is given: a process per CPU on the cpu
    device; one on an accelerator, which the processes would share."""
    return "auto" if device == "cpu" else "1"


def _hypothesis_profile(name: str | None) -> str:
    """``--hypothesis-profile`` (or ATTNSPEC_HYPOTHESIS_PROFILE): one of the suite's."""
    from .plugin import HYPOTHESIS_PROFILES, SuiteConfigError

    name = name or "ci"
    if name not in HYPOTHESIS_PROFILES:
        raise SuiteConfigError(f"--hypothesis-profile {name!r} (or ATTNSPEC_HYPOTHESIS_PROFILE)"
                               f" is not one of the suite's profiles: "
                               f"{', '.join(HYPOTHESIS_PROFILES)}")
    return name


def _check_keyword(k: str | None) -> None:
    """A -k that pytest cannot parse: one line naming it, before the suite starts."""
    from _pytest.mark.expression import Expression

    from .plugin import SuiteConfigError

    if not k or not k.strip():
        return
    try:
        Expression.compile(k)
    except SyntaxError as exc:
        raise SuiteConfigError(f"-k {k!r} is not a pytest -k expression: at column "
                               f"{exc.offset}: {exc.msg}") from None


# -k words naming a framework whose tests exist only where it is installed: (module, extra)
OPTIONAL_FRAMEWORKS = {"transformers": ("transformers", "hf"), "flax": ("flax", "flax"),
                       "onnx": ("onnx", "onnx")}


def _selected_nothing(k: str | None) -> str:
    """Why a run selected no test: the -k, and a framework it names that is not installed."""
    import importlib.util
    import re

    if not k:
        return "the suite selected no test"
    words = set(re.findall(r"[A-Za-z_]+", k))
    for word, (module, extra) in OPTIONAL_FRAMEWORKS.items():
        if word in words and importlib.util.find_spec(module) is None:
            return (f"-k {k!r} selects no test: {module} is not installed, so the suite has no "
                    f"{word} tests (pip install 'attnspec[{extra}]')")
    return f"-k {k!r} selects none of the suite's tests (see `pytest --collect-only`)"


def _timeout(args):
    """Seconds per test: ``--timeout`` where the parser has it, else ATTNSPEC_TIMEOUT."""
    return getattr(args, "timeout", None) or os.environ.get("ATTNSPEC_TIMEOUT")


_SIGNALLED: list[int] = []  # the signals that stopped the suite


def _stop_between_tests():
    """Ctrl-C, SIGTERM or SIGHUP during the suite. Raised inside a running test, the
    KeyboardInterrupt can land in pytest's own capture code, which then prints an internal
    traceback; so a first signal while a test of this process runs stops the run when that
    test ends, raised as Ctrl-C raises it (pytest ends the run as for Ctrl-C). Anywhere else
    (collection, xdist's controller, which then stops its workers), or on a second signal,
    it is raised at once. Returns the plugin; its ``signalled`` is the signal handler."""
    import signal

    import pytest

    class StopBetweenTests:
        in_test = False
        pending = False

        def signalled(self, signum, frame):
            _SIGNALLED.append(signum)
            if self.in_test and not self.pending:
                self.pending = True
                return
            signal.default_int_handler(signum, frame)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            self.in_test = True
            try:
                result = yield
            finally:
                self.in_test = False
            if self.pending:
                raise KeyboardInterrupt
            return result

    return StopBetweenTests()


def run_suite(argv: list[str]):
    """The suite in this process (and, with ``-n``, in xdist's workers): (the session,
    pytest's exit status). No temporary file: the results come from the session."""
    import pytest

    from .plugin import SUITE_DIR, session
    from .report import handling

    class Keep:
        config = None

        def pytest_configure(self, config):
            self.config = config

    keep, stop = Keep(), _stop_between_tests()
    here, env = os.getcwd(), {k: os.environ.get(k) for k in SUITE_PLUGIN_ENV}
    os.chdir(SUITE_DIR)  # pytest loads a conftest.py from the current folder
    os.environ.update(SUITE_PLUGIN_ENV)  # xdist's workers inherit it
    try:
        with handling(stop.signalled, names=("SIGINT", "SIGTERM", "SIGHUP")):
            code = pytest.main(argv, plugins=[keep, stop])
    finally:
        os.chdir(here)
        for k, v in env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return (session(keep.config) if keep.config is not None else None), int(code)


# verify's run loads the suite's plugins only: another installed one (pytest-benchmark,
# pytest-cov, ...) could print into a fault's one line or change what runs. A user who
# wants theirs runs the suite through pytest (docs/verify.md).
SUITE_PLUGIN_ENV = {
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTEST_PLUGINS": "attnspec.conformance.plugin,xdist.plugin,xdist.looponfail,_hypothesis_pytestplugin",
}


# With --jobs N (N > 1) each of the N workers has a CPU of its own: a BLAS library's own
# threads (NumPy's OpenBLAS, in the differential family's float64 reference) only contend
# with the other workers, and OpenBLAS's spin-waiting threads cost CPU time (-k "test_differential
# and stress" on torch: 12.1 -> 8.1 CPU s with one BLAS thread). Set for the workers unless the
# user set them.
WORKER_THREADS_ENV = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# Less free space than this on --json's filesystem refuses the run before it starts
# (a full run's results are ~1-2 MB).
MIN_FREE_BYTES = 16 << 20


def _check_writable(path: str) -> None:
    """--json's folder takes a new file and has room: else one line, before the run."""
    from .plugin import SuiteConfigError

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise SuiteConfigError(f"--json {path}: is a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".attnspec-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        free = os.statvfs(folder)
    except OSError as exc:
        raise SuiteConfigError(f"--json {path}: cannot write there ({exc.strerror or exc})"
                               ) from None
    if free.f_bavail * free.f_frsize < MIN_FREE_BYTES:
        raise SuiteConfigError(f"--json {path}: only {free.f_bavail * free.f_frsize} bytes free "
                               f"on its filesystem (at least {MIN_FREE_BYTES >> 20} MiB wanted)")


def _keep_results(doc: dict, path: str) -> int:
    """Write --json atomically; where that fails, keep the results in the temporary folder
    and say where (one line, exit 2) rather than lose the run."""
    from .plugin import write_json

    try:
        write_json(doc, path)
        return 0
    except OSError as exc:
        why = exc.strerror or str(exc)
    fd, kept = tempfile.mkstemp(prefix="attnspec-verify-results-", suffix=".json")
    os.close(fd)
    try:
        write_json(doc, kept)
    except OSError as exc:
        print(f"attnspec verify: error: --json {path}: cannot write it ({why}), nor {kept} "
              f"({exc.strerror or exc}); the table above is all that is left", file=sys.stderr)
        return 2
    print(f"attnspec verify: error: --json {path}: cannot write it ({why}); the results are "
          f"in {kept}", file=sys.stderr)
    return 2


def _absolute(path):
    return os.path.abspath(path) if path else path


def _preflight(args) -> int:
    """``verify --preflight`` (what ``attnspec report`` runs first for each backend): the
    arguments resolved and the tests collected, none run; a fault is the one line."""
    extra = ["--collect-only", "-q"] + (["-k", args.k] if args.k else [])
    argv = pytest_args(args.backend, args.device, args.dtype, None, extra, args.backend_option,
                       vectors_dir=_absolute(args.vectors_dir),
                       known_failures=_absolute(args.known_failures), timeout=_timeout(args))
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        _, code = run_suite(argv)
    if code == 5:
        raise CommandError(_selected_nothing(args.k))
    if code != 0:
        raise CommandError(f"the suite cannot be collected (pytest exit status {code}); run "
                           f"`attnspec verify` with the same arguments to see why")
    return 0


def cmd_verify(args) -> int:
    verify_session(args)  # a fault: one line, exit 2 (main)
    if args.preflight:
        return _preflight(args)
    # pytest's unraisable-exception plugin runs five full garbage collections at the end of
    # every process (~3 s each over the suite's heap); verify reports no such warning
    extra = ["-p", "no:unraisableexception"] + (["-x"] if args.exitfirst else [])
    if args.k:
        extra += ["-k", args.k]
    if args.jobs > 1:
        extra += ["-n", str(args.jobs), "--dist", "loadgroup"]
    argv = pytest_args(args.backend, args.device, args.dtype, None, extra,
                       args.backend_option, vectors_dir=_absolute(args.vectors_dir),
                       known_failures=_absolute(args.known_failures), timeout=_timeout(args))
    os.environ["ATTNSPEC_HYPOTHESIS_PROFILE"] = args.hypothesis_profile  # workers inherit it
    for name, value in verify_environment(args.backend).items():
        if name not in os.environ:
            os.environ[name] = value
            print(f"attnspec verify: {name}={value} (compiled programs kept between runs; "
                  f"{name}= turns it off)", flush=True)
    if args.jobs > 1:
        for name in WORKER_THREADS_ENV:  # workers inherit it; a value the user set is kept
            os.environ.setdefault(name, "1")
        print(f"attnspec verify: {args.jobs} processes (pytest-xdist, --dist loadgroup)",
              flush=True)
    s, code = run_suite(argv)
    if s is None or s.doc is None:
        print(f"attnspec verify: the suite did not run (pytest exit status {code})",
              file=sys.stderr)
        return code or 1
    doc = s.doc
    if s.interrupted:
        kept = f"; --json {args.json} left as it was" if args.json else ""
        print(f"\nattnspec verify: interrupted: the run stopped after {len(doc['results'])} "
              f"vector result(s); no table{kept}", file=sys.stderr)
        return 128 + (_SIGNALLED[-1] if _SIGNALLED else s.interrupted)
    if code == 5:  # pytest: no test collected or all deselected
        print(f"attnspec verify: error: {_selected_nothing(args.k)}", file=sys.stderr)
        return 2
    print()
    print(summary_table(doc))
    for note in [*doc.get("notes", []), *float64_hints(doc)]:
        print(f"attnspec verify: {note}")
    for line in doc.get("stale_known_failures", []):
        print(f"attnspec verify: stale known failure: {line}", file=sys.stderr)
    if args.json:
        return _keep_results(doc, args.json) or code
    return code


# A float64 failure this many ULPs off is a float32-accurate result, not a float64 one.
FLOAT32_ACCURATE_ULPS = 1e6


def float64_hints(doc: dict) -> list[str]:
    """One hint naming the components with a float64 failure (not a known one) off by a
    float32-sized error while all their float32 results pass: float32 inside."""
    by_dtype: dict = {}
    for r in doc["results"]:
        by_dtype.setdefault((r["component"], r["dtype"]), []).append(r)
    wide = sorted({comp for (comp, dtype), rs in by_dtype.items() if dtype == "float64"
                   and any(r["status"] == "fail" and not r.get("known_failure")
                           and (r.get("max_ulp") or 0) > FLOAT32_ACCURATE_ULPS for r in rs)
                   and by_dtype.get((comp, "float32"))
                   and all(r["status"] == "pass" for r in by_dtype[comp, "float32"])})
    if not wide:
        return []
    return [f"hint: {', '.join(wide)} fail at float64 by more than {FLOAT32_ACCURATE_ULPS:.0e} "
            f"ULP while float32 passes: does the framework compute float64 (exp, sin, erf, "
            f"sigmoid...) in float32? (backends/README.md, \"Lessons from a port\")"]


def summary_table(doc: dict) -> str:
    """The verify table: one row per (component, dtype), from :mod:`.results`. The max
    absolute error stands beside the max ULP: a gradient whose expectation is near zero
    can pass at a ULP error of 1e12 (its tolerance is absolute there)."""
    from . import results

    rows = results.tally(doc["results"])
    head = (f"{'component':22s} {'dtype':9s} {'vectors':>7s} {'passed':>7s} {'failed':>7s} "
            f"{'error':>6s} {'missing':>7s} {'known':>6s} {'max abs':>9s} {'max ULP':>9s}")
    lines = [f"attnspec {doc.get('spec_version')} · backend {doc['backend']} · device "
             f"{doc['device']}", head, "-" * len(head)]
    for (comp, dtype), t in sorted(rows.items()):
        lines.append(f"{comp:22s} {dtype:9s} {_counts(t)} {results.fmt(t.max_abs, '.2g'):>9s} "
                     f"{results.fmt(t.max_ulp):>9s}")
    lines += ["-" * len(head), f"{'total':32s} {_counts(results.total(rows.values()))}"]
    if not rows:  # -k chose only properties, differential tests or extra checks
        lines.append("(no golden vector selected: the table counts vectors only; the other "
                     "tests' outcomes are pytest's line above)")
    return "\n".join(lines)


def _counts(t) -> str:
    return (f"{t.n:7d} {t['pass']:7d} {t['fail']:7d} {t['error']:6d} {t['missing']:7d} "
            f"{t['known']:6d}")


def require_extra(module: str, extra: str, what: str) -> None:
    """Refuse, naming the pip extra, when an optional dependency is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise CommandError(f"{what} needs {module}, which is not installed: "
                           f"pip install 'attnspec[{extra}]'")


def cmd_generate(args) -> int:
    if not args.text_only:
        require_extra("mpmath", "oracle", "regenerating the vectors (the mpmath oracle)")
    from attnspec.spec.generate import GenerationError, generate
    from attnspec.spec.vectors import VECTORS_DIR

    from .jobs import JobsError, parse_jobs
    from .report import Stopped, handling, raise_stopped

    try:
        jobs, clamped = parse_jobs(args.jobs)
    except JobsError as exc:
        raise CommandError(str(exc)) from None
    if clamped:
        print(f"attnspec generate: {clamped}", file=sys.stderr, flush=True)
    try:
        with handling(raise_stopped):  # SIGTERM/SIGHUP: the pool is stopped on the way out
            changed = [] if args.text_only else generate(
                args.dir or VECTORS_DIR, check=args.check, jobs=jobs,
                only=args.only.split(",") if args.only else None)
    except GenerationError as exc:
        raise CommandError(str(exc)) from None
    except Stopped as exc:
        print(f"attnspec generate: interrupted ({exc}); its worker processes are stopped",
              file=sys.stderr)
        return exc.code
    if not args.dir:
        changed += _generate_text(args.check)
    if args.check:
        if changed:
            print("attnspec generate --check: these files would change:", file=sys.stderr)
            for name in changed:
                print(f"  {name}", file=sys.stderr)
            return 1
        said = ([] if args.text_only else ["every vector file regenerates byte for byte"]) \
            + ([] if args.dir else ["every derived text block is up to date"])
        print(f"attnspec generate --check: {' and '.join(said)}")
        return 0
    print(f"wrote {len(changed)} changed file(s)" + (": " + ", ".join(changed) if changed else ""))
    return 0


def _generate_text(check: bool) -> list[str]:
    """The derived text blocks (spec/derived.py), from the checkout's vector files."""
    from attnspec.spec.derived import DerivedError, generate_derived, source_root
    from attnspec.spec.vectors import load

    try:
        root = source_root()
        return generate_derived(root, load(root / "spec" / "vectors"), check=check)
    except DerivedError as exc:
        raise CommandError(str(exc)) from None


def _fmt_tensor(a: np.ndarray) -> str:
    with np.printoptions(precision=6, suppress=True, linewidth=100, threshold=400):
        return f"{a.dtype.name} {tuple(a.shape)}\n" + np.array2string(a)


def cmd_show(args) -> int:
    if args.plot:
        from .plot import check_plot_path

        check_plot_path(args.plot, args.force)
        require_extra("matplotlib", "plot", "--plot")
    spec = _spec(args)
    v = spec.vector(args.id)
    out = [v.citation(), f"component: {v.component}   function: {v.function}",
           f"description: {v.description}", f"flags: {', '.join(v.flags) or '-'}",
           f"dtypes: {', '.join(v.dtypes)}" + (f"  ({v.dtype_note})" if v.dtype_note else ""),
           f"attributes: {json.dumps(v.attributes)}"]
    for title, group in (("input", v.inputs), ("param", v.params), ("output", v.outputs),
                         ("intermediate", v.intermediates)):
        for name, a in group.items():
            out.append(f"\n{title} {name}: {_fmt_tensor(a)}")
    if v.expect == "error":
        out.append(f"\nexpect error: {v.error} (message mentions {list(v.error_mentions)})")
    print("\n".join(out))
    if args.plot:
        from .plot import plot_vector

        plot_vector(v, args.plot)
        print(f"\nwrote {args.plot}")
    return 0


def cmd_cite(args) -> int:
    from attnspec.spec.citing import cite, parse_citation, verify

    if args.verify is not None:
        parsed = parse_citation(args.verify)
        cited = parsed and (parsed[1] or "attnspec")
        if args.id is not None and cited and cited != args.id:
            print(f"invalid: the citation is of {cited}, not of {args.id}", file=sys.stderr)
            return 1
        # validity comes from the release records shipped in the package; the loaded
        # vectors only say whether the cited vector is still live
        ok, line = verify(args.verify, _spec(args))
        print(line, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if args.id is None:
        raise CommandError("give an ID to cite, or --verify 'CITATION LINE'")
    spec = _spec(args)
    if "/" in args.id:
        v = spec.vector(args.id)  # NoSuchVector names it
        if v.deprecated:
            print(f"attnspec cite: note: {v.id} is deprecated"
                  + (f", superseded by {v.superseded_by}: cite that unless you mean the old case"
                     if v.superseded_by else " (kept for old citations)"), file=sys.stderr)
    elif args.id not in (*spec.components, "attnspec"):
        raise CommandError(f"{args.id!r} is neither a vector id (component/case-NNN), a "
                           f"component ({', '.join(spec.components)}) nor 'attnspec'")
    text, url = cite(spec, args.id, args.format), _site_url(spec, args)
    if args.format == "bibtex":
        print(f"{text[:-2]},\n  url          = {{{url}}}\n}}")
    else:
        print(f"{text}\n{url}")
    return 0


def _site_url(spec, args) -> str:
    """The target's page on the site (docs/site.md): --base-url, ATTNSPEC_SITE_URL or the
    published one."""
    from .sitepages import SITE_URL, vector_url

    base = (args.base_url or os.environ.get("ATTNSPEC_SITE_URL") or SITE_URL).rstrip("/")
    if "/" in args.id:
        return vector_url(args.id, spec.version, base)
    return f"{base}/components/{args.id}/" if args.id in spec.components else f"{base}/"


def cmd_check(args) -> int:
    from attnspec.spec.vectors import default_spec

    from .check import parse_memory, parse_timeout, run_check

    custom = args.vectors_dir or os.environ.get("ATTNSPEC_VECTORS_DIR")
    env = os.environ.get("ATTNSPEC_TIMEOUT")
    timeout = parse_timeout(args.timeout, "--timeout") if args.timeout is not None else \
        parse_timeout(env, "ATTNSPEC_TIMEOUT")
    memory = parse_memory(args.memory_limit)
    # the spec is loaded once the worker has started (it imports the file meanwhile), and
    # once a process (tests call often)
    spec = (lambda: _spec(args)) if custom else default_spec
    # a CheckError (the check cannot run) is an AttnSpecError: main prints it, exit 2
    return run_check(args.target, args.component, spec, args.framework, args.dtype,
                     args.function, args.errors, keyword=args.k, variants=args.variant,
                     grad=args.grad, timeout=timeout, memory=memory, strict=args.strict)


CHECK_HELP = """\
Run every vector of one component against your own function or class, and print
PASS / FAIL / SKIP per vector with the error against the spec.

How your code is called: a function gets the spec function's required inputs
positionally, the optional inputs and attributes it names as keywords, and the
parameters as params={canonical path: array} or one keyword per path (dots as
underscores: w_q, ffn_w1); one that takes `trace` is handed a Trace to record named
intermediates in. A class is built by NAME.from_spec(params, **attributes) when it
has that classmethod, else NAME(**attributes it names) then
instance.load_spec_params(params); the instance is called with the signature of its
forward (torch.nn.Module: .eval(), torch.inference_mode()) or call (Keras layer:
training=False). Vectors needing an argument your code does not take are SKIP. A class
with neither hook is built with the common aliases (n_head, epsilon, d_model from the
input's shape...) and its parameters matched to the spec's by name and shape, when
that is unambiguous (the mapping is printed). A failure that matches a convention the
spec knows (-1e9 fills, unbiased variance, tanh GELU...) names it and its page.
In Jupyter: from attnspec.conformance.notebook import check; check(fn, "sdpa").

With --grad, NAME is a hand-written backward function, run against the component's
gradient vectors. It gets the cotangents first, one positional argument per output of
the spec function in return order (layer_norm: dy; sdpa: d_output, d_weights; an
output the vector does not differentiate gets zeros; a function may take only the
first ones, and vectors needing the others are SKIP), then the forward arguments as
above: layer_norm_backward(dy, x, gamma, beta, eps=1e-5). A function with a
`cotangents` argument gets the dict {output name: cotangent} instead; one that names
a forward output (y, weights) gets the spec's value of it by keyword. It returns the
gradient of every float input the vector passes and of every parameter: a tuple, the
inputs in the spec's order then the parameters (dx, dgamma, dbeta), or a dict by input
name and parameter path ({"x": dx, "gamma": dgamma, "beta": dbeta}).

Your code runs in a separate process, with a time limit per vector (--timeout) and a
memory limit (--memory-limit, the address space beyond what Python and the framework
had mapped: RLIMIT_AS, where the OS has it); a vector that overruns either, or that ends
the process (os._exit, a crash), fails saying so and the next runs in a new process.
What it prints is shown under its vector, at most 10 lines each and 100 in a run.

Exit status: 0 when every vector that ran passed (vectors needing what your code does
not take are skipped, and said so in one line; --strict fails when most were); 1 when
one failed or none ran; 2 when the check cannot run (file, target, component, dtype).
"""


def _check_epilog() -> str:
    """The components, from the vector manifest (cheap: no vector file is read), and where
    the installed examples are."""
    import textwrap

    from attnspec.spec.vectors import read_manifest

    from .check import coursework_dir

    where = coursework_dir()
    examples = (f"Examples to start from, and how your code is called: {where}{os.sep} "
                f"(README.md there)" if where else "Examples: examples/coursework/ in the "
                "attnspec repository")
    try:
        names = sorted(f.removesuffix(".json") for f in read_manifest()["files"])
    except Exception:
        return f"{examples}\n\ncomponents: see `attnspec list --components`"
    return f"{examples}\n\ncomponents (functions and vector counts: `attnspec list " \
        f"--components`):\n" + textwrap.fill(", ".join(names), width=88, initial_indent="  ",
                                              subsequent_indent="  ")


def cmd_export(args) -> int:
    from .export import export

    path = export(_spec(args), args.id, args.format, args.out, force=args.force)
    print(f"wrote {path}")
    return 0


def cmd_new_backend(args) -> int:
    from .scaffold import BUILTIN_STEPS, scaffold

    root = scaffold(_spec(args), args.name, args.path, builtin=args.builtin)
    if args.builtin:
        print(f"created {root}\n{BUILTIN_STEPS.format(name=args.name)}")
    else:
        print(f"created {root}\nnext: pip install -e {root} && attnspec verify --backend "
              f"{args.name}")
    return 0


def cmd_report(args) -> int:
    from .report import parse_pythons, run_report

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends:
        raise CommandError(f"--backends {args.backends!r} names no backend; give one or "
                           f"more, e.g. --backends numpy,torch")
    _report_preflight(args, backends)
    return run_report(backends, args.out, devices=args.devices,
                      pythons=parse_pythons(args.python), k=args.k, dtype=args.dtype,
                      options=args.backend_option, quiet=args.quiet,
                      command="attnspec " + " ".join(sys.argv[1:]), force=args.force)


def _report_preflight(args, backends: list[str]) -> None:
    """Every (backend, device) of a report collects the suite with the report's arguments
    (``verify --preflight``, with the interpreter that will run it) before any runs, so a
    bad backend, dtype, option or -k is one line and no report is written."""
    import subprocess

    from attnspec.backends import available

    from .plugin import SuiteConfigError, parse_backend_options, parse_dtypes
    from .report import interpreter, parse_devices, parse_pythons

    unknown = [b for b in backends if b not in available()]
    if unknown:
        raise CommandError(f"--backends: unknown backend {unknown[0]!r}; registered: "
                           f"{', '.join(sorted(available()))}")
    try:
        parse_dtypes(args.dtype)
        parse_backend_options(args.backend_option)
        _check_keyword(args.k)
    except SuiteConfigError as exc:
        raise CommandError(str(exc)) from None
    pythons = parse_pythons(args.python)
    for backend, devices in parse_devices(args.devices, backends).items():
        for device in devices:
            cmd = [interpreter(backend, pythons), "-m", "attnspec.conformance.cli", "verify",
                   "--preflight", "--backend", backend, "--device", device, "--jobs", "1"]
            cmd += (["--dtype", args.dtype] if args.dtype else []) + (["-k", args.k] if args.k
                                                                      else [])
            for o in args.backend_option:
                cmd += ["--backend-option", o]
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            if p.returncode != 0:
                last = next((ln for ln in reversed(p.stderr.splitlines()) if ln.strip()),
                            f"exit status {p.returncode}")
                raise CommandError(f"{backend}/{device}: "
                                   f"{last.removeprefix('attnspec verify: error: ')}")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnspec", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="list every vector")
    s.add_argument("--json", action="store_true")
    s.add_argument("--component")
    s.add_argument("--components", action="store_true",
                   help="one Markdown row per component with its vector counts")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("verify", help="run the conformance suite against a backend")
    s.add_argument("--backend", default=os.environ.get("ATTNSPEC_BACKEND", "numpy"))
    s.add_argument("--device", default=os.environ.get("ATTNSPEC_DEVICE", "cpu"))
    s.add_argument("--dtype", default=os.environ.get("ATTNSPEC_DTYPE"),
                   help="comma-separated (default: every dtype the device supports)")
    s.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--json", metavar="PATH", help="write the machine-readable results here")
    s.add_argument("-k", help="pytest -k expression, e.g. 'sdpa'")
    s.add_argument("--known-failures", metavar="FILE",
                   help="known-failure patterns (default: the backend's known_failures.txt)")
    s.add_argument("-x", "--exitfirst", action="store_true",
                   help="stop at the first failure (with --jobs: each process at its own)")
    s.add_argument("--jobs", default=os.environ.get("ATTNSPEC_JOBS"), metavar="N|auto",
                   help="run the suite as N processes (pytest-xdist, a (component, dtype) per "
                        "process), or auto: one per usable CPU, at most 8; never more than "
                        "the usable CPUs and the memory allow. Env ATTNSPEC_JOBS; default "
                        "auto on the cpu device, 1 on a GPU")
    s.add_argument("--preflight", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--hypothesis-profile", default=os.environ.get("ATTNSPEC_HYPOTHESIS_PROFILE"),
                   metavar="NAME", help="the property tests' hypothesis profile: ci "
                   "(reproducible, 20 examples), thorough (500, random) or quick (reproducible, 3: "
                   "for iterating); env ATTNSPEC_HYPOTHESIS_PROFILE; default ci")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("generate", help="regenerate the vector files from the oracle, then the "
                                        "derived text (spec/derived.py; not with --dir)")
    s.add_argument("--check", action="store_true", help="write nothing; fail if a byte would change")
    s.add_argument("--dir", help="write here instead of the package's vector directory")
    s.add_argument("--jobs", default="2", metavar="N|auto",
                   help="processes building the vector files (default 2; at most the usable "
                        "CPUs and what the memory allows)")
    s.add_argument("--only", metavar="C1,C2", help="rebuild only these components")
    s.add_argument("--text-only", action="store_true",
                   help="only the derived text (vector lists, README table, FUNCTIONS.md), "
                        "from the vector files as they are (seconds; no oracle)")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("show", help="print one vector readably")
    s.add_argument("id")
    s.add_argument("--plot", metavar="FILE",
                   help="also draw it to FILE: .png, .pdf, .svg, .jpg (needs attnspec[plot])")
    s.add_argument("--force", action="store_true", help="replace the --plot file if it exists")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("cite", help="print the citation of a vector, component or the spec, or "
                                    "check one (--verify)")
    s.add_argument("id", nargs="?", help="a vector id, a component, or 'attnspec'")
    s.add_argument("--format", choices=["text", "bibtex"], default="text")
    s.add_argument("--verify", metavar="CITATION",
                   help="check a citation line from any release, e.g. 'attnspec 1.0.0 · "
                        "sdpa/fully-masked-001 · sha256:78ec253a0fae': valid (unchanged or "
                        "superseded, and by what) or invalid (exit 1)")
    s.add_argument("--base-url", metavar="URL",
                   help="the site whose page of ID to print (default: ATTNSPEC_SITE_URL, else "
                        "the published site; a local build: docs/site.md)")
    s.set_defaults(func=cmd_cite)

    s = sub.add_parser("check", help="check your own function or class against a component",
                       description=CHECK_HELP, epilog=_check_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("target", metavar="FILE.py:NAME",
                   help="the file (or a Jupyter notebook, FILE.ipynb: its code cells run in "
                        "order, magics and shell lines skipped), and the function or class in "
                        "it to check")
    s.add_argument("--component", required=True, metavar="C",
                   help="the spec component to check against (listed below)")
    s.add_argument("--function", metavar="NAME",
                   help="which function of a component that has several (embedding: lm_head; "
                        "masks: padding_mask...); default: the one named like the component")
    s.add_argument("--framework", default=None, metavar="NAME",
                   help="the arrays your code takes and returns: numpy, torch, tensorflow "
                        "(also for Keras), or any installed attnspec backend (default: the one "
                        "the file imports, else numpy)")
    s.add_argument("--dtype", default="float64",
                   choices=["float64", "float32", "float16", "bfloat16"],
                   help="the inputs' and parameters' dtype, and so the spec tolerance "
                        "(default float64; the framework must support it on cpu)")
    s.add_argument("--errors", action="store_true",
                   help="also run the error vectors: each passes only if your code raises the "
                        "spec's class (attnspec.spec.errors.ShapeError...) or a subclass")
    s.add_argument("--grad", action="store_true",
                   help="NAME is a backward function: check the gradients it returns against "
                        "the component's gradient vectors (calling convention above)")
    s.add_argument("-k", metavar="EXPR",
                   help="only vectors whose id or a flag contains these words, as pytest's -k: "
                        "'mask and not fully', 'basic or causal'")
    s.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                   help="only vectors with this attribute value, e.g. norm=pre, "
                        "variant=annotated, or a bare VALUE for any attribute (repeatable: "
                        "values of one key are alternatives, different keys must all hold)")
    s.add_argument("--strict", action="store_true",
                   help="fail when more vectors are skipped (not applicable to your code) than "
                        "ran; by default the run passes when every vector that ran passed")
    s.add_argument("--timeout", metavar="SECONDS",
                   help="time limit per vector (default 20; env ATTNSPEC_TIMEOUT; 0: none); "
                        "importing the file has 120 s or this, whichever is longer")
    s.add_argument("--memory-limit", metavar="GIB",
                   help="memory your code may allocate, in GiB (default 4; 0: none)")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("export", help="write a vector as .npz or .json for other languages")
    s.add_argument("id")
    s.add_argument("--format", choices=["npz", "json"],
                   help="default: the extension of --out, else npz")
    s.add_argument("--out", help="output file, named *.npz or *.json as the format "
                                 "(default: <component>-<case>.<format>)")
    s.add_argument("--force", action="store_true", help="replace the output file if it exists")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser(
        "new-backend", help="scaffold an installable backend package",
        description="Write a backend with every kernel a @missing stub, ops.py stubs, and the "
                    "composites bound to attnspec's shared ones, so that `attnspec verify "
                    "--backend NAME` lists what is left. By default an out-of-tree pip package "
                    "PATH/attnspec-NAME (src/attnspec_NAME, its own pyproject.toml and entry "
                    "point); with --builtin, backends/NAME/ inside an attnspec checkout. "
                    "See backends/README.md.")
    s.add_argument("name", help="the backend's name: a lowercase identifier (--backend NAME)")
    s.add_argument("--path", default=".", help="where to write it (default: the current "
                   "directory; with --builtin, the root of the attnspec checkout)")
    s.add_argument("--builtin", action="store_true", help="write backends/NAME/ inside the "
                   "attnspec checkout at --path and print the registrations left to make")
    s.set_defaults(func=cmd_new_backend)

    s = sub.add_parser("report", help="run several backends, each in its own process, and "
                                      "write report.json, report.md and report.html")
    s.add_argument("--backends", default="numpy,torch,tensorflow", metavar="B1,B2")
    s.add_argument("--devices", default=None, metavar="D1,D2",
                   help="devices for every backend (cpu,cuda) or per backend (torch:cuda); "
                        "default cpu")
    s.add_argument("--out", required=True, metavar="DIR")
    s.add_argument("--python", action="append", default=[], metavar="NAME=PATH",
                   help="interpreter for a backend (default: this one, or "
                        ".tox/<backend>-cpu/bin/python when the framework is not importable)")
    s.add_argument("--dtype", default=None, help="comma-separated (default: all)")
    s.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("-k", help="pytest -k expression passed to every run")
    s.add_argument("--force", action="store_true",
                   help="replace report files already in --out")
    s.add_argument("-q", "--quiet", action="store_true",
                   help="only a line per run, not the suite's own progress")
    s.set_defaults(func=cmd_report)

    for s in sub.choices.values():
        s.add_argument("--vectors-dir", default=None, help=argparse.SUPPRESS)
    return p


def _version() -> str:
    from attnspec.spec import SPEC_VERSION

    return f"attnspec {SPEC_VERSION}"


def main(argv=None) -> int:
    """Run one command. Faults the user can fix end in one line and exit 2; anything
    else is a bug in attnspec and keeps its traceback (exit 3)."""
    from attnspec.spec.errors import AttnSpecError

    args = build_parser().parse_args(argv)
    name = f"attnspec {args.command}"
    caller = os.environ.get("ATTNSPEC_CALLER_CWD")
    # verify runs the suite from its own folder: a backend option's relative path is the caller's
    with contextlib.suppress(OSError):
        os.environ["ATTNSPEC_CALLER_CWD"] = os.getcwd()
    try:
        return args.func(args)
    except BrokenPipeError:  # `attnspec list | head`
        sys.stderr.close()
        return 0
    except (CommandError, AttnSpecError, OSError) as exc:
        print(f"{name}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug: say so, with the traceback to report
        traceback.print_exc()
        print(f"{name}: internal error: this is a bug in attnspec; please report it with the "
              f"traceback above", file=sys.stderr)
        return 3
    finally:
        if caller is None:
            os.environ.pop("ATTNSPEC_CALLER_CWD", None)
        else:
            os.environ["ATTNSPEC_CALLER_CWD"] = caller


if __name__ == "__main__":
    sys.exit(main())
