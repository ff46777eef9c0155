"""The project's own tests. A framework's tests skip where the framework is not installed
(each tox environment installs its own), but an environment that promises frameworks lists
them in ATTNSPEC_REQUIRE (comma-separated modules, set in tox.ini): there a missing one is
an error before any test runs, never a silent skip."""

import importlib
import json
import os
import shutil
from pathlib import Path

import pytest
from attnspec.spec.vectors import MANIFEST, VECTORS_DIR

for _name in filter(None, (n.strip() for n in os.environ.get("ATTNSPEC_REQUIRE", "").split(","))):
    importlib.import_module(_name)


@pytest.fixture
def vectors(tmp_path) -> Path:
    """A small valid vector folder for the fault tests to edit: softmax and masks, with
    their own manifest."""
    d = tmp_path / "vectors"
    d.mkdir()
    files = json.loads((VECTORS_DIR / MANIFEST).read_text())["files"]
    keep = {n: files[n] for n in ("softmax.json", "masks.json")}
    for name in keep:
        (d / name).write_bytes((VECTORS_DIR / name).read_bytes())
    (d / MANIFEST).write_text(json.dumps({"spec_version": "1.1.0", "files": keep}))
    return d


@pytest.fixture
def derived_tree(tmp_path, monkeypatch) -> Path:
    """A copy of the checkout's derived files, the current folder for the test (the vector
    files linked, never written): what `attnspec generate --check --text-only` reads."""
    root = Path(__file__).resolve().parent.parent
    shutil.copy(root / "README.md", tmp_path / "README.md")
    shutil.copytree(root / "spec" / "components", tmp_path / "spec" / "components")
    shutil.copy(root / "spec" / "FUNCTIONS.md", tmp_path / "spec" / "FUNCTIONS.md")
    (tmp_path / "tests" / "kernels").mkdir(parents=True)  # README's kernel table reads it
    shutil.copy(root / "tests" / "kernels" / "verdicts.json", tmp_path / "tests" / "kernels")
    (tmp_path / "spec" / "vectors").symlink_to(VECTORS_DIR)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def generate_check(capsys) -> tuple[int, str]:
    """`attnspec generate --check --text-only` in the current folder: (exit code, output)."""
    from attnspec.conformance.cli import main

    rc = main(["generate", "--check", "--text-only"])
    out = capsys.readouterr()
    return rc, out.out + out.err


# Under pytest-xdist's --dist loadfile a file is one unit of work, handed out in collection
# order: these files take minutes each (the tolerance derivation ~2.5 CPU min, dealt into two
# shard files of about half each), so they go first and the other files fill the second
# process around them instead of running after.
LONGEST_FIRST = ("test_tolerances_shard1.py", "test_tolerances_shard2.py", "test_shards.py",
                 "test_new_backend.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)  # stable: the order within a file and among the rest is kept
