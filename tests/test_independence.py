"""The NumPy backend never imports the arbitrary-precision oracle (spec/oracle) or
mpmath: otherwise the suite would compare the oracle with itself."""

import ast
from pathlib import Path

NUMPY_BACKEND = Path(__file__).parents[1] / "backends" / "numpy"


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [node.module or ""] + [a.name for a in node.names]
    return names


def test_numpy_backend_imports_nothing_of_the_oracle():
    files = sorted(NUMPY_BACKEND.glob("*.py"))
    assert len(files) > 10
    for path in files:
        bad = [n for n in imported_names(path) if "oracle" in n.split(".") or n == "mpmath"]
        assert not bad, f"{path.name} imports {bad}"


def test_the_check_sees_an_oracle_import(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("from attnspec.spec.oracle.sdpa import sdpa\n")
    assert "oracle" in imported_names(planted)[0].split(".")
