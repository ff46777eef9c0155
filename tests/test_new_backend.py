"""`attnspec new-backend NAME`: scaffold a package in a temporary directory, install it into
a fresh environment, and see `attnspec verify --backend NAME` discover it, report every
component `missing` (never a pass), and report fewer once one is filled in."""

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

from attnspec.conformance.cli import main

REPO = Path(__file__).parents[1]

SOFTMAX = '''
import numpy as np
from attnspec.backends import _checks as check
from attnspec.spec.errors import DTypeError


def softmax(x, mask=None, *, axis=-1):
    """y_i = exp(x_i - m) / sum_j exp(x_j - m) over the kept entries; nothing kept -> 0;
    kept +inf entries share the slice; a kept NaN makes the slice's kept weights NaN."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        raise DTypeError(f"x must be floating, got {x.dtype}")
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    keep = np.ones(s, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise DTypeError(f"mask must be boolean, got {mask.dtype}")
        check.broadcastable("mask", mask, s)
        keep = np.broadcast_to(mask, s)
    kept = keep & (x != -np.inf)
    nan = np.any(kept & np.isnan(x), axis=axis, keepdims=True)
    top = kept & (x == np.inf)
    live = np.where(np.any(top, axis=axis, keepdims=True), top, kept & ~np.isnan(x))
    x = np.where(top, 0, x)
    m = np.max(np.where(live, x, -np.inf), axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(live, np.exp(np.where(live, x - m, 0)), 0)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.where(nan & kept, np.nan, e / np.where(total > 0, total, 1))
'''


# softmax's golden, error, property and differential tests and completeness: a stub met
# inside a hypothesis test fails it at once (MissingFunction), so this stays quick.
K = "completeness or softmax"


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def _verify(py: Path, tmp: Path, tag: str) -> tuple[int, dict, str]:
    out = tmp / f"{tag}.json"
    proc = _run([str(py), "-m", "attnspec.conformance.cli", "verify", "--backend", "stubby",
                 "-k", K, "--json", str(out)], cwd=tmp,
                env={**os.environ, "ATTNSPEC_HYPOTHESIS_PROFILE": "ci"})
    log = proc.stdout + proc.stderr
    assert out.is_file(), log
    return proc.returncode, json.loads(out.read_text()), log


def test_scaffold_layout(tmp_path, capsys):
    assert main(["new-backend", "stubby", "--path", str(tmp_path)]) == 0
    root = tmp_path / "attnspec-stubby"
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."attnspec.backends"]' in pyproject
    assert 'stubby = "attnspec_stubby:Backend"' in pyproject
    attention = (root / "src" / "attnspec_stubby" / "attention.py").read_text()
    assert "@missing\ndef softmax(x, mask=None, *, axis=-1):" in attention
    assert (root / "src" / "attnspec_stubby" / "known_failures.txt").is_file()
    # the composites are not stubs: the shared ones, bound to the package; ops.py has a
    # stub of each primitive op they call
    from attnspec.backends.composite import OPS

    layers = (root / "src" / "attnspec_stubby" / "layers.py").read_text()
    assert "@missing" not in layers
    # the functions are named: a composite attnspec adds later cannot break the import
    assert re.search(r"\(encoder_layer, decoder_layer, encoder, decoder, llama_layer\) = "
                     r"Layers\.bind\(\n +__package__, \"encoder_layer\", \"decoder_layer\", "
                     r"\"encoder\", \"decoder\",\s+\"llama_layer\"\)", layers), layers
    ffn = (root / "src" / "attnspec_stubby" / "feedforward.py").read_text()
    assert "@missing\ndef feedforward(" in ffn and '(residual,) = Layers.bind(__package__, "residual")' in ffn
    ops = (root / "src" / "attnspec_stubby" / "ops.py").read_text()
    assert [n for n in OPS if f"\ndef {n}(" not in ops] == []
    assert main(["new-backend", "stubby", "--path", str(tmp_path)]) == 2  # exists already
    assert main(["new-backend", "Not-A-Name", "--path", str(tmp_path)]) == 2


