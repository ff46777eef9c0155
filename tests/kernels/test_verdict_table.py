"""README's kernel verdict table (spec/derived.py, ``kernel-verdicts``) is rendered from the
committed tests/kernels/verdicts.json, never typed: `attnspec generate --check` fails on a
stale or hand-edited table and on a malformed file, and rendering imports no kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from attnspec.conformance.cli import main
from attnspec.spec.derived import DerivedError, kernels_block

from ..conftest import generate_check

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("tests") / "kernels" / "verdicts.json"


@pytest.fixture
def tree(derived_tree):
    return derived_tree


check = generate_check


def test_the_committed_table_is_the_rendered_one(tree, capsys):
    rc, out = check(capsys)
    assert rc == 0, out


def test_a_changed_result_makes_the_table_stale_and_generate_rewrites_it(tree, capsys):
    data = json.loads((tree / RESULTS).read_text())
    cell = data["routes"]["sdpa-flash"]["families"]["basic"]
    assert cell["fail"] == 0
    cell["fail"], cell["pass"], cell["causes"] = 1, cell["pass"] - 1, ["nonfinite-masked"]
    (tree / RESULTS).write_text(json.dumps(data))
    rc, out = check(capsys)
    assert rc == 1 and "README.md [kernel-verdicts]" in out
    assert main(["generate", "--text-only"]) == 0
    row = next(x for x in (tree / "README.md").read_text().splitlines() if x.startswith("| `sdpa-flash`"))
    assert row.endswith(f"| FAIL 1/{cell['pass'] + 1}: [nonfinite-masked]"
                        "(spec/components/flexattention.md#cause-nonfinite-masked) |"), row
    assert check(capsys)[0] == 0


def test_a_hand_edited_table_cell_fails(tree, capsys):
    readme = tree / "README.md"
    text = readme.read_text()
    row = next(x for x in text.splitlines() if x.startswith("| `ort-gqa`"))
    readme.write_text(text.replace(row, row.replace("FAIL 2/2", "pass", 1)))
    rc, out = check(capsys)
    assert rc == 1 and "README.md [kernel-verdicts]" in out


@pytest.mark.parametrize("edit", ["missing", "cause", "count", "not json"])
def test_a_missing_or_malformed_results_file_is_named(tree, edit):
    path = tree / RESULTS
    data = json.loads(path.read_text())
    if edit == "missing":
        path.unlink()
    elif edit == "cause":
        data["routes"]["flex"]["families"]["basic"]["causes"] = ["no-such-cause"]
        path.write_text(json.dumps(data))
    elif edit == "count":
        data["routes"]["flex"]["families"]["basic"]["pass"] = "7"
        path.write_text(json.dumps(data))
    else:
        path.write_text("{")
    with pytest.raises(DerivedError, match="tests/kernels/verdicts.json"):
        kernels_block(tree)


def test_rendering_imports_no_kernel():
    code = ("import sys; from pathlib import Path; from attnspec.spec.derived import kernels_block; "
            f"kernels_block(Path({str(ROOT)!r})); "
            "print(sorted(m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out
