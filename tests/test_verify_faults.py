"""Every fault a user can cause in ``attnspec verify`` ends in one clear line on stderr
and a non-zero exit, never a traceback, an INTERNALERROR or a silent pass.

Test backends are installed the way a user installs one: a module and a ``.dist-info``
with an ``attnspec.backends`` entry point, on PYTHONPATH."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

BACKENDS = '''
import time

import numpy as np
from attnspec.backends.numpy import NumpyBackend


class _Wrapped(NumpyBackend):
    """The NumPy backend with its softmax replaced by ``self.softmax``."""

    package = "attnspec.backends.numpy"

    def function(self, name, module):
        fn = super().function(name, module)
        return self.softmax(fn) if name == "softmax" else fn


class Hangs(_Wrapped):
    name = "hangs"

    def softmax(self, fn):
        def hang(*args, **kwargs):
            time.sleep(3600)
        return hang


class HangsInNativeCode(_Wrapped):
    """Blocks SIGALRM first, as native code that never returns to Python would ignore it."""

    name = "hangsnative"

    def softmax(self, fn):
        def hang(*args, **kwargs):
            import signal
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(3600)
        return hang


class Float64Out(_Wrapped):
    name = "float64out"

    def softmax(self, fn):
        return lambda *args, **kwargs: np.asarray(fn(*args, **kwargs), dtype=np.float64)
'''

MISSING_FRAMEWORK = '''
import no_such_framework_for_attnspec  # noqa: F401
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder for PYTHONPATH holding the test backends and their entry points."""
    d = tmp_path_factory.mktemp("site")
    (d / "faulty_backends.py").write_text(BACKENDS)
    (d / "needs_framework.py").write_text(MISSING_FRAMEWORK)
    info = d / "faulty_backends-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faulty-backends\nVersion: 0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [attnspec.backends]
        hangs = faulty_backends:Hangs
        hangsnative = faulty_backends:HangsInNativeCode
        float64out = faulty_backends:Float64Out
        needsframework = needs_framework:Backend
        """))
    return d


def verify(*args, cwd=None, env=None, timeout=300):
    """``attnspec verify`` in one process unless ``--jobs`` or ATTNSPEC_JOBS says otherwise."""
    env = {**os.environ, "ATTNSPEC_HYPOTHESIS_PROFILE": "ci", "ATTNSPEC_JOBS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def one_clear_line(p, *needles):
    """Non-zero exit, one line on stderr containing every needle, no traceback."""
    assert p.returncode != 0, p.stdout[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr[-3000:]
    assert lines[0].startswith("attnspec verify: error: "), lines
    for needle in needles:
        assert needle in lines[0], lines
    out = p.stdout + p.stderr
    assert "Traceback" not in out and "INTERNALERROR" not in out
    return lines[0]


@pytest.mark.parametrize(("args", "needles"), [
    (["--backend", "no-such-backend"], ["unknown backend 'no-such-backend'"]),
    (["--device", "tpu9"], ["device 'tpu9'", "available: cpu"]),
    (["--dtype", "float99"], ["float99", "float64, float32, float16, bfloat16"]),
    (["--dtype", "float16"], ["does not support float16", "float64, float32"]),
    (["--backend-option", "noequals"], ["'noequals'", "KEY=VALUE"]),
    (["--backend-option", "threads=4"], ["unknown numpy backend option", "threads"]),
    (["--json", "/nonexistent-dir/r.json"], ["/nonexistent-dir/r.json", "cannot write"]),
    (["--known-failures", "/nonexistent-dir/known.txt"], ["known.txt", "cannot be read"]),
], ids=["backend", "device", "dtype-unknown", "dtype-unsupported", "option-not-kv",
        "option-unknown", "json-unwritable", "known-missing"])
def test_a_bad_argument_is_one_line(args, needles):
    one_clear_line(verify(*args), *needles)


def test_a_backend_whose_framework_is_missing_is_one_line(site):
    p = verify("--backend", "needsframework", env={"PYTHONPATH": str(site)})
    one_clear_line(p, "backend 'needsframework' cannot be imported",
                   "no_such_framework_for_attnspec")


def test_a_known_failures_file_that_is_not_utf8_is_one_line(tmp_path):
    known = tmp_path / "known.txt"
    known.write_bytes("sdpa/basic-001  # caf\u00e9\n".encode("latin-1"))
    one_clear_line(verify("--known-failures", str(known)), str(known), "not UTF-8")


def test_a_known_failure_that_now_passes_is_reported(tmp_path):
    known = tmp_path / "known.txt"
    known.write_text("softmax/basic-001   # fixed since\n", encoding="utf-8")
    p = verify("-k", "softmax/basic-001", "--known-failures", str(known))
    assert p.returncode != 0, p.stdout[-2000:]
    assert "softmax/basic-001 now passes" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_a_pytest_ini_in_tmpdir_or_cwd_does_not_take_over(tmp_path):
    """verify used to take its rootdir (and so its pytest.ini) from the folder of its
    temporary JSON file; a user's config may add options the suite does not know."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option -x\n")
    (tmp_path / "conftest.py").write_text("raise SystemExit('a foreign conftest ran')\n")
    p = verify("-k", "softmax/basic-001", cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "rootdir: " + str(tmp_path) not in p.stdout


def test_a_hanging_backend_fails_naming_the_vector(site):
    p = verify("--backend", "hangs", "-k", "test_value and softmax/basic-001",
               env={"PYTHONPATH": str(site), "ATTNSPEC_TIMEOUT": "2"}, timeout=120)
    assert p.returncode != 0
    assert "softmax/basic-001" in p.stdout and "did not finish within 2 s" in p.stdout
    assert "Traceback" not in p.stdout + p.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="SIGALRM and pthread_sigmask are POSIX")
