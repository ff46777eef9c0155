"""``attnspec report``: one conformance page for several backends.

Each (backend, device) runs ``attnspec verify`` in its own process (torch and
tensorflow never share one), with the interpreter chosen by :func:`interpreter`.
The results are merged into

- ``report.json``: every run (backend, device, options, interpreter, versions,
  problems, wall time, per-vector results),
- ``report.md``: the matrix component x backend/device/dtype, each cell
  ``passed/total, max abs err, max ULP``, then the versions and the failures,
- ``report.html``: the same matrix, self-contained (inline CSS, no script),
  colour-coded.

The files are written to a temporary directory inside ``--out`` and renamed
into place only when all three are complete; report files already in ``--out``
are replaced only with ``--force``. Ctrl-C, SIGTERM or SIGHUP stop the running
child's whole process group, remove the partial files, leave no report behind
and exit 130, 143 or 129.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import html
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import results

REPORT_FILES = ("report.json", "report.md", "report.html")
FRAMEWORK_MODULE = {"torch": "torch", "tensorflow": "tensorflow", "jax": "jax"}


# -- choosing what runs where --------------------------------------------------------------


def interpreter(backend: str, overrides: dict[str, str], cwd: Path | None = None) -> str:
    """The python that runs ``backend``: ``--python NAME=PATH`` first; else, when the
    backend's framework is not importable here and ``.tox/<backend>-cpu/bin/python``
    exists, that one; else this interpreter (whose failure is then reported)."""
    if backend in overrides:
        return overrides[backend]
    module = FRAMEWORK_MODULE.get(backend)
    if module and importlib.util.find_spec(module) is None:
        tox = (cwd or Path.cwd()) / ".tox" / f"{backend}-cpu" / "bin" / "python"
        if tox.is_file():
            return str(tox)
    return sys.executable


def parse_devices(spec: str | None, backends: list[str]) -> dict[str, list[str]]:
    """``cpu,cuda`` (every backend) or ``torch:cuda,tensorflow:gpu`` (per backend); a
    backend named in none of the per-backend entries gets the plain ones, or ``cpu``."""
    plain, per = [], defaultdict(list)
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, dev = item.partition(":")
        if sep:
            per[name].append(dev)
        else:
            plain.append(item)
    return {b: per.get(b) or plain or ["cpu"] for b in backends}


def parse_pythons(items: list[str]) -> dict[str, str]:
    from attnspec.spec.errors import ConfigError

    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--python wants NAME=PATH, got {item!r}")
        out[name] = path
    return out


# -- running one backend -------------------------------------------------------------------


def run_one(python: str, backend: str, device: str, json_path: Path, k: str | None,
            dtype: str | None, options: list[str], echo, state: dict) -> tuple[int, list[str]]:
    """Run ``attnspec verify`` in a child process; returns (exit code, its output lines)."""
    cmd = [python, "-m", "attnspec.conformance.cli", "verify", "--backend", backend,
           "--device", device, "--json", str(json_path)]
    if k:
        cmd += ["-k", k]
    if dtype:
        cmd += ["--dtype", dtype]
    for o in options:
        cmd += ["--backend-option", o]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0",
           "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
           "ATTNSPEC_HYPOTHESIS_PROFILE": os.environ.get("ATTNSPEC_HYPOTHESIS_PROFILE", "ci")}
    lines: list[str] = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=env, start_new_session=True)
    except OSError as exc:
        return 127, [f"cannot start {python}: {exc}"]
    state["proc"] = proc
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        echo(line)
    code = proc.wait()
    state["proc"] = None
    return code, lines


def stop(proc) -> None:
    """Stop a child started with ``start_new_session``: its whole process group, SIGTERM
    then (after 10 s) SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def load_run(json_path: Path, backend: str, device: str, python: str, code: int,
             lines: list[str], wall: float) -> dict:
    doc, why = None, "the suite did not run: "
    if json_path.is_file() and json_path.stat().st_size:
        try:
            doc = results.load(json_path)
        except results.ResultsError as exc:
            doc, why = None, f"unreadable results ({exc}): "
    if doc is None:
        tail = [ln for ln in lines if ln.strip()][-8:]
        doc = {"backend": backend, "device": device, "dtypes": [], "options": {},
               "spec_version": None, "versions": {}, "exitstatus": code,
               "problems": [why + (" | ".join(tail) or f"exit {code}")], "results": []}
    doc["python"] = python
    doc["returncode"] = code
    doc["wall_s"] = round(wall, 2)
    doc["test_failures"] = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    doc["available"] = not doc["problems"]
    if not doc["available"]:
        doc["dtypes"] = []
    doc["ok"] = code == 0 and not doc["problems"]
    return doc


