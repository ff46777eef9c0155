"""Every fault a user can cause on the command line ends in one clear line and a
non-zero exit, never a traceback or a silent pass (verify's faults: tests/test_cli.py).

Each test runs ``attnspec`` as a user does, in a subprocess; none imports a framework.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attnspec.spec.vectors import MANIFEST, content_hash

CLI = [sys.executable, "-m", "attnspec.conformance.cli"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def attnspec(*args, prelude: str | None = None, cwd=None):
    """Run the command line; ``prelude`` is Python run first in the same process
    (to hide an installed package, or to plant a bug)."""
    if prelude is None:
        cmd = [*CLI, *args]
    else:
        cmd = [sys.executable, "-c", f"{prelude}\nimport sys\nfrom attnspec.conformance.cli "
                                     f"import main\nsys.exit(main({list(args)!r}))"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV, cwd=cwd)


def one_error_line(p, command: str, code: int = 2) -> str:
    """The single stderr line of a failed command (exit ``code``; a usage error, 2, starts
    with the command's name), and no traceback."""
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    if code == 2:
        assert lines[0].startswith(f"attnspec {command}: error: "), lines[0]
    return lines[0]


# -- the vector directory ------------------------------------------------------------------




def _rewrite(d: Path, name: str, edit) -> None:
    """Edit a file's JSON, then re-hash its vectors and the manifest, as a careless
    hand edit or a broken generator would: only the structure is wrong."""
    doc = json.loads((d / name).read_text())
    edit(doc)
    for v in doc["vectors"]:
        if isinstance(v, dict):
            v["sha256"] = content_hash(v)
    (d / name).write_text(json.dumps(doc))
    manifest = json.loads((d / MANIFEST).read_text())
    manifest["files"][name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    (d / MANIFEST).write_text(json.dumps(manifest))


def _vec(doc: dict, vid: str) -> dict:
    return next(v for v in doc["vectors"] if v["id"] == vid)


def test_the_small_directory_loads(vectors):
    p = attnspec("list", "--vectors-dir", str(vectors))
    assert p.returncode == 0, p.stderr
    ids = {line.split()[0] for line in p.stdout.splitlines()}
    assert "softmax/basic-001" in ids and "masks/causal-001" in ids


def test_a_file_dropped_from_the_manifest_is_named(vectors):
    manifest = json.loads((vectors / MANIFEST).read_text())
    del manifest["files"]["masks.json"]
    (vectors / MANIFEST).write_text(json.dumps(manifest))
    line = one_error_line(attnspec("list", "--vectors-dir", str(vectors)), "list")
    assert "masks.json" in line and "not listed in MANIFEST.json" in line


def test_a_manifest_entry_without_its_file_is_named(vectors):
    (vectors / "masks.json").unlink()
    line = one_error_line(attnspec("show", "softmax/basic-001", "--vectors-dir", str(vectors)),
                          "show")
    assert "MANIFEST.json lists masks.json" in line and "does not exist" in line


@pytest.mark.parametrize("edit,says", [
    (lambda doc: doc["vectors"][0].pop("dtypes"),
     "file softmax.json: vector softmax/basic-001: field 'dtypes' is missing"),
    (lambda doc: _vec(doc, "softmax/mask-001").__setitem__("outputs", [1.0, 2.0]),
     "file softmax.json: vector softmax/mask-001: field 'outputs' must be an object, got list"),
    (lambda doc: doc["vectors"][0]["inputs"]["x"].pop("shape"),
     "file softmax.json: vector softmax/basic-001: field 'inputs.x' is not a tensor"),
    (lambda doc: doc["vectors"][0].__setitem__("function", "softmaxx"),
     "file softmax.json: vector softmax/basic-001: field 'function': 'softmaxx' is not one"),
    (lambda doc: doc["vectors"][0]["tolerances"].pop("float32"),
     "file softmax.json: vector softmax/basic-001: field 'tolerances': no {rtol, atol} for "
     "dtype 'float32'"),
    (lambda doc: doc.pop("functions"), "file softmax.json: field 'functions' is missing"),
])
def test_structurally_wrong_vector_json_names_file_vector_and_field(vectors, edit, says):
    _rewrite(vectors, "softmax.json", edit)
    line = one_error_line(attnspec("show", "masks/causal-001", "--vectors-dir", str(vectors)),
                          "show")
    assert says in line, line
    assert "no such vector" not in line


# -- arguments -----------------------------------------------------------------------------


def test_list_an_unknown_component_names_the_known_ones():
    line = one_error_line(attnspec("list", "--component", "nosuch"), "list")
    assert "'nosuch'" in line and "sdpa" in line and "layer_norm" in line


def test_cite_an_unknown_target():
    line = one_error_line(attnspec("cite", "nosuch"), "cite")
    assert "'nosuch'" in line and "softmax" in line
    line = one_error_line(attnspec("cite", "sdpa/basci-001"), "cite")
    assert "no such vector 'sdpa/basci-001'" in line and "sdpa/basic-001" in line


def test_a_usage_fault_is_one_line():
    p = attnspec("list", "--no-such-option")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "attnspec: error: unrecognized arguments: --no-such-option (see `attnspec --help`)"]


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_report_with_no_backends_is_refused(tmp_path, value):
    line = one_error_line(attnspec("report", "--backends", value, "--out", str(tmp_path / "r")),
                          "report")
    assert "names no backend" in line
    assert not (tmp_path / "r").exists()


# -- files in the way ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npz", "json"])
def test_export_refuses_to_overwrite_without_force(tmp_path, fmt):
    out = tmp_path / f"v.{fmt}"
    out.write_text("mine")
    line = one_error_line(attnspec("export", "sdpa/basic-001", "--format", fmt, "--out",
                                   str(out)), "export")
    assert str(out) in line and "--force" in line
    assert out.read_text() == "mine"
    p = attnspec("export", "sdpa/basic-001", "--format", fmt, "--out", str(out), "--force")
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() != b"mine"


def test_export_default_name_is_refused_too(tmp_path):
    (tmp_path / "sdpa-basic-001.npz").write_text("mine")
    line = one_error_line(attnspec("export", "sdpa/basic-001", cwd=tmp_path), "export")
    assert "sdpa-basic-001.npz exists" in line


def test_report_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.md").write_text("mine")
    line = one_error_line(attnspec("report", "--backends", "numpy", "--out", str(out)), "report")
    assert str(out / "report.md") in line and "--force" in line
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]  # nothing run, nothing left


