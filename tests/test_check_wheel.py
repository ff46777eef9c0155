"""The wheel ships examples/coursework/ (as ``attnspec.examples.coursework``), and
`attnspec check --help` points to where it is installed (issue 20, item 6)."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from attnspec.conformance.cli import main

REPO = Path(__file__).parents[1]
COURSEWORK = REPO / "examples" / "coursework"


def _tracked_copy(dest: Path) -> Path:
    """The committed and staged files of the checkout (what a release builds from), copied,
    so that building leaves no build/ or egg-info in the checkout."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


def test_the_wheel_contains_the_coursework_examples(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = out.glob("attnspec-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("attnspec/examples/coursework/"): z.read(n)
                   for n in z.namelist() if n.startswith("attnspec/examples/coursework/")}
    expected = {p.name for p in COURSEWORK.iterdir() if p.suffix in (".py", ".md")}
    assert expected <= set(shipped), sorted(expected - set(shipped))
    assert {"README.md", "attention_correct.py", "layer_norm_backward.py"} <= set(shipped)
    for name in expected:
        assert shipped[name] == (COURSEWORK / name).read_bytes(), name


def test_check_help_points_to_the_installed_examples(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    where = re.search(r"Examples to start from, and how your code is called:\s+(\S+)\s+"
                      r"\(README\.md there\)", out)
    assert where, out
    folder = Path(where[1])
    assert (folder / "README.md").is_file()
    assert (folder / "attention_correct.py").is_file()
    # the folder the package resolves, not a path typed into the help
    import importlib.util

    found = importlib.util.find_spec("attnspec.examples.coursework")
    assert folder.resolve() in {Path(p).resolve() for p in found.submodule_search_locations}
