"""Jupyter notebooks and ``attnspec check``.

``notebook_module(path)``: a ``.ipynb`` file's code cells run in order in a fresh module
(what ``check hw3.ipynb:attention`` imports). The file is parsed as JSON with a bounded
read; nothing but the notebook's own code runs: line magics (``%matplotlib``), shell lines
(``!pip``), ``get_ipython()`` calls and help lines (``obj?``) become ``pass``; a cell magic
runs its body only where the body is this cell's Python (``%%time``, ``%%capture``), a
``%%writefile NAME.py`` cell becomes the importable module ``NAME`` (never a file), and
other cell magics (``%%bash``, ``%%html``) are skipped. A cell that raises stops the
import with one line naming the cell.

``check(fn_or_class, component=...)``: the Python API for a notebook, see its docstring.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

from .check import CheckError

MAX_NOTEBOOK = 50 << 20  # bytes read from a .ipynb
RUN_BODY = {"time", "capture", "timeit", "prun"}  # cell magics whose body is the cell's Python
_LINE_MAGIC = re.compile(r"^(\s*)(?:[%!]|[\w.]+\s*=\s*[%!]|.*\bget_ipython\s*\().*$|^(\s*)\S.*\?\s*$")


# ---- reading a notebook ---------------------------------------------------------------------

def read_cells(file: Path) -> list[str]:
    """The sources of the code cells, in order; any malformed file is one CheckError."""
    with open(file, "rb") as f:
        data = f.read(MAX_NOTEBOOK + 1)
    if len(data) > MAX_NOTEBOOK:
        raise CheckError(f"{file} is over {MAX_NOTEBOOK >> 20} MiB; is it a notebook?")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CheckError(f"{file} is not a notebook (not JSON: {exc})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise CheckError(f"{file} is not a notebook: no list of 'cells'")
    out = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise CheckError(f"{file}: code cell {len(out) + 1}'s 'source' is not text")
        out.append(source)
    return out


def clean_cell(source: str) -> tuple[str, str | None]:
    """(Python to run, module name for a %%writefile cell or None); the line numbers stay."""
    first, _, body = source.partition("\n")
    if first.startswith("%%"):
        magic, *args = first[2:].split()
        if magic == "writefile" and args and args[-1].endswith(".py"):
            return "\n" + body, Path(args[-1]).stem
        if magic not in RUN_BODY:
            return "", None  # %%bash, %%html...: not Python
        source = "\n" + body
    return "\n".join(_LINE_MAGIC.sub(lambda m: (m[1] or m[2] or "") + "pass", line)
                     for line in source.split("\n")), None


def notebook_code(file: Path) -> str:
    """Every code cell's Python, cleaned and joined (to read its imports, not to run)."""
    return "\n".join(clean_cell(c)[0] for c in read_cells(file))


