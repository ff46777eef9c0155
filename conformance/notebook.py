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
    for i, cell in enumerate(cells):
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
            exec(compile(code, f"{file} [cell {n}]", "exec"), target.__dict__)  # noqa: S102 - the user's own notebook, in the worker
        except SyntaxError as exc:
            sys.modules.pop(mod_name, None)
            raise CheckError(f"{where}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
        except SystemExit as exc:
            sys.modules.pop(mod_name, None)
            raise CheckError(f"{where}{_line(exc, n, file)} called sys.exit({exc.code!r}); the "
                             f"cells are run in order before the check") from None
        except Exception as exc:  # noqa: BLE001 - the user's cell may raise anything
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
