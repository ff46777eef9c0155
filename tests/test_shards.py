"""``attnspec verify --jobs N``: the split is a partition that keeps a (component, dtype)
together, the parts' results merge into the one-process results, staleness is judged
over every part, and a bad count is one line."""

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from attnspec.conformance.plugin import SuiteConfigError
from attnspec.conformance.shards import PROPERTY_WEIGHT, assign, merge, parse_jobs, parse_shard, split

from .test_cli import attnspec
from .test_cli_faults import CLI, ENV, _alive, _children
from .test_known_failures import _vectors_with_a_wrong_expectation


def _item(nodeid, vector=None, dtype=None, suite=True):
    params = ({"vector_dtype": (SimpleNamespace(component=vector, params={}), dtype)}
              if vector else {})
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params), suite=suite)


ITEMS = ([_item(f"test_golden.py::test_value[sdpa/{i}[{d}]]", "sdpa", d)
          for i in range(9) for d in ("float64", "float32")]
         + [_item(f"test_errors.py::test_error[mha/{i}[float64]]", "mha", "float64")
            for i in range(4)]
         + [_item(f"test_properties_softmax.py::test_p{i}") for i in range(5)]
         + [_item("test_properties_attributes.py::test_eps[a]"),
            _item("test_properties_attributes.py::test_eps[b]"),
            _item("user_tests.py::test_mine", suite=False)])


@pytest.mark.parametrize("count", [1, 2, 3, 5, 40])
def test_the_parts_partition_the_suite_and_keep_a_group_together(count):
    parts = [split(ITEMS, (i, count), "float64", lambda it: it.suite) for i in range(1, count + 1)]
    suite = [it for it in ITEMS if it.suite]
    kept = [[it for it in k if it.suite] for k, _ in parts]
    assert sorted(id(it) for k in kept for it in k) == sorted(id(it) for it in suite)
    for k, dropped in parts:  # a test outside the suite is never deselected
        assert ITEMS[-1] in k and ITEMS[-1] not in dropped
        assert len(k) + len(dropped) == len(ITEMS)
    where: dict = {}  # (component, dtype) or test function -> the parts it ran in
    for i, k in enumerate(kept):
        for it in k:
            vector_dtype = it.callspec.params.get("vector_dtype")
            key = ((vector_dtype[0].component, vector_dtype[1]) if vector_dtype
                   else it.nodeid.split("[")[0])
            where.setdefault(key, set()).add(i)
    assert where and all(len(parts_of) == 1 for parts_of in where.values()), where


def test_the_split_balances_largest_first():
    part = assign({"a": 10, "b": 9, "c": 6, "d": 4, "e": 1}, 2)
    load = [sum(w for k, w in {"a": 10, "b": 9, "c": 6, "d": 4, "e": 1}.items() if part[k] == i)
            for i in range(2)]
    assert sorted(load) == [15, 15]
    assert part == assign(dict(reversed(list({"a": 10, "b": 9, "c": 6, "d": 4, "e": 1}.items()))), 2)
    assert PROPERTY_WEIGHT > 1  # a hypothesis test outweighs one vector


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_names_the_option(text):
    with pytest.raises(SuiteConfigError, match="--attnspec-shard"):
        parse_shard(text)


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5"])
def test_a_bad_job_count_names_the_option(text):
    with pytest.raises(SuiteConfigError, match="--jobs"):
        parse_jobs(text)


def test_auto_jobs_is_at_least_one():
    assert 1 <= parse_jobs("auto") <= 8 and parse_jobs("3") == 3


def _sessions(stdout: str) -> int:
    """How many pytest sessions ran tests (their closing "N passed ... in T s" lines)."""
    return len(re.findall(r"^=+ \d+ passed.* in [0-9.]+s", stdout, re.M))


def _results(doc):
    return sorted((r["id"], r["dtype"], r["status"]) for r in doc["results"])


def test_two_parts_give_the_results_of_one_process(tmp_path):
    k = "softmax or sdpa or completeness"
    one = attnspec("verify", "-k", k, "--jobs", "1", "--json", str(tmp_path / "one.json"))
    two = attnspec("verify", "-k", k, "--jobs", "2", "--json", str(tmp_path / "two.json"))
    assert one.returncode == 0 and two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "two.json"))
    assert _results(a) == _results(b) and len(_results(a)) > 100
    assert b["jobs"] == 2 and "shard" not in b and "part 2/2" in two.stdout
    assert _sessions(two.stdout) == 2  # each part ran tests of its own