def test_scaffold_passes_the_projects_ruff(tmp_path):
    """What the scaffold writes is code a contributor commits: the project's lint must pass
    on it unchanged (it once failed on long docstrings and the blank lines of a binding)."""
    assert main(["new-backend", "stubby", "--path", str(tmp_path)]) == 0
    r = _run(["ruff", "check", "--config", str(REPO / "pyproject.toml"), str(tmp_path)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_scaffold_builtin(tmp_path, capsys):
    """--builtin writes backends/NAME/ inside an attnspec checkout (no pyproject of its own)
    and names every registration left to make; outside a checkout it refuses."""
    assert main(["new-backend", "stubby", "--builtin", "--path", str(tmp_path)]) == 2
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "base.py").write_text("")
    capsys.readouterr()
    assert main(["new-backend", "stubby", "--builtin", "--path", str(tmp_path)]) == 0
    root = tmp_path / "backends" / "stubby"
    assert "@missing\ndef softmax(" in (root / "attention.py").read_text()
    assert (root / "known_failures.txt").is_file() and not (root / "pyproject.toml").exists()
    out = capsys.readouterr().out
    for where in ("pyproject.toml", "_BUILTIN", "FRAMEWORK_MODULE", "FRAMEWORK_OF_MODULE",
                  "tox.ini", '"attnspec.backends.stubby"'):
        assert where in out, where
    assert main(["new-backend", "stubby", "--builtin", "--path", str(tmp_path)]) == 2


def _is_gradient(vid: str) -> bool:
    return re.match(r"[a-z0-9_]+/(stress-)?grad-", vid) is not None


def test_scaffold_installs_and_is_discovered(tmp_path):
    assert main(["new-backend", "stubby", "--path", str(tmp_path)]) == 0
    pkg = tmp_path / "attnspec-stubby"
    env = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True).create(env)  # no ensurepip: ~10 s
    py = env / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet",
           "--disable-pip-version-check"]
    # Build offline when the base interpreter can (setuptools>=69 and wheel); otherwise pip
    # fetches the build requirements into an isolated build environment.
    can_build = _run([str(py), "-c", "import setuptools, wheel, sys; "
                      "sys.exit(int(setuptools.__version__.split('.')[0]) < 69)"]).returncode == 0
    build = ["--no-build-isolation"] if can_build else []
    # attnspec itself: reused from the base interpreter when importable there
    if _run([str(py), "-c", "import attnspec.conformance.cli"]).returncode != 0:
        # with its dependencies: a base interpreter without numpy/pytest/hypothesis gets them
        r = _run([*pip, *build, "-e", str(REPO)])
        assert r.returncode == 0, r.stdout + r.stderr
    r = _run([*pip, "--no-deps", *build, str(pkg)])
    assert r.returncode == 0, r.stdout + r.stderr

    # every function a stub: discovered, nothing passes, completeness lists them all
    code, doc, log = _verify(py, tmp_path, "before")
    assert code != 0, log
    assert doc["backend"] == "stubby" and not doc["problems"], doc["problems"]
    softmax = [r for r in doc["results"] if r["component"] == "softmax"]
    assert softmax and {r["status"] for r in softmax} == {"missing"}, softmax
    assert "still a scaffold stub (@missing)" in log
    n_before = int(re.search(r"(\d+) spec function\(s\) missing", log).group(1))
    assert "softmax.softmax: still a scaffold stub" in log

    # fill in softmax: it passes, the rest stays missing, the count drops by one
    attention = next(pkg.rglob("attention.py"))
    installed = _run([str(py), "-c", "import attnspec_stubby.attention as m; print(m.__file__)"])
    target = Path(installed.stdout.strip())
    for path in {attention, target}:
        text = path.read_text()
        stub = re.search(r"\n@missing\ndef softmax\(.*?raise NotImplementedError\n", text, re.S)
        path.write_text(text.replace(stub.group(0), "\n") + SOFTMAX)
    code, doc, log = _verify(py, tmp_path, "after")
    assert code != 0, log  # still incomplete
    softmax = [r for r in doc["results"] if r["component"] == "softmax"]
    forward = [r for r in softmax if not _is_gradient(r["id"])]
    assert forward and {r["status"] for r in forward} == {"pass"}, forward
    # no softmax_vjp written and no autodiff: the gradient vectors are missing, not passed
    backward = [r for r in softmax if _is_gradient(r["id"])]
    assert backward and {r["status"] for r in backward} == {"missing"}, backward
    n_after = int(re.search(r"(\d+) spec function\(s\) missing", log).group(1))
    assert n_after == n_before - 1
    assert "softmax.softmax" not in log.split("spec function(s) missing")[1].split("\n=")[0]

    # the scaffold's __init__ refuses an option it does not read: one line, no suite run
    proc = _run([str(py), "-m", "attnspec.conformance.cli", "verify", "--backend", "stubby",
                 "--backend-option", "threads=4"], cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stdout + proc.stderr
    assert "unknown stubby backend option(s) ['threads']; known: none" in lines[0]