# -- the matrix ----------------------------------------------------------------------------


def _cell_key(run: dict, dtype: str) -> str:
    return f"{run['backend']}/{run['device']}/{dtype}"


def matrix(runs: list[dict]) -> tuple[list[str], list[str], dict]:
    """(columns, components, {(component, column): results.Tally})."""
    columns, cells = [], {}
    for run in runs:
        dtypes = list(dict.fromkeys(run.get("dtypes") or [])) if run["available"] else []
        for d in dtypes or ["-"]:
            if _cell_key(run, d) not in columns:
                columns.append(_cell_key(run, d))
        per = results.tally(run["results"], key=lambda r, run=run: (r["component"],
                                                                    _cell_key(run, r["dtype"])))
        for (comp, col), t in per.items():
            if col not in columns:
                columns.append(col)
            cells[comp, col] = cells[comp, col].merge(t) if (comp, col) in cells else t
    return columns, sorted({comp for comp, _ in cells}), cells


def cell_text(c: results.Tally | None) -> str:
    if c is None:
        return "—"
    text = f"{c['pass']}/{c.n}"
    if c["known"]:
        text += f" ({c['known']} known)"
    if c["missing"]:
        text += f" ({c['missing']} missing)"
    return f"{text}, {results.fmt(c.max_abs, '.2g')}, {results.fmt(c.max_ulp)} ULP"


def cell_class(c: results.Tally | None) -> str:
    if c is None:
        return "na"
    if c["fail"] or c["error"]:
        return "fail"
    if c["missing"] and not c["pass"]:
        return "missing"
    if c["missing"] or c["known"]:
        return "partial"
    return "pass"


def failures(runs: list[dict]) -> list[tuple[str, str, str]]:
    """(run, test id, first message line) for every non-passing vector and test."""
    out = []
    for run in runs:
        where = f"{run['backend']}/{run['device']}"
        for p in run["problems"]:
            out.append((where, "(run)", p.splitlines()[0] if p else p))
        for r in run["results"]:
            if r["status"] != "pass":
                first = (r.get("message") or r["status"]).splitlines()[0]
                if r.get("known_failure"):
                    first = f"known failure: {r['known_failure']}"
                out.append((where, f"{r['id']}[{r['dtype']}] {r['status']}", first))
        if not run["available"]:
            continue  # every test errors the same way; the problem says why
        vector_ids = {f"{r['id']}[{r['dtype']}]" for r in run["results"]}
        for line in run.get("test_failures", []):
            if not any(v in line for v in vector_ids):
                out.append((where, "(test)", line))
    return out


def _versions(runs: list[dict]) -> list[tuple[str, str]]:
    rows = []
    for run in runs:
        where = f"{run['backend']}/{run['device']}"
        vers = ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items()) or "-"
        rows.append((where, f"{vers} · {run['python']}"))
    return rows


def build_report(runs: list[dict], meta: dict) -> dict:
    return {**meta, "ok": all(r["ok"] for r in runs), "runs": runs}


# -- the page: one model, rendered as Markdown and as HTML ---------------------------------


@dataclass
class Cell:
    text: str
    kind: str = ""  # "head" (a row's name), "code", or a colour: pass/fail/partial/missing/na


@dataclass
class Section:
    title: str
    head: list[str]
    rows: list[list[Cell]]
    empty: str = "None."  # shown instead of a table without rows


@dataclass
class Page:
    title: str
    date: str
    platform: str
    command: str
    note: str
    sections: list[Section] = field(default_factory=list)