def test_a_backend_hanging_in_native_code_stops_the_run_in_one_line(site, tmp_path):
    """The alarm cannot interrupt it; the watchdog stops the run 10 s later (GRACE_SECONDS),
    and removes verify's temporary results file first (os._exit runs no ``finally``)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    p = verify("--backend", "hangsnative", "-k", "test_value and softmax/basic-001",
               env={"PYTHONPATH": str(site), "ATTNSPEC_TIMEOUT": "1", "TMPDIR": str(temp)},
               timeout=120)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "softmax/basic-001" in lines[0], p.stderr
    assert "cannot be interrupted" in lines[0] and "Traceback" not in p.stdout + p.stderr
    assert not [f.name for f in temp.iterdir() if f.name.startswith("attnspec-")]


def test_a_float32_request_answered_in_float64_fails(site, tmp_path):
    out = tmp_path / "r.json"
    p = verify("--backend", "float64out", "--dtype", "float32", "-k", "test_value and softmax/",
               "--json", str(out), env={"PYTHONPATH": str(site)})
    assert p.returncode != 0
    results = json.loads(out.read_text())["results"]
    assert results and all(r["status"] == "fail" for r in results)
    assert all("output 'y' is float64, the spec's dtype here is float32" in r["message"]
               for r in results)


NOISY_PLUGIN = '''
import sys


def pytest_configure(config):
    print("noisy_plugin: configured", file=sys.stderr)
'''


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_another_installed_pytest_plugin_takes_no_part(tmp_path, jobs):
    """A plugin installed beside attnspec (an entry point in ``pytest11``, as
    pytest-benchmark has) is loaded by a plain pytest run but not by verify's, nor by its
    xdist workers."""
    (tmp_path / "noisy_plugin.py").write_text(NOISY_PLUGIN)
    info = tmp_path / "noisy_plugin-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy-plugin\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nnoisy = noisy_plugin\n")
    env = {"PYTHONPATH": str(tmp_path)}
    plain = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, **env})
    assert "noisy_plugin: configured" in plain.stderr, plain.stderr  # the plugin is installed
    p = verify("-k", "test_golden and softmax/basic-001", "--jobs", jobs, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "noisy_plugin" not in p.stdout + p.stderr
