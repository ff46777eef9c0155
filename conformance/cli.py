"""The ``attnspec`` command line.

  attnspec list [--json]                 every vector: id, component, function, expect
  attnspec verify [--backend numpy] [--device cpu] [--dtype ...] [--json PATH]
  attnspec generate [--check]            regenerate the vector files from the oracle
  attnspec show ID                       a vector, readably
  attnspec cite ID [--format text|bibtex]
  attnspec check FILE.py:NAME --component C [--framework numpy] [--dtype float64]
  attnspec export ID [--format npz|json]
  attnspec new-backend NAME [--path DIR]
  attnspec report --backends numpy,torch,tensorflow --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict

import numpy as np


def _spec(args=None):
    from attnspec.spec.vectors import VECTORS_DIR, load

    return load(getattr(args, "vectors_dir", None) or os.environ.get("ATTNSPEC_VECTORS_DIR")
                or VECTORS_DIR)


def cmd_list(args) -> int:
    spec = _spec(args)
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
        print(f"{r['id']:44s} {r['expect']:5s} {tail}")
    return 0


def components_table(spec) -> str:
    """A Markdown table: component, functions, value and error vector counts, page."""
    lines = ["| component | functions | value vectors | error vectors |", "|---|---|---|---|"]
    for comp, vs in spec.by_component().items():
        live = [v for v in vs if not v.deprecated]
        fns = ", ".join(f"`{f}`" for f in spec.components[comp])
        lines.append(f"| [{comp}](spec/components/{comp}.md) | {fns} | "
                     f"{sum(v.expect == 'value' for v in live)} | "
                     f"{sum(v.expect == 'error' for v in live)} |")
    return "\n".join(lines)


def pytest_args(backend, device, dtype, json_path, extra=(), options=()) -> list[str]:
    args = ["--pyargs", "attnspec.conformance.suite", "-p", "no:cacheprovider",
            "--backend", backend, "--device", device, "--attnspec-json", json_path]
    if dtype:
        args += ["--dtype", dtype]
    for o in options:
        args += ["--backend-option", o]
    return args + list(extra)


def cmd_verify(args) -> int:
    import pytest

    fd, json_path = tempfile.mkstemp(suffix=".json", prefix="attnspec-")
    os.close(fd)
    try:
        extra = ["-x"] if args.exitfirst else []
        if args.vectors_dir:
            extra += ["--vectors-dir", args.vectors_dir]
        if args.k:
            extra += ["-k", args.k]
        if args.known_failures:
            extra += ["--known-failures", args.known_failures]
        code = pytest.main(pytest_args(args.backend, args.device, args.dtype, json_path,
                                       extra, args.backend_option))
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f) if os.path.getsize(json_path) else None
    finally:
        os.unlink(json_path)
    if doc is None:
        print("attnspec verify: the suite did not run (see above)", file=sys.stderr)
        return int(code) or 1
    print()
    print(summary_table(doc))
    for problem in doc.get("problems", []):
        print(f"attnspec verify: PROBLEM: {problem}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return int(code)


def summary_table(doc: dict) -> str:
    per = defaultdict(lambda: {"n": 0, "pass": 0, "fail": 0, "error": 0, "missing": 0,
                               "known": 0, "ulp": 0.0})
    for r in doc["results"]:
        row = per[(r["component"], r["dtype"])]
        row["n"] += 1
        row["known" if r.get("known_failure") else r["status"]] += 1
        if r["max_ulp"] is not None:
            row["ulp"] = max(row["ulp"], r["max_ulp"])
    head = (f"{'component':22s} {'dtype':9s} {'vectors':>7s} {'passed':>7s} {'failed':>7s} "
            f"{'error':>6s} {'missing':>7s} {'known':>6s} {'max ULP':>9s}")
    lines = [f"attnspec {doc.get('spec_version')} · backend {doc['backend']} · device "
             f"{doc['device']}", head, "-" * len(head)]
    for (comp, dtype), r in sorted(per.items()):
        lines.append(f"{comp:22s} {dtype:9s} {r['n']:7d} {r['pass']:7d} {r['fail']:7d} "
                     f"{r['error']:6d} {r['missing']:7d} {r['known']:6d} {r['ulp']:9.3g}")
    keys = ("n", "pass", "fail", "error", "missing", "known")
    total = {k: sum(r[k] for r in per.values()) for k in keys}
    lines.append("-" * len(head))
    lines.append(f"{'total':32s} {total['n']:7d} {total['pass']:7d} {total['fail']:7d} "
                 f"{total['error']:6d} {total['missing']:7d} {total['known']:6d}")
    return "\n".join(lines)


def cmd_generate(args) -> int:
    from attnspec.spec.generate import generate
    from attnspec.spec.vectors import VECTORS_DIR

    changed = generate(args.dir or VECTORS_DIR, check=args.check, jobs=args.jobs,
                       only=args.only.split(",") if args.only else None)
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
    from attnspec.spec.citing import cite

    print(cite(_spec(args), args.id, args.format))
    return 0


def cmd_check(args) -> int:
    from .check import run_check

    return run_check(args.target, args.component, _spec(args), args.framework, args.dtype,
                     args.function, args.errors)


def cmd_export(args) -> int:
    from .export import export

    path = export(_spec(args), args.id, args.format, args.out)
    print(f"wrote {path}")
    return 0


def cmd_new_backend(args) -> int:
    from .scaffold import scaffold

    root = scaffold(_spec(args), args.name, args.path)
    print(f"created {root}\nnext: pip install -e {root} && attnspec verify --backend {args.name}")
    return 0


def cmd_report(args) -> int:
    from .report import parse_pythons, run_report

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    return run_report(backends, args.out, devices=args.devices,
                      pythons=parse_pythons(args.python), k=args.k, dtype=args.dtype,
                      options=args.backend_option, quiet=args.quiet,
                      command="attnspec " + " ".join(sys.argv[1:]))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnspec", description=__doc__,
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
    s.add_argument("-x", "--exitfirst", action="store_true")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("generate", help="regenerate the vector files from the oracle")
    s.add_argument("--check", action="store_true", help="write nothing; fail if a byte would change")
    s.add_argument("--dir", help="write here instead of the package's vector directory")
    s.add_argument("--jobs", type=int, default=2)
    s.add_argument("--only", metavar="C1,C2", help="rebuild only these components")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("show", help="print one vector readably")
    s.add_argument("id")
    s.add_argument("--plot", metavar="PNG", help="also draw it (needs attnspec[plot])")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("cite", help="print the citation of a vector, component or the spec")
    s.add_argument("id")
    s.add_argument("--format", choices=["text", "bibtex"], default="text")
    s.set_defaults(func=cmd_cite)

    s = sub.add_parser("check", help="check your own function or class against a component")
    s.add_argument("target", metavar="FILE.py:NAME")
    s.add_argument("--component", required=True)
    s.add_argument("--function", help="which function of the component (default: its own name)")
    s.add_argument("--framework", default="numpy", help="numpy, torch, tensorflow (any backend)")
    s.add_argument("--dtype", default="float64")
    s.add_argument("--errors", action="store_true", help="also expect an exception on error vectors")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("export", help="write a vector as .npz or .json for other languages")
    s.add_argument("id")
    s.add_argument("--format", choices=["npz", "json"], default="npz")
    s.add_argument("--out", help="output file (default: <component>-<case>.<format>)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("new-backend", help="scaffold an installable backend package")
    s.add_argument("name")
    s.add_argument("--path", default=".")
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
    from attnspec.spec.errors import AttnSpecError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyError as exc:
        print(f"attnspec: no such vector {exc}", file=sys.stderr)
        return 2
    except AttnSpecError as exc:
        print(f"attnspec: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `attnspec list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
