"""``attnspec verify --jobs N`` on pytest-xdist (``-n N --dist loadgroup``): every suite
test carries its family marker and an xdist group that keeps a (component, dtype) in one
worker, the workers' results merge on the controller into the one-process results,
staleness and the exit status are judged there, the suite spreads over two hosts
(``--tx``), and a bad or too large count is one line."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attnspec.conformance import jobs
from attnspec.conformance.cli import pytest_args
from attnspec.conformance.plugin import FAMILIES, SUITE_DIR

from .test_cli import attnspec
from .test_cli_faults import CLI, ENV, _alive, _children
from .test_known_failures import _vectors_with_a_wrong_expectation


def _results(doc):
    return sorted((r["id"], r["dtype"], r["status"], r["max_ulp"]) for r in doc["results"])


def _pytest(*args, json_path=None):
    """The suite straight through pytest, as a user of the plugin runs it."""
    argv = pytest_args("numpy", "cpu", None, json_path, args)
    return subprocess.run([sys.executable, "-m", "pytest", *argv], capture_output=True,
                          text=True, timeout=600, cwd=SUITE_DIR, env=ENV)


def test_the_families_are_picked_by_marker():
    """``-m FAMILY`` selects exactly the tests of the family's modules; every suite test
    carries one family marker."""
    p = _pytest("--collect-only", "-q", "--attnspec-dtype=float64", "-m",
                "golden or errors or completeness")
    ids = [ln for ln in p.stdout.splitlines() if "::" in ln]
    assert p.returncode == 0 and ids, p.stdout[-2000:] + p.stderr[-2000:]
    modules = {i.split("::")[0].rpartition("/")[2] for i in ids}
    assert modules == {"test_golden.py", "test_errors.py", "test_contract_errors.py",
                       "test_completeness.py"}
    everything = _pytest("--collect-only", "-q", "--attnspec-dtype=float64")
    rest = _pytest("--collect-only", "-q", "--attnspec-dtype=float64", "-m",
                   "not (" + " or ".join(FAMILIES) + ")")
    assert rest.returncode == 5 and "deselected" in rest.stdout, rest.stdout[-1000:]
    assert len([ln for ln in everything.stdout.splitlines() if "::" in ln]) > len(ids)


def test_two_workers_give_the_results_of_one_process(tmp_path):
    k = "(softmax or sdpa or completeness) and not stress"  # the stress family: its own runs
    one = attnspec("verify", "-k", k, "--jobs", "1", "--json", str(tmp_path / "one.json"))
    two = attnspec("verify", "-k", k, "--jobs", "2", "--json", str(tmp_path / "two.json"))
    assert one.returncode == 0 and two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "two.json"))
    assert _results(a) == _results(b) and len(_results(a)) > 100
    assert "jobs" not in a and b["jobs"] == 2 and b["workers"] == ["gw0", "gw1"]
    assert "2 workers [" in two.stdout and "pytest-xdist" in two.stdout
    assert one.stdout.split("attnspec 1")[-1] == two.stdout.split("attnspec 1")[-1]  # the table


def test_the_suite_spreads_over_two_hosts_keeping_each_group_on_one(tmp_path):
    """xdist's ``--tx``: two local ``popen`` gateways stand for two hosts (``ssh=HOST``
    gateways take the same options); the controller merges both hosts' results."""
    out = tmp_path / "r.json"
    p = _pytest("-v", "--tx", "popen//id=hostA", "--tx", "popen//id=hostB", "--dist",
                "loadgroup", "-k", "(softmax/ or layer_norm/) and (golden or errors)",
                json_path=str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    # "[hostA] [ 87%] PASSED test_golden.py::test_value[softmax/empty-001[float64]]", with
    # "@softmax:float64" after it where pytest shows xdist's group in the node id
    ran = re.findall(r"^\[(host[AB])\] .*PASSED (\S+?\[(\w+)/\S+\[(float\d+)\]\])(?:@\S+)?\s*$",
                     p.stdout, re.M)
    where: dict = {}
    for host, _, component, dtype in ran:
        where.setdefault(f"{component}:{dtype}", set()).add(host)
    assert {h for h, *_ in ran} == {"hostA", "hostB"}, p.stdout[-2000:]
    assert set(where) == {"softmax:float64", "softmax:float32", "layer_norm:float64",
                          "layer_norm:float32"}
    assert all(len(hosts) == 1 for hosts in where.values()), where
    doc = json.loads(out.read_text())
    assert doc["workers"] == ["hostA", "hostB"] and len(doc["results"]) == len(ran)
    assert {r["component"] for r in doc["results"]} == {"softmax", "layer_norm"}


def test_a_failure_in_one_worker_fails_the_run(tmp_path):
    vectors = _vectors_with_a_wrong_expectation(tmp_path)
    p = attnspec("verify", "-k", "(softmax or sdpa) and not stress", "--dtype", "float64", "--jobs", "2",
                 "--vectors-dir", str(vectors), "--json", str(tmp_path / "r.json"))
    assert p.returncode == 1, p.stdout[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["id"] for r in doc["results"] if r["status"] == "fail"] == ["softmax/basic-001"]
    assert doc["exitstatus"] == 1 and doc["jobs"] == 2


def test_staleness_is_judged_over_every_worker(tmp_path):
    """``*[float64]`` matches the failing softmax vector in one worker and only passing
    sdpa vectors in the other (two groups, two workers): the failure is known, and the
    pattern is not stale."""
    vectors = _vectors_with_a_wrong_expectation(tmp_path)
    known = tmp_path / "known.txt"
    known.write_text("*[float64]   # everything at float64, for this test\n")
    k = "(softmax or sdpa) and (golden or errors) and not stress"  # groups softmax[float64], sdpa[float64]
    out = tmp_path / "r.json"
    p = attnspec("verify", "-k", k, "--dtype", "float64", "--jobs", "2", "--json", str(out),
                 "--vectors-dir", str(vectors), "--known-failures", str(known))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "stale known failure" not in p.stdout + p.stderr
    doc = json.loads(out.read_text())
    assert doc["workers"] == ["gw0", "gw1"]
    assert [r["id"] for r in doc["results"] if r.get("known_failure")] == ["softmax/basic-001"]
    known.write_text("softmax/large-001[float64]   # passes: stale\n")
    p = attnspec("verify", "-k", k, "--dtype", "float64", "--jobs", "2",
                 "--known-failures", str(known))
    assert p.returncode == 1 and "stale known failure" in p.stderr


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5", ""])
def test_a_bad_job_count_names_the_option(text):
    with pytest.raises(jobs.JobsError, match="--jobs"):
        jobs.parse_jobs(text)


def test_a_bad_job_count_is_one_line():
    p = attnspec("verify", "--jobs", "0")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--jobs '0'" in p.stderr


def test_auto_jobs_is_at_least_one():  # tests/test_required_frameworks.py runs this one
    count, line = jobs.parse_jobs("auto")
    assert 1 <= count <= jobs.MAX_AUTO_JOBS and line is None


def test_the_job_count_is_bounded_by_the_cpus_and_the_memory(monkeypatch):
    monkeypatch.setattr(jobs, "usable_cpus", lambda: 4)
    monkeypatch.setattr(jobs, "available_memory", lambda: 64 << 30)
    assert jobs.parse_jobs("3") == (3, None) and jobs.parse_jobs("auto") == (4, None)
    count, line = jobs.parse_jobs("1000")
    assert count == 4 and line.startswith("--jobs 1000 is more than") and "4 usable" in line
    monkeypatch.setattr(jobs, "available_memory", lambda: 2 * jobs.BYTES_PER_JOB + 1)
    assert jobs.parse_jobs("auto") == (2, None) and jobs.parse_jobs("3")[0] == 2
    monkeypatch.setattr(jobs, "available_memory", lambda: 0)
    assert jobs.parse_jobs("auto") == (1, None)
    monkeypatch.setattr(jobs, "usable_cpus", lambda: 64)
    monkeypatch.setattr(jobs, "available_memory", lambda: None)
    assert jobs.parse_jobs("auto") == (jobs.MAX_AUTO_JOBS, None)


def test_a_job_count_above_the_bound_is_clamped_with_one_line():
    most, _ = jobs.bound()
    p = attnspec("verify", "--jobs", "1000", "-k", "softmax/basic-001")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "--jobs 1000 is more than this machine can run" in p.stderr
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("attnspec")]
    assert len(ours) == 1 and ours[0].endswith(f"running {most}"), p.stderr