# -- optional extras -----------------------------------------------------------------------


def test_generate_without_the_oracle_names_the_extra(tmp_path):
    p = attnspec("generate", "--check", prelude="import sys; sys.modules['mpmath'] = None")
    line = one_error_line(p, "generate")
    assert "pip install 'attnspec[oracle]'" in line and "mpmath" in line


def test_show_plot_without_matplotlib_names_the_extra(tmp_path):
    out = tmp_path / "w.png"
    p = attnspec("show", "sdpa/basic-001", "--plot", str(out),
                 prelude="import sys; sys.modules['matplotlib'] = None")
    line = one_error_line(p, "show")
    assert "pip install 'attnspec[plot]'" in line and "matplotlib" in line
    assert not out.exists() and p.stdout == ""  # refused before printing the vector


# -- a bug in attnspec ---------------------------------------------------------------------


def test_an_internal_error_keeps_its_traceback_and_says_it_is_a_bug():
    p = attnspec("list", prelude="import attnspec.conformance.cli as c\n"
                                 "def broken(args):\n    return {}['planted']\n"
                                 "c.cmd_list = broken")
    assert p.returncode == 3, p.stderr
    assert "Traceback" in p.stderr and "KeyError: 'planted'" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(
        "attnspec list: internal error: this is a bug in attnspec")


# -- stopping `attnspec report` ------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_report_kills_the_child_and_leaves_nothing(tmp_path, sig, code):
    out = tmp_path / "out"
    # SIGINT back to its default in the child: a shell's background job (`tox &`) starts
    # with SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([*CLI, "report", "--backends", "numpy,numpy", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until the first child runs the suite
        if "numpy/cpu | " in line or time.monotonic() > deadline:
            break
    children = _children(proc.pid)
    assert children, "the report started no child"
    assert list(out.glob(".report-partial-*"))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted: no report written" in err and "Traceback" not in err
    assert list(out.iterdir()) == []  # neither report files nor the partial directory
    time.sleep(0.2)
    assert not [c for c in children if _alive(c)], "a child outlived the report"
