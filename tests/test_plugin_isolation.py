"""Installing attnspec changes nothing in another project's pytest runs.

attnspec's pytest plugin is loaded into every pytest run where attnspec is installed.
An unrelated project with its own ``--device``/``--backend``/``--dtype`` options, its
own fixtures named like the suite's, and hypothesis tests must run exactly as it does
without the plugin (``-p no:attnspec``): same options, same hypothesis settings, no
attnspec header, none of the suite's fixtures."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

CONFTEST = '''
import pytest


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu")
    parser.addoption("--backend", default="theirs")
    parser.addoption("--dtype", default="int8")


@pytest.fixture
def device(request):
    return request.config.getoption("--device")
'''

TESTS = '''
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

RECORD = os.environ["RECORD"]
calls = []


@given(st.integers())
def test_examples(x):
    calls.append(x)


def test_record(request, device):
    s = settings.default
    missing = []
    for name in ("backend", "spec", "ops", "record_result", "attnspec_session"):
        try:
            request.getfixturevalue(name)
        except pytest.FixtureLookupError:
            missing.append(name)
    with open(RECORD, "w") as f:
        json.dump({"examples": len(calls), "profile": settings.get_current_profile_name(),
                   "max_examples": s.max_examples, "derandomize": s.derandomize,
                   "deadline": str(s.deadline), "database": s.database is not None,
                   "device": device, "backend": request.config.getoption("--backend"),
                   "dtype": request.config.getoption("--dtype"), "missing": missing}, f)
'''


# Hypothesis loads its own built-in `ci` profile (derandomized, 100 examples) where it
# detects a CI machine (`CI`, or tox's `__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI`...), and
# `default` elsewhere; the plugin must leave either one alone.
HYPOTHESIS_OWN = {"": False, "true": True}


def _run(project, record, ci, *extra):
    # ATTNSPEC_* set as in tox: they must not reach outside the suite either
    env = {**os.environ, "RECORD": str(record), "ATTNSPEC_HYPOTHESIS_PROFILE": "ci",
           "ATTNSPEC_BACKEND": "torch", "ATTNSPEC_DEVICE": "cuda"}
    env.pop("PYTEST_ADDOPTS", None)
    for name in ("CI", "__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI"):
        env.pop(name, None)
    if ci:
        env["CI"] = ci
    own = subprocess.run([sys.executable, "-c", "from hypothesis import settings; "
                          "print(settings.get_current_profile_name())"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                        "no:randomly", "--device", "cuda:1", "--backend", "jax", "--dtype",
                        "int4", "test_theirs.py", *extra], cwd=project, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout, {**json.loads(record.read_text()), "hypothesis_own": own}


@pytest.mark.parametrize("ci", list(HYPOTHESIS_OWN), ids=["local", "ci-machine"])
def test_another_project_runs_untouched(tmp_path, ci):
    project = tmp_path / "theirs"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (project / "test_theirs.py").write_text(textwrap.dedent(TESTS))
    with_plugin_out, with_plugin = _run(project, tmp_path / "with.json", ci)
    _, without = _run(project, tmp_path / "without.json", ci, "-p", "no:attnspec")
    assert "attnspec" in with_plugin_out  # the plugin was loaded ("plugins: attnspec-...")
    assert with_plugin == without
    assert with_plugin["device"] == "cuda:1" and with_plugin["backend"] == "jax"
    assert with_plugin["dtype"] == "int4"
    # hypothesis's own profile, not attnspec's `attnspec-ci` (20 derandomized examples)
    own = with_plugin["hypothesis_own"]
    if HYPOTHESIS_OWN[ci]:  # elsewhere another CI variable may still make it `ci`
        assert own == "ci"
    assert with_plugin["profile"] == own and with_plugin["examples"] == 100
    assert with_plugin["derandomize"] is (own == "ci")
    # the suite's fixtures do not leak (`device` is the project's own)
    assert with_plugin["missing"] == ["backend", "spec", "ops", "record_result",
                                      "attnspec_session"]
    assert "attnspec:" not in with_plugin_out  # no report header lines
