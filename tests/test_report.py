"""`attnspec report`: one process per backend, three report files, nothing half-written."""

import json
import os
import subprocess
import sys

from attnspec.conformance import report as rep

REPORT = [sys.executable, "-m", "attnspec.conformance.cli", "report"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_an_unknown_backend_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([*REPORT, "--backends", "numpy,nosuch", "-k", "softmax", "--out",
                           str(out)], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown backend 'nosuch'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()  # no empty report


def test_report_numpy_subset(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([*REPORT, "--backends", "numpy", "-k", "softmax", "--out",
                           str(out)], capture_output=True, text=True, env=ENV, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "[1/1] numpy/cpu: starting" in log and "[1/1] numpy/cpu: ok in" in log
    assert "numpy/cpu | " in log  # the suite's own progress is passed through
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]

    doc = json.loads((out / "report.json").read_text())
    (numpy_run,) = doc["runs"]
    assert numpy_run["backend"] == "numpy" and numpy_run["ok"] and numpy_run["results"]
    assert numpy_run["versions"]["numpy"] and numpy_run["python"]
    assert doc["spec_version"] and doc["ok"]

    md = (out / "report.md").read_text()
    assert "| component | numpy/cpu/float64 | numpy/cpu/float32 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| softmax |"))
    n = sum(1 for r in numpy_run["results"]
            if r["component"] == "softmax" and r["dtype"] == "float64")
    assert f"{n}/{n}, " in row and "ULP" in row
    assert "## Versions" in md and "numpy " in md and "## Failures" in md

    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<script" not in page
    assert "<td class='pass'>" in page and "conformance report" in page


def test_interpreter_choice(tmp_path, monkeypatch):
    monkeypatch.setattr(rep.importlib.util, "find_spec", lambda name: None)
    assert rep.interpreter("numpy", {}, tmp_path) == sys.executable
    assert rep.interpreter("torch", {}, tmp_path) == sys.executable  # no .tox: this one
    tox = tmp_path / ".tox" / "torch-cpu" / "bin" / "python"
    tox.parent.mkdir(parents=True)
    tox.write_text("")
    assert rep.interpreter("torch", {}, tmp_path) == str(tox)
    assert rep.interpreter("torch", {"torch": "/x/python"}, tmp_path) == "/x/python"
    assert rep.parse_devices("cpu,torch:cuda", ["numpy", "torch"]) == {
        "numpy": ["cpu"], "torch": ["cuda"]}
    assert rep.parse_devices(None, ["numpy"]) == {"numpy": ["cpu"]}

# Ctrl-C and SIGTERM: tests/test_cli_faults.py::test_stopping_report_kills_the_child_and_leaves_nothing