def _wait_for_tests(proc, deadline=120):
    end = time.monotonic() + deadline
    for line in proc.stdout:  # xdist prints "N workers [M items]" when they start
        if re.search(r"workers \[\d+ items\]", line) or time.monotonic() > end:
            return
    raise AssertionError("verify ended before its workers started")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_verify_stops_every_worker(sig, code):
    # SIGINT back to its default in the child (a background job starts with it ignored)
    proc = subprocess.Popen([*CLI, "verify", "--jobs", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for_tests(proc)
    workers = _children(proc.pid)
    assert len(workers) == 2, workers
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(0.2)
    assert not [c for c in workers if _alive(c)], "a worker outlived verify"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_verify_stopped_leaves_no_temporary_files_and_no_workers(tmp_path, sig):
    """verify keeps its results in memory: no ``attnspec-*`` file or folder, whatever
    stops it (pytest's own basetemp, ``pytest-of-USER``, is pruned by pytest's next runs)."""
    env = {**ENV, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([*CLI, "verify", "--jobs", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    _wait_for_tests(proc)
    workers = _children(proc.pid)
    assert len(workers) == 2, workers
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode in (143, -sig)
    deadline = time.monotonic() + 30
    while [c for c in workers if _alive(c)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [c for c in workers if _alive(c)], "a worker outlived verify"
    assert [f.name for f in tmp_path.iterdir() if not f.name.startswith("pytest-of-")] == []
