"""The Python API for a notebook (issue 24, item 1): ``check(fn_or_class, component=...)``
with the command's options, a result whose notebook display is a table."""

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from attnspec.conformance.notebook import CheckResult, check


def attention_1e9(q, k, v, mask=None):
    """-1e9 fills: a fully masked row averages the values instead of giving zeros."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -1e9)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return w @ v, w


def test_a_result_with_rows_and_counts():
    r = check(attention_1e9, "sdpa", k="basic-001 or fully-masked-001")
    assert isinstance(r, CheckResult) and not r.ok and not r
    assert (r.passed, r.failed, r.skipped) == (1, 1, 0)
    row = next(x for x in r.rows if x["id"] == "sdpa/fully-masked-001")
    assert row["status"] == "fail" and row["output"] in ("output", "weights")
    assert row["expected"] == 0.0 and row["got"] != 0.0 and row["max_abs_err"] > 0.1
    assert len(row["index"]) == 3
    assert "FAIL  sdpa/fully-masked-001" in repr(r) and "1 passed, 1 failed" in r.text


def test_the_notebook_display_is_a_table():
    html = check(attention_1e9, "sdpa", k="basic-001 or fully-masked-001")._repr_html_()
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    assert len(rows) == 3  # a header and one per vector
    assert "<th>expected</th><th>got</th>" in rows[0]
    fail = next(x for x in rows if "fully-masked-001" in x)
    assert ">FAIL<" in fail and re.search(r"<td>\S+\(\d+, 1, \d+\)</td><td>0</td>", fail), fail
    assert "NOT OK" in html


def test_options_are_the_commands():
    r = check(attention_1e9, component="sdpa", variant=["scale=1.0"], strict=True)
    assert r.rows and all(x["id"].startswith("sdpa/") for x in r.rows)
    assert all(x["status"] == "skip" for x in r.rows) and not r.ok  # scale not taken
    assert check(attention_1e9, "sdpa", k="basic-001").ok


def test_a_class_and_a_bad_component():
    class Softmax:
        def __call__(self, x, axis=-1):
            e = np.exp(x - np.max(x, axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)

    assert check(Softmax, "softmax", k="basic").passed > 0
    from attnspec.conformance.check import CheckError

    with pytest.raises(CheckError, match="unknown component 'spda'"):
        check(Softmax, "spda")


def test_the_timeout_holds_in_the_notebooks_process():
    def sleeps(q, k, v):
        time.sleep(30)

    t0 = time.perf_counter()
    r = check(sleeps, "sdpa", k="basic-001", timeout=0.5)
    assert time.perf_counter() - t0 < 10
    assert r.rows[0]["message"].startswith("timed out after 0.5 s")


def test_importing_the_api_is_cheap():
    """The API module imports no framework and no vector file."""
    code = ("import sys, attnspec.conformance.notebook\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stderr