def test_a_failure_in_one_part_fails_the_run(tmp_path):
    vectors = _vectors_with_a_wrong_expectation(tmp_path)
    p = attnspec("verify", "-k", "softmax or sdpa", "--dtype", "float64", "--jobs", "2",
                 "--vectors-dir", str(vectors), "--json", str(tmp_path / "r.json"))
    assert p.returncode == 1, p.stdout[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["id"] for r in doc["results"] if r["status"] == "fail"] == ["softmax/basic-001"]


def test_staleness_is_judged_over_every_part(tmp_path):
    """``*[float64]`` matches the failing softmax vector in one part and only passing sdpa
    vectors in the other (two groups, two parts): the failure is known, and the pattern is
    not stale."""
    vectors = _vectors_with_a_wrong_expectation(tmp_path)
    known = tmp_path / "known.txt"
    known.write_text("*[float64]   # everything at float64, for this test\n")
    k = "(softmax or sdpa) and (golden or errors)"  # the groups softmax[float64], sdpa[float64]
    p = attnspec("verify", "-k", k, "--dtype", "float64", "--jobs", "2",
                 "--vectors-dir", str(vectors), "--known-failures", str(known))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "stale known failure" not in p.stdout + p.stderr
    assert _sessions(p.stdout) == 2  # each part ran one group
    known.write_text("softmax/large-001[float64]   # passes: stale\n")
    p = attnspec("verify", "-k", k, "--dtype", "float64", "--jobs", "2",
                 "--known-failures", str(known))
    assert p.returncode == 1 and "stale known failure" in p.stderr


def test_a_bad_job_count_is_one_line():
    p = attnspec("verify", "--jobs", "0")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--jobs '0'" in p.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_verify_stops_every_part(sig, code):
    # SIGINT back to its default in the child (a background job starts with it ignored)
    proc = subprocess.Popen([*CLI, "verify", "--jobs", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until part 1 runs tests
        if line.startswith("test_") or time.monotonic() > deadline:
            break
    parts = _children(proc.pid)
    assert len(parts) == 2, parts
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(0.2)
    assert not [c for c in parts if _alive(c)], "a part outlived verify"


class _NoKnown:
    def stale_known_failures(self, results):
        return []


def _part(tmp_path, i, code, rows, text=""):
    path = tmp_path / f"p{i}.json"
    if rows is not None:
        path.write_text(json.dumps({"backend": "x", "device": "cpu", "results": rows}))
    return code, text, path


@pytest.mark.parametrize("codes,status", [((0, 0), 0), ((0, 1), 1), ((5, 0), 0), ((5, 5), 5),
                                          ((0, -11), 139), ((1, 3), 3)])
def test_the_run_fails_when_any_part_does(tmp_path, codes, status):
    row = {"id": "softmax/basic-001", "dtype": "float64", "status": "pass"}
    parts = [_part(tmp_path, i, c, [row]) for i, c in enumerate(codes)]
    doc, got, _ = merge(parts, _NoKnown())
    assert got == status and doc["exitstatus"] == status and len(doc["results"]) == 2


def test_a_part_that_wrote_no_results_is_named(tmp_path):
    parts = [_part(tmp_path, 0, 0, []), _part(tmp_path, 1, -9, None, "test_x.py ...\nKilled\n\n")]
    doc, status, why = merge(parts, _NoKnown())
    assert doc is None and status == 137 and why.startswith("part 2/2 did not finish")
    assert why.endswith(": Killed")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_verify_stopped_by_sigterm_leaves_no_temporary_files(tmp_path, jobs):
    env = {**ENV, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([*CLI, "verify", "--jobs", jobs], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until the suite runs tests
        if line.startswith("test_") or time.monotonic() > deadline:
            break
    assert list(tmp_path.iterdir()), "verify made no temporary file or folder"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode in (143, -signal.SIGTERM)
    assert list(tmp_path.iterdir()) == []
