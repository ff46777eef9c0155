"""ATTNSPEC_REQUIRE turns a missing framework into an error, not a skip (tests/conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _pytest(require: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ATTNSPEC_REQUIRE": require}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(HERE / "test_shards.py::test_auto_jobs_is_at_least_one")],
                          capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=300)


def test_a_required_framework_that_is_missing_stops_the_run():
    p = _pytest("json, attnspec_no_such_framework")
    assert p.returncode != 0 and "attnspec_no_such_framework" in p.stdout + p.stderr


def test_required_frameworks_that_are_installed_change_nothing():
    p = _pytest("json")
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
