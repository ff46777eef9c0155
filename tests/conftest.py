"""The project's own tests. A framework's tests skip where the framework is not installed
(each tox environment installs its own), but an environment that promises frameworks lists
them in ATTNSPEC_REQUIRE (comma-separated modules, set in tox.ini): there a missing one is
an error before any test runs, never a silent skip."""

import importlib
import json
import os
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
