"""Issue 20's faults of ``attnspec verify``, ``report`` and ``generate``: each is one clear
line and a non-zero exit, or the stated right behaviour; no run overwrites or loses a
results file, and no stop leaves a process behind."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attnspec.conformance import cli

from .test_cli_faults import CLI, ENV, _alive, _children
from .test_verify_faults import one_clear_line, site, verify  # noqa: F401 - site: a fixture

QUICK = "softmax/basic-001"  # one golden test per dtype


def _prelude(prelude: str, *args, env=None, timeout=300):
    """``attnspec`` with ``prelude`` run first in the same process (to plant a fault)."""
    code = f"{prelude}\nimport sys\nfrom attnspec.conformance.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env={**ENV, **(env or {})})


# -- the options ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "0.000001", "garbage", "-1", "nan", "1e300"])
def test_a_timeout_out_of_range_is_one_line(value):
    one_clear_line(verify("-k", QUICK, env={"ATTNSPEC_TIMEOUT": value}),
                   f"timeout {value!r}", "ATTNSPEC_TIMEOUT", "0 (no limit)", "from 1 to 86400")


@pytest.mark.parametrize("args,env", [([], {"ATTNSPEC_HYPOTHESIS_PROFILE": "nosuch"}),
                                      (["--hypothesis-profile", "nosuch"], {})],
                         ids=["env", "option"])
def test_an_unknown_hypothesis_profile_is_one_line(args, env):
    one_clear_line(verify("-k", QUICK, *args, env=env), "--hypothesis-profile 'nosuch'",
                   "ci, thorough, quick")


def test_verify_takes_the_hypothesis_profile_the_readme_names(tmp_path):
    """``-k`` picks one property test; under ``thorough`` hypothesis draws 500 examples, under
    ``ci`` 20, under ``quick`` 3 (its statistics count them)."""
    k = "test_softmax_rows_sum_to_one"
    counts = {}
    for profile in ("ci", "thorough", "quick"):
        p = verify("-k", k, "--hypothesis-profile", profile, "--jobs", "1",
                   env={"PYTEST_ADDOPTS": "--hypothesis-show-statistics"})
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        counts[profile] = p.stdout
    # hypothesis' statistics: "- 20 passing examples" (6.155), "- 20 passing, 0 failing" (6.170)
    for profile, n in (("ci", 20), ("thorough", 500), ("quick", 3)):
        assert re.search(rf"- {n} passing( examples|,)", counts[profile]), counts[profile][-2000:]


def test_a_k_that_does_not_parse_is_one_line():
    one_clear_line(verify("-k", "((("), "-k '((('", "not a pytest -k expression")


def test_a_k_that_selects_nothing_is_one_line():
    p = verify("-k", "no_such_test_anywhere", "--jobs", "1")
    line = one_clear_line(p, "-k 'no_such_test_anywhere' selects none of the suite's tests")
    assert p.returncode == 2 and "total" not in p.stdout, line


def test_k_transformers_without_the_hf_extra_says_so():
    hide = ("import importlib.util as u\n_find = u.find_spec\n"
            "u.find_spec = lambda n, *a: None if n == 'transformers' else _find(n, *a)")
    p = _prelude(hide, "verify", "-k", "transformers", "--jobs", "1")
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stderr.strip().count("\n") == 0, p.stderr
    assert "transformers is not installed" in p.stderr and "attnspec[hf]" in p.stderr


@pytest.mark.parametrize("args,needle", [
    (["--backends", "numpy,nosuch"], "unknown backend 'nosuch'"),
    (["--backends", "numpy", "--dtype", "float99"], "float99"),
    (["--backends", "numpy", "--backend-option", "noequals"], "'noequals'"),
    (["--backends", "numpy", "--backend-option", "threads=4"], "unknown numpy backend option"),
    (["--backends", "numpy", "-k", "((("], "-k '((('"),
    (["--backends", "numpy", "-k", "no_such_test_anywhere"], "selects none"),
], ids=["backend", "dtype", "option-not-kv", "option-unknown", "k-syntax", "k-nothing"])
def test_report_refuses_a_bad_argument_before_writing_anything(tmp_path, args, needle):
    out = tmp_path / "out"
    p = subprocess.run([*CLI, "report", *args, "--out", str(out)], capture_output=True,
                       text=True, timeout=300, env=ENV)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnspec report: error: "), p.stderr
    assert needle in lines[0] and "Traceback" not in p.stdout + p.stderr
    assert not out.exists() or not list(out.iterdir())


# -- --jobs --------------------------------------------------------------------------------


def test_jobs_default_to_auto_on_the_cpu_and_one_on_a_gpu():
    assert cli.default_jobs("cpu") == "auto"
    assert cli.default_jobs("cuda") == cli.default_jobs("gpu") == "1"
    p = subprocess.run([*CLI, "verify", "--help"], capture_output=True, text=True, env=ENV)
    assert "default auto on the cpu device, 1 on a GPU" in " ".join(p.stdout.split())


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="auto is one process on one CPU")
def test_verify_on_the_cpu_runs_several_processes_by_default(tmp_path):
    out = tmp_path / "r.json"
    env = {k: v for k, v in ENV.items() if k != "ATTNSPEC_JOBS"}
    p = subprocess.run([*CLI, "verify", "-k", "softmax and golden", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert json.loads(out.read_text())["jobs"] >= 2 and "processes (pytest-xdist" in p.stdout


# -- the per-test time limit ---------------------------------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_test_past_the_time_limit_is_a_failure_in_the_table_and_the_json(site, tmp_path,  # noqa: F811
                                                                             jobs):
    out = tmp_path / "r.json"
    p = verify("--backend", "hangs", "-k", "test_value and softmax/basic-001", "--dtype",
               "float64", "--json", str(out), "--jobs", jobs,
               env={"PYTHONPATH": str(site), "ATTNSPEC_TIMEOUT": "1"}, timeout=120)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert [(r["id"], r["status"]) for r in results] == [("softmax/basic-001", "fail")]
    assert "did not finish within 1 s" in results[0]["message"]
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("softmax "))
    assert row.split()[2:5] == ["1", "0", "1"], row  # vectors, passed, failed


# -- --json: atomic, checked before the run, never lost ------------------------------------


def test_json_is_refused_before_the_run_when_its_disk_is_full(tmp_path):
    full = ("import os, collections\n_s = os.statvfs\n"
            "os.statvfs = lambda p: os.statvfs_result((4096, 4096, 100, 0, 0, 10, 0, 0, 0, 255))")
    p = _prelude(full, "verify", "-k", QUICK, "--json", str(tmp_path / "r.json"))
    assert p.returncode == 2 and "passed" not in p.stdout, p.stdout[-2000:]
    assert p.stderr.strip().count("\n") == 0 and "bytes free" in p.stderr, p.stderr
    assert not (tmp_path / "r.json").exists()


def test_json_that_cannot_be_written_at_the_end_keeps_the_results_and_says_where(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("the previous run's results\n")
    full = ("import errno, os\n_replace = os.replace\n"
            "def replace(a, b):\n"
            f"    if str(b) == {str(target)!r}:\n"
            "        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
            "    return _replace(a, b)\n"
            "os.replace = replace")
    p = _prelude(full, "verify", "-k", QUICK, "--jobs", "1", "--json", str(target),
                 env={"TMPDIR": str(tmp_path)})
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], p.stderr
    kept = Path(lines[0].rsplit("the results are in ", 1)[1])
    assert kept.parent == tmp_path and len(json.loads(kept.read_text())["results"]) == 2
    assert target.read_text() == "the previous run's results\n"
    assert [f.name for f in tmp_path.iterdir() if f.name.endswith(".part")] == []


# -- signals -------------------------------------------------------------------------------


def _start(args, env=None):
    # SIGINT back to its default in the child (a background job starts with it ignored)
    return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**ENV, **(env or {})},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_verify_in_one_process_keeps_the_json_and_prints_no_table(tmp_path, sig,
                                                                               code):
    target = tmp_path / "r.json"
    target.write_text("the previous run's results\n")
    proc = _start(["verify", "--jobs", "1", "-k", "golden", "--json", str(target)])
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until the suite runs tests
        if line.startswith("test_") or time.monotonic() > deadline:
            break
    time.sleep(1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    assert "attnspec verify: interrupted" in err and "Traceback" not in out + err
    assert "total" not in out and "vectors  passed" not in out  # no table
    assert target.read_text() == "the previous run's results\n"
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_generate_stops_its_pool(tmp_path, sig, code):
    pytest.importorskip("mpmath")
    proc = _start(["generate", "--dir", str(tmp_path), "--jobs", "2"])
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = _children(proc.pid)
    assert len(workers) == 2, workers
    time.sleep(1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)], "a worker of generate outlived it"