def page(report: dict) -> Page:
    """What report.md and report.html both show, built once."""
    runs = report["runs"]
    columns, comps, cells = matrix(runs)
    doc = Page(f"attnspec {report['spec_version']} conformance report", report["date"],
               report["platform"], report["command"],
               "Each cell: vectors passed/total, max absolute error, max ULP error "
               "(over the vectors of that component at that dtype).")
    doc.sections.append(Section("Runs", ["backend/device", "status", "dtypes", "wall (s)",
                                         "exit", "problems"], [_run_row(run) for run in runs]))
    doc.sections.append(Section("Matrix", ["component", *columns], [
        [Cell(comp, "head")] + [Cell(cell_text(cells.get((comp, col))),
                                     cell_class(cells.get((comp, col)))) for col in columns]
        for comp in comps]))
    versions = [[Cell(w), Cell(v)] for w, v in _versions(runs)]
    versions.append([Cell("report"), Cell(f"attnspec {report['spec_version']}, python "
                                          f"{report['python']}, {report['platform']}")])
    doc.sections.append(Section("Versions", ["run", "versions · interpreter"], versions))
    fails = failures(runs)
    doc.sections.append(Section(f"Failures ({len(fails)})", ["run", "test", "first line"],
                                [[Cell(w, "head"), Cell(t, "code"), Cell(m)]
                                 for w, t, m in fails]))
    return doc


def _run_row(run: dict) -> list[Cell]:
    status = "ok" if run["ok"] else ("unavailable" if not run["available"] else "FAILED")
    return [Cell(f"{run['backend']}/{run['device']}", "head"),
            Cell(status, "pass" if run["ok"] else "fail"),
            Cell(", ".join(run.get("dtypes") or []) or "-"), Cell(str(run["wall_s"])),
            Cell(str(run["returncode"])),
            Cell("; ".join(p.splitlines()[0] for p in run["problems"]) or "-")]


def render_md(report: dict) -> str:
    doc = page(report)
    out = [f"# {doc.title}", "", f"{doc.date} · {doc.platform} · `{doc.command}`", "",
           doc.note]
    for sec in doc.sections:
        out += ["", f"## {sec.title}", ""]
        if not sec.rows:
            out.append(sec.empty)
            continue
        out += ["| " + " | ".join(sec.head) + " |", "|" + "---|" * len(sec.head)]
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in sec.rows]
    return "\n".join(out) + "\n"


def _md_cell(c: Cell) -> str:
    return f"`{c.text}`" if c.kind == "code" else _md(c.text)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #bbb;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eee}td.pass{background:#d4f4d4}td.fail{background:#f8c8c8}
