"""`attnspec check` survives the student's code (issue 20, item 1): every hostile or
broken function ends in a verdict with a reason, the run goes on, and the command ends.

The user files are written in tmp_path. Tests whose code would hang, exit or eat memory
in the test process without the fix run the command in a subprocess with a timeout;
the others call ``main`` here.
"""

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from attnspec.conformance.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples" / "coursework"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
ENV.pop("ATTNSPEC_TIMEOUT", None)

# a right attention: the hostile part of each file below runs only where it says
ATTENTION = """
import numpy as np


def attention(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    m = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(m), m, 0.0))
    s = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, s, out=np.zeros_like(e), where=s > 0)
    return w @ v, w
"""
SELECT = ["-k", "basic-001 or mask-001 or rank2-001"]  # three plain vectors, in this order


def student(tmp_path: Path, body: str, name: str = "student.py") -> Path:
    path = tmp_path / name
    path.write_text(ATTENTION + textwrap.dedent(body))
    return path


def run_cli(target, *args, env=None, prelude: str = "", timeout: float = 120):
    """The command as a user runs it (``prelude``: Python run first in its process)."""
    code = (f"{prelude}\nimport sys\nfrom attnspec.conformance.cli import main\n"
            f"sys.exit(main({['check', str(target), *args]!r}))")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout, env={**ENV, **(env or {})})
    return p, time.perf_counter() - t0


