"""Known failures across the suite's families (issue 23): a vector's pattern covers its
differential test as well, a line may name a property test, and the outcomes of both
decide whether a line is stale.

The faulty backend is installed as a user installs one (a module and a ``.dist-info``
with an ``attnspec.backends`` entry point, on PYTHONPATH): the NumPy backend with a
softmax 0.1 % too large, which fails every softmax value vector, their differential
tests and the softmax properties."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

BACKENDS = '''
from attnspec.backends.numpy import NumpyBackend


class SoftmaxTooLarge(NumpyBackend):
    name = "softmaxtoolarge"
    package = "attnspec.backends.numpy"

    def function(self, name, module):
        fn = super().function(name, module)
        if name != "softmax":
            return fn
        return lambda *args, **kwargs: fn(*args, **kwargs) * (1 + 1e-3)


class Correct(NumpyBackend):
    """The NumPy backend under another class: the differential family runs on it."""
    name = "correctcopy"
    package = "attnspec.backends.numpy"
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("site")
    (d / "families_backends.py").write_text(BACKENDS)
    info = d / "families_backends-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: families-backends\nVersion: 0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [attnspec.backends]
        softmaxtoolarge = families_backends:SoftmaxTooLarge
        correctcopy = families_backends:Correct
        """))
    return d


def verify(site, tmp_path, backend, k, known_text):
    known, out = tmp_path / "known.txt", tmp_path / "r.json"
    known.write_text(known_text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "ATTNSPEC_HYPOTHESIS_PROFILE": "quick", "ATTNSPEC_JOBS": "1"}
    p = subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
                        backend, "-k", k, "--known-failures", str(known), "--json", str(out)],
                       capture_output=True, text=True, timeout=600, env=env)
    return p, json.loads(out.read_text()) if out.exists() else None


def _xfailed(stdout: str) -> int:
    """The known failures of a run: the count in pytest's summary line."""
    found = re.search(r"(\d+) xfailed", stdout)
    return int(found.group(1)) if found else 0


VECTORS = "softmax and (golden or differential or completeness)"
PROPERTIES = "test_properties_softmax or completeness"


def test_a_vector_pattern_covers_its_differential_test(site, tmp_path):
    p, doc = verify(site, tmp_path, "softmaxtoolarge", VECTORS, "softmax/*  # 0.1 % too large\n")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    differential = [o for o in doc["outcomes"] if o["test"] == "test_against_numpy"]
    failed = {o["id"] for o in differential if o["status"] == "fail"}
    assert "softmax/basic-001" in failed  # (a fully masked row's zeros stay zeros: passes)
    assert failed <= {r["id"] for r in doc["results"] if r["status"] == "fail"}
    assert _xfailed(p.stdout) >= len(failed), p.stdout[-2000:]


def test_without_the_pattern_the_differential_test_fails(site, tmp_path):
    p, doc = verify(site, tmp_path, "softmaxtoolarge", "softmax and differential", "")
    assert p.returncode != 0
    assert "test_against_numpy" in p.stdout and "FAILED" in p.stdout


def test_a_line_may_name_a_property_test(site, tmp_path):
    p, doc = verify(site, tmp_path, "softmaxtoolarge", PROPERTIES, "")
    failing = sorted({o["id"] for o in doc["outcomes"] if o["status"] == "fail"})
    assert p.returncode != 0 and failing, p.stdout[-3000:]
    # a failure names the backend, the spec function and the dtype, prints full precision
    # (1.001 against 1.0, not alike) and the command that reruns the one test
    assert "softmaxtoolarge softmax at float64" in p.stdout
    assert "1.001 (ACTUAL), 1.0 (DESIRED)" in p.stdout
    assert (f"--hypothesis-profile quick -k {failing[0]}" in p.stdout
            and "attnspec verify --backend softmaxtoolarge --device cpu" in p.stdout)
    assert "@reproduce_failure" not in p.stdout
    lines = "".join(f"{name}[float*]  # 0.1 % too large\n" for name in failing)
    p, doc = verify(site, tmp_path, "softmaxtoolarge", PROPERTIES, lines)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert _xfailed(p.stdout) >= len(failing), p.stdout[-2000:]


def test_a_line_naming_no_vector_and_no_property_test_is_reported(site, tmp_path):
    p, _ = verify(site, tmp_path, "correctcopy", "completeness",
                  "test_no_such_property_anywhere  # stale\n")
    assert p.returncode != 0
    assert "test_no_such_property_anywhere" in p.stdout + p.stderr


def test_a_vector_line_whose_differential_tests_pass_too_is_stale(site, tmp_path):
    p, doc = verify(site, tmp_path, "correctcopy", "softmax/basic and (golden or differential)",
                    "softmax/basic-001  # not a failure\n")
    assert p.returncode != 0
    assert doc["stale_known_failures"] and "softmax/basic-001" in doc["stale_known_failures"][0]
    assert {o["status"] for o in doc["outcomes"]} == {"pass"}