def notebook_module(file: Path, mod_name: str) -> types.ModuleType:
    """Run the notebook's code cells in order in a fresh module registered as ``mod_name``."""
    module = types.ModuleType(mod_name)
    module.__file__ = str(file)
    module.__dict__["display"] = print  # IPython's display(), as text
    sys.modules[mod_name] = module
    folder = str(file.parent.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for n, source in enumerate(read_cells(file), 1):
        code, writes = clean_cell(source)
        where = f"{file}, code cell {n}"
        target = types.ModuleType(writes) if writes else module
        try:
            exec(compile(code, f"{file} [cell {n}]", "exec"), target.__dict__)
        except SyntaxError as exc:
            sys.modules.pop(mod_name, None)
            raise CheckError(f"{where}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
        except SystemExit as exc:
            sys.modules.pop(mod_name, None)
            raise CheckError(f"{where}{_line(exc, n, file)} called sys.exit({exc.code!r}); the "
                             f"cells are run in order before the check") from None
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise CheckError(f"{where}{_line(exc, n, file)} failed: {type(exc).__name__}: {exc} "
                             f"(the code cells run in order before the check; fix or delete "
                             f"that cell)") from None
        if writes:
            sys.modules[writes] = target
    return module


def _line(exc: BaseException, n: int, file: Path) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename == f"{file} [cell {n}]"]
    return f", line {frames[-1].lineno}" if frames else ""


# ---- the Python API, for a notebook ---------------------------------------------------------

def check(fn_or_class, component: str = "sdpa", *, framework: str | None = None,
          dtype: str = "float64", function: str | None = None, errors: bool = False,
          k: str | None = None, variant=(), grad: bool = False, strict: bool = False,
          timeout: float | None = 20.0) -> CheckResult:
    """``attnspec check`` for a function or class defined in a notebook (or anywhere)::

        from attnspec.conformance.notebook import check
        check(attention, component="sdpa")          # the table, in Jupyter
        result = check(LayerNorm, "layer_norm", framework="torch", dtype="float32")
        result.ok, result.failed, result.rows        # for a test or a grader

    The options are the command's (``k`` is ``-k``, ``variant`` ``--variant``, a string or
    a list). It runs here, in the notebook's own process (the notebook already runs this
    code): ``timeout`` (seconds per vector) is enforced with SIGALRM in the main thread;
    the command's memory limit and output capture are not (its worker process is where
    they belong). ``framework`` defaults to the one the object's module imports.
    """
    from attnspec.spec.vectors import default_spec

    from .check import Target, _class_kind, frameworks_used, parse_timeout, run_check

    if not callable(fn_or_class):
        raise CheckError(f"check() takes a function or class, got {type(fn_or_class).__name__}")
    import inspect

    kind = (_class_kind(fn_or_class) or "class") if inspect.isclass(fn_or_class) else "function"
    module = inspect.getmodule(fn_or_class) or types.ModuleType("__main__")
    file = Path(getattr(module, "__file__", None) or "<notebook>")
    t = Target(fn_or_class, getattr(fn_or_class, "__name__", "target"), file, module, kind)
    if framework is None:
        ml = sorted(frameworks_used(t) - {"numpy"})
        framework = ml[0] if len(ml) == 1 else "numpy"
    rows, text = [], _Text()
    code = run_check(t, component, default_spec, framework, dtype, function, errors, out=text,
                     keyword=k, variants=(variant,) if isinstance(variant, str) else tuple(variant),
                     grad=grad, timeout=parse_timeout(timeout if timeout else 0, "timeout="),
                     isolate=False, strict=strict,
                     record=lambda v, verdict: rows.append(_row(v, verdict)))
    return CheckResult(code, text.getvalue(), rows)


class _Text:
    def __init__(self):
        self.parts = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def getvalue(self) -> str:
        return "".join(self.parts)


def _row(v, verdict) -> dict:
    w = verdict.worst or {}
    return {"id": v.id, "status": verdict.status, "message": verdict.lines[0] if verdict.lines
            else "", "output": w.get("what"), "max_abs_err": w.get("max_abs_err"),
            "index": w.get("index"), "expected": w.get("expected"), "got": w.get("got")}


class CheckResult:
    """What ``check()`` found: ``ok`` (the command's exit status 0), ``passed`` / ``failed``
    / ``skipped``, ``rows`` (one dict per vector: id, status, message, output, max_abs_err,
    index, expected, got), ``text`` (the command's report). Jupyter shows it as a table."""

    def __init__(self, status: int, text: str, rows: list[dict]):
        self.status, self.text, self.rows = status, text, rows
        count = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "skip")}
        self.passed, self.failed, self.skipped = count["pass"], count["fail"], count["skip"]

    @property
    def ok(self) -> bool:
        return self.status == 0

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        from html import escape

        def num(x) -> str:
            return "" if x is None else escape(f"{x:.6g}" if isinstance(x, float) else str(x))

        colour = {"pass": "#1a7f37", "fail": "#cf222e", "skip": "#6e7781"}
        head = ("<tr><th>vector</th><th>status</th><th>max abs err</th><th>worst element</th>"
                "<th>expected</th><th>got</th><th>message</th></tr>")
        body = "".join(
            f"<tr><td><code>{escape(r['id'])}</code></td>"
            f"<td style='color:{colour[r['status']]}'><b>{r['status'].upper()}</b></td>"
            f"<td>{num(r['max_abs_err'])}</td>"
            f"<td>{escape(str(r['output'] or ''))}{num(tuple(r['index'])) if r['index'] else ''}"
            f"</td><td>{num(r['expected'])}</td><td>{num(r['got'])}</td>"
            f"<td>{escape(r['message'] if r['status'] != 'pass' else '')}</td></tr>"
            for r in self.rows)
        tail = [line for line in self.text.splitlines()[-4:] if not line.startswith(
            ("PASS", "FAIL", "SKIP", " "))]
        summary = "<br>".join(escape(line) for line in tail)
        return (f"<div><p><b>{'OK' if self.ok else 'NOT OK'}</b>: {self.passed} passed, "
                f"{self.failed} failed, {self.skipped} skipped</p><table>{head}{body}</table>"
                f"<p>{summary}</p></div>")