def check_here(capsys, target, *args) -> tuple[int, str, str]:
    code = main(["check", str(target), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def line_of(out: str, vid: str) -> str:
    return next(ln for ln in out.splitlines() if re.match(rf"(PASS|FAIL|SKIP)  {vid} ", ln))


def one_error_line(p_or_code, err: str = None) -> str:
    code, err = (p_or_code.returncode, p_or_code.stderr) if err is None else (p_or_code, err)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


# -- time ----------------------------------------------------------------------------------

@pytest.mark.parametrize("hang", ["while True: pass", "time.sleep(3600)"])
def test_a_vector_that_never_returns_times_out_and_the_run_goes_on(tmp_path, hang):
    path = student(tmp_path, f"""
        import time


        def hangs(q, k, v, mask=None):
            if mask is not None:
                {hang}
            return attention(q, k, v, mask)
        """)
    p, wall = run_cli(f"{path}:hangs", "--component", "sdpa", *SELECT, "--timeout", "1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"FAIL  sdpa/mask-001 +timed out after 1 s", p.stdout), p.stdout
    assert line_of(p.stdout, "sdpa/basic-001").startswith("PASS")
    assert line_of(p.stdout, "sdpa/rank2-001").startswith("PASS")  # in a new worker
    assert "2 passed, 1 failed" in p.stdout
    assert wall < 60


def test_attnspec_timeout_is_honoured(tmp_path):
    path = student(tmp_path, """
        import time


        def sleeps(q, k, v, mask=None):
            if mask is not None:
                time.sleep(3600)
            return attention(q, k, v, mask)
        """)
    p, wall = run_cli(f"{path}:sleeps", "--component", "sdpa", *SELECT,
                      env={"ATTNSPEC_TIMEOUT": "1.5"})
    assert re.search(r"FAIL  sdpa/mask-001 +timed out after 1.5 s", p.stdout), p.stdout
    assert p.returncode == 1 and wall < 60


def test_three_overruns_in_a_row_stop_the_run(tmp_path):
    path = student(tmp_path, """
        def loops(q, k, v, mask=None):
            while True:
                pass
        """)
    p, wall = run_cli(f"{path}:loops", "--component", "sdpa", "--timeout", "0.5")
    assert p.returncode == 1
    # three overruns (the repeats printed once with a count), then the rest not run
    first = re.search(r"^FAIL  (\S+) +timed out after 0.5 s", p.stdout, re.M)
    assert first, p.stdout
    assert re.search(rf"^FAIL  2 more vector\(s\) with the same error as {first[1]}:", p.stdout,
                     re.M), p.stdout
    assert "not run: the last 3 vectors timed out or ended the worker" in p.stdout
    tally = re.search(r"^0 passed, (\d+) failed", p.stdout, re.M)
    assert tally and int(tally[1]) > 3, p.stdout  # the 3 overruns and the rest, not run
    assert wall < 60


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "abc", "0.000001", "1e9"])
def test_bad_timeouts_are_refused_in_one_line(capsys, value):
    target = EXAMPLES / "attention_correct.py:scaled_dot_product_attention"
    code, _, err = check_here(capsys, target, "--component", "sdpa", "--timeout", value)
    assert f"--timeout {value!r}" in one_error_line(code, err)


def test_a_bad_attnspec_timeout_is_refused_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("ATTNSPEC_TIMEOUT", "inf")
    target = EXAMPLES / "attention_correct.py:scaled_dot_product_attention"
    code, _, err = check_here(capsys, target, "--component", "sdpa")
    assert "ATTNSPEC_TIMEOUT 'inf'" in one_error_line(code, err)


def test_a_file_that_never_finishes_importing_is_one_line(tmp_path):
    path = tmp_path / "loops.py"
    path.write_text("while True:\n    pass\n")
    p, wall = run_cli(f"{path}:f", "--component", "sdpa", "--timeout", "0.5",
                      prelude="import attnspec.conformance.check_worker as w; "
                              "w.IMPORT_SECONDS = 1")
    assert "importing the file: timed out after 1 s" in one_error_line(p)
    assert wall < 60


def test_a_stray_thread_does_not_keep_check_alive(tmp_path):
    path = student(tmp_path, """
        import threading
        import time


        def spawns(q, k, v, mask=None):
            threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon
            return attention(q, k, v, mask)
        """)
    p, wall = run_cli(f"{path}:spawns", "--component", "sdpa", *SELECT, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 passed, 0 failed" in p.stdout
    assert wall < 30


def test_a_child_process_of_the_users_code_is_stopped_with_it(tmp_path):
    pidfile = tmp_path / "pid"
    path = student(tmp_path, f"""
        import subprocess
        import sys


        def spawns(q, k, v, mask=None):
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            open({str(pidfile)!r}, "w").write(str(p.pid))
            return attention(q, k, v, mask)
        """)
    p, _ = run_cli(f"{path}:spawns", "--component", "sdpa", "-k", "basic-001", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    pid = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the user's child process outlived check")


# -- the process ends ------------------------------------------------------------------------

def test_os_exit_in_the_users_code_is_a_failure_with_a_reason(tmp_path):
    path = student(tmp_path, """
        import os


        def exits(q, k, v, mask=None):
            if mask is not None:
                os._exit(0)
            return attention(q, k, v, mask)
        """)
    p, _ = run_cli(f"{path}:exits", "--component", "sdpa", *SELECT)
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"FAIL  sdpa/mask-001 +the process running your code ended with exit "
                     r"status 0 before returning \(os._exit\(\)\?\)", p.stdout), p.stdout
    assert line_of(p.stdout, "sdpa/rank2-001").startswith("PASS")
    assert "2 passed, 1 failed" in p.stdout


def test_a_crash_is_a_failure_naming_the_signal(tmp_path):
    path = student(tmp_path, """
        import os
        import signal


        def crashes(q, k, v, mask=None):
            if mask is not None:
                os.kill(os.getpid(), signal.SIGSEGV)
            return attention(q, k, v, mask)
        """)
    p, _ = run_cli(f"{path}:crashes", "--component", "sdpa", *SELECT)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL  sdpa/mask-001" in p.stdout and "killed by SIGSEGV" in p.stdout
    assert line_of(p.stdout, "sdpa/rank2-001").startswith("PASS")


# -- memory -----------------------------------------------------------------------------------

def test_memory_is_limited_and_a_leak_fails_with_a_reason(tmp_path):
    path = student(tmp_path, """
        import numpy as np

        held = []


        def leaks(q, k, v, mask=None):
            held.append(np.ones(2**26))  # 512 MiB a call, never freed
            held[-1][::512] = 1.0
            return attention(q, k, v, mask)
        """)
    p, _ = run_cli(f"{path}:leaks", "--component", "sdpa", *SELECT, "--memory-limit", "1.2")
    assert p.returncode == 1, p.stdout + p.stderr
    assert line_of(p.stdout, "sdpa/basic-001").startswith("PASS")
    assert re.search(r"FAIL  sdpa/(mask|rank2)-001 +raised (_Array)?MemoryError", p.stdout), p.stdout
    assert line_of(p.stdout, "sdpa/rank2-001").startswith("PASS") or \
        line_of(p.stdout, "sdpa/mask-001").startswith("PASS")  # a fresh worker after it


@pytest.mark.parametrize("value", ["-1", "inf", "lots", "0.01"])
def test_bad_memory_limits_are_refused_in_one_line(capsys, value):
    target = EXAMPLES / "attention_correct.py:scaled_dot_product_attention"
    code, _, err = check_here(capsys, target, "--component", "sdpa", "--memory-limit", value)
    assert f"--memory-limit {value!r}" in one_error_line(code, err)


def test_help_states_the_limits(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert re.search(r"--timeout SECONDS\s+time limit per vector \(default 20; env\s+"
                     r"ATTNSPEC_TIMEOUT", out), out
    assert re.search(r"--memory-limit GIB\s+memory your code may allocate", out)
    assert "RLIMIT_AS" in out


# -- output -----------------------------------------------------------------------------------

def test_a_flood_of_prints_is_truncated(capsys, tmp_path):
    path = student(tmp_path, """
        def prints(q, k, v, mask=None):
            for i in range(200_000):
                print("line", i)
            return attention(q, k, v, mask)
        """)
    code, out, err = check_here(capsys, f"{path}:prints", "--component", "sdpa", *SELECT)
    assert code == 0, out[-3000:]
    assert len(out.splitlines()) < 60 and len(err) < 1000
    assert "      | line 0\n" in out and "line 10\n" not in out
    assert re.search(r"\| \.\.\. 199990 more line\(s\) not shown \(\d+ bytes printed\)", out)


def test_output_is_shown_under_its_vector_and_bounded_over_the_run(capsys, tmp_path):
    path = student(tmp_path, """
        def prints(q, k, v, mask=None):
            print("shape", q.shape)
            print("\\x1b[2J cleared?")
            print("four\\nmore\\nlines\\nhere")
            return attention(q, k, v, mask)
        """)
    code, out, _ = check_here(capsys, f"{path}:prints", "--component", "sdpa")
    assert re.search(r"^\d+ passed", out, re.M), out  # 19 vectors ran: 114 lines printed
    first = out.split("PASS  sdpa/basic-001")[1].splitlines()
    assert first[1].startswith("      | shape (")
    assert "\x1b" not in out and "      | ?[2J cleared?" in out
    shown = [ln for ln in out.splitlines() if ln.startswith("      | ") and "| ... " not in ln]
    assert len(shown) == 100  # over the run; the rest counted in one line before the summary
    assert re.search(r"\| \.\.\. \d+ more printed line\(s\) not shown \(at most 100 in a run\)\n"
                     r"\d+ passed", out), out


@pytest.mark.parametrize("how", ["sys.stdout.close()", "os.close(1)", "sys.stderr.close()"])
def test_closing_stdout_is_no_traceback(capsys, tmp_path, how):
    path = student(tmp_path, f"""
        import os
        import sys


        def closes(q, k, v, mask=None):
            {how}
            return attention(q, k, v, mask)
        """)
    code, out, err = check_here(capsys, f"{path}:closes", "--component", "sdpa", *SELECT)
    assert code == 0, out + err
    assert "3 passed, 0 failed" in out and "Traceback" not in out + err


def test_closing_stdout_in_a_subprocess_run(tmp_path):
    path = student(tmp_path, """
        import sys


        def closes(q, k, v, mask=None):
            sys.stdout.close()
            sys.__stdout__.close()
            return attention(q, k, v, mask)
        """)
    p, _ = run_cli(f"{path}:closes", "--component", "sdpa", *SELECT)
    assert p.returncode == 0 and "3 passed, 0 failed" in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr


# -- what comes back --------------------------------------------------------------------------

@pytest.mark.parametrize("ret, reason", [
    ("()", r"returned an empty tuple; sdpa returns output, weights"),
    ("[]", r"returned an empty list; sdpa returns output, weights"),
    ("(None, None)", r"output 'output' is None"),
    ("out.astype(complex), w", r"output 'output' is complex \(complex128\); the spec's values "
                               r"are real"),
    ("out.astype(object), w", r"output 'output' is an array of object \(float\), not numbers"),
    ("np.array([str(out)]), w", r"output 'output' is an array of <U\d+ .*not numbers"),
    ("None", r"returned None"),  # failures before the worker too
    ("out[..., 0], w", r"output 'output': shape \(\d+, \d+\) != expected \(\d+, \d+, \d+\)"),
])
def test_unjudgeable_returns_are_failures_with_a_reason(capsys, tmp_path, ret, reason):
    path = student(tmp_path, f"""
        def returns(q, k, v, mask=None):
            out, w = attention(q, k, v, mask)
            return {ret}
        """)
    code, out, _ = check_here(capsys, f"{path}:returns", "--component", "sdpa", "-k", "basic-001")
    assert code == 1, out
    assert re.search(reason, out), out
    assert "0 passed, 1 failed" in out


def test_a_complex_gradient_fails(capsys, tmp_path):
    path = tmp_path / "grads.py"
    path.write_text(textwrap.dedent("""
        import numpy as np


        def softmax_backward(dy, x, y, axis=-1):
            dx = y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
            return dx.astype(complex)
        """))
    code, out, _ = check_here(capsys, f"{path}:softmax_backward", "--component", "softmax",
                              "--grad")
    assert code == 1 and "gradient dx is complex (complex128)" in out, out


# -- imports ----------------------------------------------------------------------------------

def test_a_sibling_module_imported_inside_the_function(capsys, tmp_path):
    (tmp_path / "helpers.py").write_text(ATTENTION)
    path = tmp_path / "solution.py"
    path.write_text(textwrap.dedent("""
        def attention(q, k, v, mask=None):
            from helpers import attention as inner  # imported when called, not at import

            return inner(q, k, v, mask)
        """))
    code, out, _ = check_here(capsys, f"{path}:attention", "--component", "sdpa", *SELECT)
    assert code == 0, out
    assert "3 passed, 0 failed" in out


def test_user_code_leaves_this_process_alone(capsys, tmp_path):
    """What the user's code does to its interpreter (np.seterr, sys.modules, globals) does
    not reach the process that prints the verdicts."""
    import numpy as np

    path = student(tmp_path, """
        import sys

        import numpy as np


        def meddles(q, k, v, mask=None):
            np.seterr(all="raise")
            sys.modules["json"] = None
            return attention(q, k, v, mask)
        """)
    before = np.geterr()
    code, out, _ = check_here(capsys, f"{path}:meddles", "--component", "sdpa", "-k", "basic-001")
    assert code == 0, out
    assert np.geterr() == before and sys.modules["json"] is not None
    assert not any(name.startswith("attnspec_user_student") for name in sys.modules)


def test_the_worker_ends_when_check_is_killed(tmp_path):
    """SIGTERM to `check` while the user's code loops: the worker does not live on."""
    pidfile = tmp_path / "pid"
    path = student(tmp_path, f"""
        import os


        def loops(q, k, v, mask=None):
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            while True:
                pass
        """)
    code = ("import sys\nfrom attnspec.conformance.cli import main\n"
            f"sys.exit(main(['check', {str(path) + ':loops'!r}, '--component', 'sdpa']))")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=ENV)
    try:
        for _ in range(600):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        p.terminate()
        p.wait(timeout=30)
        pid = int(pidfile.read_text())
        for _ in range(100):
            stat = Path(f"/proc/{pid}/stat")
            if not stat.exists() or stat.read_text().split()[2] == "Z":
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            pytest.fail("the worker outlived check")
    finally:
        p.kill()
