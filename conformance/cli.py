"""The ``attnspec`` command line.

  attnspec list [--json]                 every vector: id, component, function, expect
  attnspec verify [--backend numpy] [--device cpu] [--dtype ...] [--json PATH] [--jobs N]
  attnspec generate [--check]            regenerate the vector files from the oracle
  attnspec show ID                       a vector, readably
  attnspec cite ID [--format text|bibtex]   (or: attnspec cite --verify "CITATION LINE")
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
    naming what stops the run before the suite starts. Sets ``args.jobs`` to a count."""
    from .plugin import Session, SuiteConfigError
    from .shards import parse_jobs

    try:
        if args.json:
            _check_writable(args.json)
        args.jobs = parse_jobs(getattr(args, "jobs", 1))
    except SuiteConfigError as exc:
        raise CommandError(str(exc)) from None
    session = Session(backend=args.backend, device=args.device, dtype=args.dtype,
                      options=args.backend_option, vectors_dir=args.vectors_dir,
                      known_path=args.known_failures, timeout=_timeout(args))
    if session.problem:
        raise CommandError(session.problem)
    return session


def _timeout(args):
    """Seconds per test: ``--timeout`` where the parser has it, else ATTNSPEC_TIMEOUT."""
    return getattr(args, "timeout", None) or os.environ.get("ATTNSPEC_TIMEOUT")


def _verify_here(argv: list[str]) -> tuple[dict | None, int, str]:
    """The suite in this process: (results document or None, pytest's exit status, why)."""
    import pytest

    from .plugin import SUITE_DIR

    fd, json_path = tempfile.mkstemp(suffix=".json", prefix="attnspec-")
    os.close(fd)
    try:
        with _removed_when_stopped(json_path):
            # from the suite's folder: pytest loads a conftest.py from the current folder
            here = os.getcwd()
            os.chdir(SUITE_DIR)
            try:
                code = pytest.main([*argv, f"--attnspec-json={json_path}"])
            finally:
                os.chdir(here)
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f) if os.path.getsize(json_path) else None
    finally:
        os.unlink(json_path)
    return doc, int(code), f"pytest exit status {int(code)}"


@contextlib.contextmanager
def _removed_when_stopped(path: str):
    """SIGTERM or SIGHUP (as ``attnspec report`` stops its child) remove ``path``, then
    end the process by that signal as it would have ended anyway: pytest would catch an
    exception raised here as a test's error, so none is raised. The suite's watchdog,
    which ends the process with os._exit, removes it too (plugin.REMOVE_ON_HARD_STOP)."""
    import signal

    from .plugin import REMOVE_ON_HARD_STOP
    from .report import handling

    def stop(signum, frame):
        with contextlib.suppress(OSError):
            os.unlink(path)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    REMOVE_ON_HARD_STOP.add(path)
    try:
        with handling(stop):
            yield
    finally:
        REMOVE_ON_HARD_STOP.discard(path)


def _verify_in_parts(argv: list[str], jobs: int, session) -> tuple[dict | None, int, str]:
    """The suite as ``jobs`` processes (shards.py). Ctrl-C, SIGTERM or SIGHUP stop every
    part's process group before the interruption goes on."""
    import shutil

    from .plugin import SUITE_DIR
    from .report import Stopped, handling, raise_stopped, stop
    from .shards import merge, run_parts, temporary_dir

    work = temporary_dir()
    state: dict = {"procs": []}
    try:
        with handling(raise_stopped):
            parts = run_parts(argv, jobs, SUITE_DIR, work,
                              lambda line: print(line, flush=True), state)
            return merge(parts, session)
    except Stopped as exc:
        print("attnspec verify: interrupted", file=sys.stderr)
        sys.exit(exc.code)
    finally:
        for proc in state["procs"]:  # every part's process group, on any way out
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def _check_writable(path: str) -> None:
    from .plugin import SuiteConfigError

    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise SuiteConfigError(f"--json {path}: cannot write there ({exc.strerror or exc})"
                               ) from None
    if not existed:
        os.unlink(path)


def _absolute(path):
    return os.path.abspath(path) if path else path


