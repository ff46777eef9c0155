"""The backend contract in code (backends/base.py) and its guide (backends/README.md) agree,
and the backends package has no import cycle."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from attnspec.backends import base

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ROOT / "backends"


def _required() -> list[str]:
    """The methods base.Backend leaves to a backend: those whose body raises _unwritten."""
    return [name for name, fn in vars(base.Backend).items()
            if callable(fn) and "self._unwritten(" in inspect.getsource(fn)
            and name != "_unwritten"]


def test_base_declares_the_five_methods_a_backend_writes():
    assert sorted(_required()) == ["asarray", "devices", "dtypes", "to_numpy", "versions"]
    for name in _required():
        assert inspect.getdoc(getattr(base.Backend, name)), f"{name} has no docstring"


class Half(base.Backend):
    name = "half"
    package = "half_attnspec"


@pytest.mark.parametrize("method, args", [("devices", ()), ("dtypes", ("cpu",)),
                                          ("asarray", (None,)), ("to_numpy", (None,)),
                                          ("versions", ())])
def test_an_unwritten_method_raises_naming_the_backend_and_the_method(method, args):
    with pytest.raises(NotImplementedError) as info:
        getattr(Half(), method)(*args)
    assert "'half'" in str(info.value) and f"{method}()" in str(info.value)
    assert "Half" in str(info.value)


def test_the_guide_lists_exactly_the_methods_base_declares():
    guide = (BACKENDS / "README.md").read_text(encoding="utf-8")
    section = guide.split("### The backend class", 1)[1].split("###", 1)[0]
    listed = re.findall(r"^\| `(\w+)\(", section, flags=re.M)
    assert sorted(listed) == sorted(_required())
    assert "write five methods" in section and len(listed) == 5


@pytest.mark.parametrize("backend", ["numpy", "torch", "tensorflow", "jax"])
def test_every_builtin_backend_writes_the_five(backend):
    """Read from the source (importing torch and tensorflow in one process is not allowed)."""
    tree = ast.parse((BACKENDS / backend / "__init__.py").read_text(encoding="utf-8"))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and any(getattr(b, "id", None) == "Backend" for b in n.bases)]
    assert len(classes) == 1, f"{backend}: {len(classes)} Backend subclasses"
    written = {n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)}
    assert set(_required()) <= written, f"{backend} lacks {set(_required()) - written}"


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every backends.* module ``path`` imports, at the top or inside a function."""
    here = _module_of(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                stem = package[:len(package) - node.level + 1]
                base_ = ".".join(stem + ([node.module] if node.module else []))
            else:
                base_ = (node.module or "").removeprefix("attnspec.")
            names = [f"{base_}.{a.name}" for a in node.names] + [base_]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("attnspec.") for a in node.names]
        else:
            continue
        out.update(n for n in names if n.split(".")[0] == "backends")
    return out


def test_the_backends_package_has_no_import_cycle():
    files = {_module_of(p): p for p in BACKENDS.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    # a package's __init__ importing its own submodule is no cycle with that submodule
    # importing a name from the package: only cycles between sibling modules count
    graph = {m: {i for i in deps if not i.startswith(m + ".")} for m, deps in graph.items()}
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
    path: list[str] = []
    done: set[str] = set()

    def visit(m):
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for i in sorted(graph[m]):
            visit(i)
        path.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
