"""The input checks are written once (backends/_checks.py): the same bad input raises the
same error class with the same message in every backend. Each framework runs in its own
process (torch and tensorflow never share one); one not installed here is left to its own
tox environment (tests/torch, tests/tensorflow, tests/jax run the same comparison there)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.same_errors import outcomes

ROOT = Path(__file__).resolve().parents[1]


def test_numpy_raises_the_spec_errors_for_the_bad_inputs():
    got = outcomes("numpy")
    assert "no error" not in got.values(), [c for c, o in got.items() if o == "no error"]
    assert got["sdpa-bias-float32"] == "DTypeError: bias has dtype float32 but q has float64"
    assert got["additive-w_q-float32"] == "DTypeError: w_q has dtype float32 but query has float64"
    assert got["gru-w_ih-float32"] == "DTypeError: w_ih has dtype float32 but w_hh has float64"


@pytest.mark.parametrize("framework, module", [("torch", "torch"), ("tensorflow", "tensorflow"),
                                               ("jax", "jax")])
def test_a_framework_raises_what_numpy_raises(framework, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here (tox -e {framework}-cpu compares it)")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-m", "tests.same_errors", framework], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == outcomes("numpy")