td.partial{background:#fbeab0}td.missing{background:#e2e2e2;color:#555}
td.na{color:#999;text-align:center}code{font-size:12px}
.legend span{padding:2px 8px;margin-right:6px;border:1px solid #bbb}"""

LEGEND = ("<p class='legend'><span style='background:#d4f4d4'>all pass</span>"
          "<span style='background:#fbeab0'>known failures / some missing</span>"
          "<span style='background:#f8c8c8'>failures</span>"
          "<span style='background:#e2e2e2'>missing</span> {note}</p>")


def render_html(report: dict) -> str:
    e = html.escape
    doc = page(report)
    title = f"{doc.title}, {doc.date}"
    h = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
         f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
         f"<h1>{e(title)}</h1>", f"<p>{e(doc.platform)} · <code>{e(doc.command)}</code></p>",
         LEGEND.format(note=e(doc.note))]
    for sec in doc.sections:
        h.append(f"<h2>{e(sec.title)}</h2>")
        if not sec.rows:
            h.append(f"<p>{e(sec.empty)}</p>")
            continue
        h.append("<table><tr>" + "".join(f"<th>{e(t)}</th>" for t in sec.head) + "</tr>")
        h += ["<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in sec.rows]
        h.append("</table>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


def _html_cell(c: Cell) -> str:
    text = html.escape(c.text)
    if c.kind == "head":
        return f"<th>{text}</th>"
    if c.kind == "code":
        return f"<td><code>{text}</code></td>"
    return f"<td class='{c.kind}'>{text}</td>" if c.kind else f"<td>{text}</td>"


# -- writing atomically --------------------------------------------------------------------


def write_report(report: dict, out: Path, work: Path) -> list[Path]:
    """Write the three files into ``work`` (inside ``out``), then rename them into place."""
    texts = {"report.json": json.dumps(report, indent=1) + "\n",
             "report.md": render_md(report), "report.html": render_html(report)}
    for name, text in texts.items():
        (work / name).write_text(text, encoding="utf-8")
    # The three renames are not interrupted half way (Ctrl-C and SIGTERM wait for them).
    with handling(signal.SIG_IGN, ("SIGINT", "SIGTERM", "SIGHUP")):
        for name in REPORT_FILES:
            os.replace(work / name, out / name)
    return [out / name for name in REPORT_FILES]


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: stop like Ctrl-C, with the signal's exit code."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


def raise_stopped(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def handling(handler, names=("SIGTERM", "SIGHUP")):
    """``handler`` for the named signals this platform has, for the block; the previous
    handlers after it. Off the main thread nothing is installed (Ctrl-C only)."""
    try:
        previous = {s: signal.signal(getattr(signal, s), handler) for s in names
                    if hasattr(signal, s)}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(getattr(signal, s), old)


def refuse_overwrite(out: Path, force: bool) -> None:
    """Refuse to replace report files already in ``out`` unless ``force``."""
    from attnspec.spec.errors import ConfigError

    present = [name for name in REPORT_FILES if (out / name).exists()]
    if present and not force:
        raise ConfigError(f"{out / present[0]} exists; pass --force to replace the report "
                          f"in {out}")


def run_report(backends: list[str], out: str | Path, devices: str | None = None,
               pythons: dict[str, str] | None = None, k: str | None = None,
               dtype: str | None = None, options: list[str] = (), quiet: bool = False,
               command: str = "attnspec report", stream=None, force: bool = False) -> int:
    """Run every (backend, device), write the three files; on Ctrl-C, SIGTERM or SIGHUP
    stop the running child's whole process group, remove the partial directory and
    return 130 (143, 129) with no report written."""
    stream = stream or sys.stdout
    out = Path(out)
    refuse_overwrite(out, force)
    out.mkdir(parents=True, exist_ok=True)
    state: dict = {"proc": None, "work": None}
    try:
        with handling(raise_stopped):
            state["work"] = Path(tempfile.mkdtemp(prefix=".report-partial-", dir=out))
            paths, ok, wall = _run_all(backends, out, state["work"], state, devices,
                                       pythons or {}, k, dtype, options, quiet, command, stream)
    except (KeyboardInterrupt, Stopped) as exc:
        stop(state["proc"])
        print("interrupted: no report written", file=sys.stderr, flush=True)
        return exc.code if isinstance(exc, Stopped) else 130
    finally:
        if state["work"] is not None:
            shutil.rmtree(state["work"], ignore_errors=True)
    print(f"wrote {', '.join(str(p) for p in paths)} in {wall:.1f} s", file=stream, flush=True)
    return 0 if ok else 1


def _run_all(backends, out, work, state, devices, pythons, k, dtype, options, quiet, command,
             stream) -> tuple[list[Path], bool, float]:
    from attnspec.spec import SPEC_VERSION

    plan = [(b, d) for b, devs in parse_devices(devices, backends).items() for d in devs]
    runs = []
    t_all = time.perf_counter()

    def say(msg: str) -> None:
        print(msg, file=stream, flush=True)

    for i, (backend, device) in enumerate(plan, 1):
        python = interpreter(backend, pythons)
        tag = f"[{i}/{len(plan)}] {backend}/{device}"
        say(f"{tag}: starting ({python})")
        t0 = time.perf_counter()
        echo = (lambda line: None) if quiet else (lambda line, t=tag: say(f"  {t} | {line}"))
        json_path = work / f"{backend}-{device}.json"
        code, lines = run_one(python, backend, device, json_path, k, dtype, list(options),
                              echo, state)
        run = load_run(json_path, backend, device, python, code, lines,
                       time.perf_counter() - t0)
        runs.append(run)
        t = results.total(results.tally(run["results"]).values())
        summary = ", ".join(f"{n} {o}" for o, n in t.counts.items() if n) or "no results"
        verdict = "ok" if run["ok"] else ("UNAVAILABLE" if not run["available"] else "FAILED")
        say(f"{tag}: {verdict} in {run['wall_s']:.1f} s ({summary}; exit {code})")
        for p in run["problems"]:
            say(f"{tag}: problem: {p}")
    report = build_report(runs, {
        "spec_version": SPEC_VERSION,
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "command": command, "python": platform.python_version(),
        "platform": platform.platform(), "wall_s": round(time.perf_counter() - t_all, 2)})
    return write_report(report, out, work), report["ok"], time.perf_counter() - t_all
