"""spec/workers.py, the process pool of ``attnspec generate``: results in order, the first
failure raised, a dead worker named, and SIGTERM to the whole process group (what
``timeout`` sends) ending the run at once, with no worker left behind."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from attnspec.spec.workers import RemoteTraceback, WorkerDied, run_tasks


def square(x):
    return x * x


def fails(x):
    raise ValueError(f"bad {x}")


def dies(x):
    os._exit(7)


def pid(x):
    time.sleep(0.05)
    return os.getpid()


def test_results_come_back_in_task_order_whatever_the_start_order():
    tasks = [(square, (i,)) for i in range(9)]
    assert run_tasks(tasks, 2, order=[8, 3, 0, 1, 2, 4, 5, 6, 7]) == [i * i for i in range(9)]


def test_two_workers_share_the_tasks():
    pids = run_tasks([(pid, (i,)) for i in range(8)], 2, order=list(range(8)))
    assert len(set(pids)) == 2 and os.getpid() not in pids


def test_a_task_s_exception_is_raised_with_the_worker_s_traceback():
    with pytest.raises(ValueError, match="bad 2") as info:
        run_tasks([(square, (1,)), (fails, (2,))], 2, order=[0, 1])
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "in fails" in str(info.value.__cause__)


def test_a_worker_that_dies_is_named_not_waited_for():
    with pytest.raises(WorkerDied, match=r"exit code 7\) while running dies"):
        run_tasks([(dies, ("x",)), (square, (3,))], 2, order=[0, 1])


SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from attnspec.spec.workers import run_tasks

    class Stopped(Exception):
        pass

    def stop(*_):
        raise Stopped()

    signal.signal(signal.SIGTERM, stop)
    # one long task; the other worker finishes the short ones and waits for more (the
    # state in which multiprocessing.Pool's workers hold its queue's lock)
    tasks = [(time.sleep, (30,)), (time.sleep, (0.05,)), (time.sleep, (0.05,))]
    try:
        run_tasks(tasks, 2, order=[0, 1, 2])
    except Stopped:
        print("stopped", flush=True)
        sys.exit(143)
""")


@pytest.mark.parametrize("delay", [0.2, 1.5])
def test_sigterm_to_the_process_group_ends_the_run_at_once(delay):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    time.sleep(delay + 1.0)  # the interpreter's start, then the workers' state above
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the parent did not end within 20 s of SIGTERM")
    assert proc.returncode == 143 and out == "stopped\n"
    with pytest.raises(ProcessLookupError):  # no process of the group is left
        os.killpg(proc.pid, 0)
