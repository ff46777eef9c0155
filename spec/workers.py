"""A process pool that survives its workers dying: one pipe per worker, no shared lock.

``multiprocessing.Pool`` feeds its workers through one queue whose read lock an idle
worker holds while it waits. A worker killed in that state (``timeout`` signals the whole
process group, so every worker gets the SIGTERM its parent gets) leaves the lock held,
and the parent's ``Pool.terminate()`` waits for it forever. Here each worker has its own
pipe and the parent hands out the next task itself, so a dead worker is seen at once (its
sentinel) and stopping the rest never waits on a lock.
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from multiprocessing.connection import wait


class RemoteTraceback(Exception):
    """The traceback of a task's exception in its worker (the cause of the one raised)."""


class WorkerDied(RuntimeError):
    """A worker process ended without answering (killed, or out of memory)."""


def _ignore_ctrl_c() -> None:
    """Ctrl-C reaches the whole process group: the parent stops the workers, so a worker
    prints no traceback of its own. SIGTERM and SIGHUP end a worker, whatever handler the
    parent had when it forked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def _serve(conn) -> None:
    """Run ``(f, args)`` tasks from ``conn`` until ``None``; answer ``(True, result)`` or
    ``(False, exception, traceback text)``."""
    _ignore_ctrl_c()
    while (task := conn.recv()) is not None:
        f, args = task
        try:
            answer = (True, f(*args))
        except BaseException as exc:  # handed to the parent, which raises it
            answer = (False, exc, traceback.format_exc())
        try:
            conn.send(answer)
        except Exception as exc:  # the result or exception does not pickle
            conn.send((False, RuntimeError(f"{f.__name__}: cannot send back: {exc!r}"), answer[-1]))
    conn.close()


def run_tasks(tasks: list, jobs: int, order: list[int]) -> list:
    """``[f(*args) for f, args in tasks]`` on ``min(jobs, len(tasks))`` processes, started
    in ``order``. The first task to fail raises its exception (its worker's traceback as
    the cause); a worker that dies raises :class:`WorkerDied`. Leaving by any exception,
    Ctrl-C included, kills every worker and waits for each to end: none outlives the call."""
    context = multiprocessing.get_context()
    workers, results, queue = [], {}, list(order)
    try:
        for _ in range(min(jobs, len(tasks))):
            parent, child = context.Pipe()
            p = context.Process(target=_serve, args=(child,), daemon=True)
            p.start()
            child.close()
            workers.append([p, parent, None])  # process, connection, the task it runs
        for w in workers:
            _hand_out(w, tasks, queue)
        while len(results) < len(tasks):
            busy = [w for w in workers if w[2] is not None]
            ready = wait([w[1] for w in busy] + [w[0].sentinel for w in busy])
            for w in busy:
                if w[1] in ready:
                    try:
                        answer = w[1].recv()
                    except EOFError:
                        raise _died(w, tasks) from None
                    if not answer[0]:
                        _, exc, text = answer
                        raise exc from RemoteTraceback(text)
                    results[w[2]] = answer[1]
                    _hand_out(w, tasks, queue)
                elif w[0].sentinel in ready:
                    raise _died(w, tasks)
        return [results[i] for i in range(len(tasks))]
    finally:
        _stop(workers)


def _hand_out(worker: list, tasks: list, queue: list) -> None:
    """Send the next task to ``worker``, or ``None`` (its end) when there is none."""
    worker[2] = queue.pop(0) if queue else None
    worker[1].send(None if worker[2] is None else tasks[worker[2]])


def _died(worker: list, tasks: list) -> WorkerDied:
    p, _, i = worker
    p.join(1.0)
    f, args = tasks[i]
    code = p.exitcode
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return WorkerDied(f"a worker process ended ({how}) while running "
                      f"{f.__name__}{tuple(a for a in args if isinstance(a, str))!r}")


def _stop(workers: list) -> None:
    """Kill the workers still running and reap every one (no lock taken)."""
    for p, _, _ in workers:
        if p.is_alive():
            p.kill()
    for p, conn, _ in workers:
        p.join()
        conn.close()