def cmd_verify(args) -> int:
    session = verify_session(args)  # a fault: one line, exit 2 (main)
    extra = ["-x"] if args.exitfirst else []
    if args.k:
        extra += ["-k", args.k]
    argv = pytest_args(args.backend, args.device, args.dtype, None, extra,
                       args.backend_option, vectors_dir=_absolute(args.vectors_dir),
                       known_failures=_absolute(args.known_failures), timeout=_timeout(args))
    if args.jobs > 1:
        doc, code, why = _verify_in_parts(argv, args.jobs, session)
    else:
        doc, code, why = _verify_here(argv)
    if doc is None:
        print(f"attnspec verify: the suite did not run ({why})", file=sys.stderr)
        return int(code) or 1
    print()
    print(summary_table(doc))
    for note in doc.get("notes", []):
        print(f"attnspec verify: {note}")
    for line in doc.get("stale_known_failures", []):
        print(f"attnspec verify: stale known failure: {line}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return int(code)


def summary_table(doc: dict) -> str:
    """The verify table: one row per (component, dtype), from :mod:`.results`."""
    from . import results

    rows = results.tally(doc["results"])
    head = (f"{'component':22s} {'dtype':9s} {'vectors':>7s} {'passed':>7s} {'failed':>7s} "
            f"{'error':>6s} {'missing':>7s} {'known':>6s} {'max ULP':>9s}")
    lines = [f"attnspec {doc.get('spec_version')} · backend {doc['backend']} · device "
             f"{doc['device']}", head, "-" * len(head)]
    for (comp, dtype), t in sorted(rows.items()):
        lines.append(f"{comp:22s} {dtype:9s} {_counts(t)} {results.fmt(t.max_ulp):>9s}")
    lines += ["-" * len(head), f"{'total':32s} {_counts(results.total(rows.values()))}"]
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
    require_extra("mpmath", "oracle", "regenerating the vectors (the mpmath oracle)")
    from attnspec.spec.generate import GenerationError, generate
    from attnspec.spec.vectors import VECTORS_DIR

    try:
        changed = generate(args.dir or VECTORS_DIR, check=args.check, jobs=args.jobs,
                           only=args.only.split(",") if args.only else None)
    except GenerationError as exc:
        raise CommandError(str(exc)) from None
    if args.check:
        if changed:
            print("attnspec generate --check: these files would change:", file=sys.stderr)
            for name in changed:
                print(f"  {name}", file=sys.stderr)
            return 1
        print("attnspec generate --check: every vector file regenerates byte for byte")
        return 0
    print(f"wrote {len(changed)} changed file(s)" + (": " + ", ".join(changed) if changed else ""))
    return 0


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
    print(cite(spec, args.id, args.format))
    return 0


def cmd_check(args) -> int:
    from attnspec.spec.vectors import default_spec

    from .check import run_check

    custom = args.vectors_dir or os.environ.get("ATTNSPEC_VECTORS_DIR")
    spec = _spec(args) if custom else default_spec()  # loaded once a process (tests call often)
    # a CheckError (the check cannot run) is an AttnSpecError: main prints it, exit 2
    return run_check(args.target, args.component, spec, args.framework, args.dtype,
                     args.function, args.errors, keyword=args.k, variants=args.variant,
                     grad=args.grad)


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
training=False). Vectors needing an argument your code does not take are SKIP.

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

Exit status: 0 when every vector that ran passed and at most half were skipped;
1 otherwise; 2 when the check cannot run (file, target, component, dtype).
See examples/coursework/README.md.
"""


def _check_epilog() -> str:
    """The components, from the vector manifest (cheap: no vector file is read)."""
    import textwrap

    from attnspec.spec.vectors import read_manifest

    try:
        names = sorted(f.removesuffix(".json") for f in read_manifest()["files"])
    except Exception:  # noqa: BLE001 - help must print even without vectors
        return "components: see `attnspec list --components`"
    return "components (functions and vector counts: `attnspec list --components`):\n" + \
        textwrap.fill(", ".join(names), width=88, initial_indent="  ", subsequent_indent="  ")


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
    return run_report(backends, args.out, devices=args.devices,
                      pythons=parse_pythons(args.python), k=args.k, dtype=args.dtype,
                      options=args.backend_option, quiet=args.quiet,
                      command="attnspec " + " ".join(sys.argv[1:]), force=args.force)


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
    s.add_argument("--jobs", default=os.environ.get("ATTNSPEC_JOBS", "1"), metavar="N",
                   help="run the suite as N processes at once, or auto (one per usable CPU, "
                        "at most 8); env ATTNSPEC_JOBS; default 1")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("generate", help="regenerate the vector files from the oracle")
    s.add_argument("--check", action="store_true", help="write nothing; fail if a byte would change")
    s.add_argument("--dir", help="write here instead of the package's vector directory")
    s.add_argument("--jobs", type=int, default=2)
    s.add_argument("--only", metavar="C1,C2", help="rebuild only these components")
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
    s.set_defaults(func=cmd_cite)

    s = sub.add_parser("check", help="check your own function or class against a component",
                       description=CHECK_HELP, epilog=_check_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("target", metavar="FILE.py:NAME",
                   help="the file, and the function or class in it to check")
    s.add_argument("--component", required=True, metavar="C",
                   help="the spec component to check against (listed below)")
    s.add_argument("--function", metavar="NAME",
                   help="which function of a component that has several (embedding: lm_head; "
                        "masks: padding_mask...); default: the one named like the component")
    s.add_argument("--framework", default="numpy", metavar="NAME",
                   help="the arrays your code takes and returns: numpy (default), torch, "
                        "tensorflow (also for Keras), or any installed attnspec backend")
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
    except Exception:  # noqa: BLE001 - a bug: say so, with the traceback to report
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
