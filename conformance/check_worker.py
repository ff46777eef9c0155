"""Where ``attnspec check`` runs the user's code: in one child process for the whole run
(``WorkerSession``), treated as hostile. The parent loads the vectors, sends them over a
pipe and judges nothing the child cannot; the child imports the user's file once, runs
one vector per request and answers with a plain-data :class:`~.check.Verdict` (a JSON
line, never a pickle: the parent unpickles nothing the user's code could have written).

Per vector the child has a time limit (a worker that overruns is killed, the vector fails
saying so, and a fresh worker takes the next one) and a memory limit (``RLIMIT_AS``: the
address space the worker had mapped once its framework was imported, plus the limit).
What the user's code prints goes to a pipe the parent drains as it comes: at most
``OUTPUT_LINES`` lines are shown under a vector (``OUTPUT_TOTAL`` in a run), the rest is
counted. A worker that dies (``os._exit``, a segfault, out of memory) is replaced the
same way. At the end the worker is told to quit and its process group is killed, so a
stray thread or child process of the user's code cannot outlive ``check``.

``LocalSession`` is the same API in this process: the child runs one, and so does the
Python API (``attnspec.conformance.check``), whose function lives in a notebook.
"""

from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

from attnspec.spec.errors import AttnSpecError

from .check import (
    CheckError,
    Outcome,
    Target,
    Verdict,
    _backend,
    _exc,
    _run_any,
    call_signature,
    constructor_help,
    frameworks_used,
    grad_convention,
    load_target,
)

OUTPUT_LINES = 10  # printed lines shown under one vector
OUTPUT_TOTAL = 100  # ... and in a whole run
LINE_CHARS = 200
KEEP_BYTES = 64 * 1024  # of one vector's output, kept to show its first lines
MAX_REPLY = 1 << 20  # one JSON line from the worker
VERDICT_CHARS = 2000  # one line of a verdict (a user's exception message may be huge)
IMPORT_SECONDS = 120.0  # importing the user's file and its framework (tensorflow: ~10 s)
LOSSES_IN_A_ROW = 3  # timeouts or deaths in a row before the rest is not run
_FRAME = struct.Struct(">I")


# ---- in this process ------------------------------------------------------------------------

class LocalSession:
    """The user's code loaded once; ``run`` judges one vector and returns a Verdict."""

    def __init__(self, timeout: float | None = None):
        self.timeout = timeout  # in this process: SIGALRM, where this is the main thread
        self.t: Target | None = None
        self.backend = self.fn = self.conv = None
        self.vectors: list = []

    def load(self, target, framework: str, dtype: str, memory: float | None = None) -> dict:
        self.backend = _backend(framework, dtype)
        if memory:
            limit_memory(memory)
        self.t = target if isinstance(target, Target) else load_target(target)
        call_signature(self.t)  # a class that cannot be called fails here, once
        return {"kind": self.t.kind, "file": str(self.t.file), "name": self.t.name,
                "frameworks": sorted(frameworks_used(self.t)),
                "dtypes": list(self.backend.dtypes("cpu"))}

    def prepare(self, fn, vectors: list, grad: bool) -> None:
        self.fn, self.vectors = fn, vectors
        self.conv = grad_convention(self.t, fn, vectors) if grad else None

    def run(self, index: int, dtype: str) -> Verdict:
        v = self.vectors[index]
        try:
            with _alarm(self.timeout):
                outcome = _run_any(self.t, self.fn, v, self.backend, dtype, self.conv)
        except CheckError:
            raise
        except _Alarm:
            outcome = Outcome("fail", [f"timed out after {self.timeout:g} s (timeout=)"])
        except BaseException as exc:
            outcome = Outcome("fail", [f"raised {_exc(exc)}"])
        return self.verdict(outcome, v)

    def verdict(self, o: Outcome, v) -> Verdict:
        ctor = None
        if o.constructor_error is not None:
            help_ = textwrap.wrap(constructor_help(self.t, self.fn, v, o.plan), 88)
            ctor = {"key": _exc(o.constructor_error), "type": type(o.constructor_error).__name__,
                    "help": help_}
        lines = [_clip(str(line), VERDICT_CHARS) for line in o.lines]
        restart = any("MemoryError" in line or "can't allocate memory" in line
                      for line in lines[:1])
        return Verdict(o.status, lines, [w for w, _ in o.unsupported], ctor, restart=restart,
                       worst=o.worst)

    def close(self) -> None:
        pass


class _Alarm(BaseException):
    """The time limit of a vector run in this process (a BaseException: user code's
    ``except Exception`` does not swallow it)."""


@contextmanager
def _alarm(seconds: float | None):
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "setitimer"):
        yield
        return

    def ring(signum, frame):
        raise _Alarm()

    before = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def limit_memory(gib: float) -> None:
    """RLIMIT_AS: what is mapped now (Python, NumPy, the framework) plus ``gib``."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        mapped = 0
    limit = mapped + int(gib * (1 << 30))
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # Windows has no rlimit; macOS none on AS
        pass


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + f"... ({len(text) - n} more characters)"


# ---- the child: serve requests from the parent -----------------------------------------------

def serve(fd_in: int, fd_out: int, output: int) -> None:
    """The worker's loop: one request (a length-prefixed pickle from the parent), one JSON
    line back. In a session of its own, so that the parent can kill whatever the user's code
    starts; fd 1 and 2 go to ``output``. Ends with os._exit, so no thread of the user's code
    keeps it alive."""
    parent = os.getppid()
    os.setsid()
    _die_with(parent)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr = None  # a forked worker's were the parent's (pytest's capture...)
    session = LocalSession()
    while True:
        request = _read_frame(fd_in)
        if request is None or request["op"] == "quit":
            _flush()
            os._exit(0)
        _restore_output(output)  # the user's code may have closed fd 1 or 2, or sys.stdout
        reply = _handle(session, request)
        _flush()
        _write_line(fd_out, reply)


def _die_with(parent: int) -> None:
    """SIGKILL when the parent ends (Linux), even one killed by SIGTERM mid-vector."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before prctl
        os._exit(0)


def _handle(session: LocalSession, request: dict) -> dict:
    op = request["op"]
    try:
        if op == "load":
            return {"event": "loaded", **session.load(request["target"], request["framework"],
                                                      request["dtype"], request["memory"])}
        if op == "prepare":
            session.prepare(request["fn"], request["vectors"], request["grad"])
            return {"event": "ready"}
        return {"event": "done", "verdict": vars(session.run(request["index"], request["dtype"]))}
    except AttnSpecError as exc:  # CheckError, a backend that is not installed...
        return {"event": "fatal", "message": str(exc)}
    except BaseException as exc:
        return {"event": "fatal", "message": f"the check worker failed: {_exc(exc)}"}


def _read_frame(fd: int):
    head = _read_exactly(fd, _FRAME.size)
    if head is None:
        return None
    body = _read_exactly(fd, _FRAME.unpack(head)[0])
    return None if body is None else pickle.loads(body)  # written by the parent, not the user


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        try:
            data = os.read(fd, n - len(chunks))
        except OSError:
            return None
        if not data:
            return None
        chunks += data
    return bytes(chunks)


def _write_line(fd: int, obj: dict) -> None:
    data = (json.dumps(obj, default=repr) + "\n").encode()
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            os._exit(70)  # the parent is gone, or the user's code closed the pipe


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _restore_output(fd: int) -> None:
    """fd 1 and 2 back on the parent's pipe, and sys.stdout / sys.stderr open on them."""
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for name, num in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None or getattr(stream, "closed", True):
            setattr(sys, name, open(num, "w", encoding="utf-8", errors="replace",
                                    closefd=False))


# ---- the parent: one worker for the run, replaced when it dies or overruns -------------------

# frameworks whose thread pools (OpenMP, Eigen, XLA) do not survive a fork of this process
_NO_FORK = ("torch", "tensorflow", "jax", "jaxlib", "keras", "mlx")


class _Child:
    """The worker process: forked from this one where that is safe (it has imported NumPy
    and attnspec already: a worker starts in milliseconds), else a fresh interpreter
    (~0.5 s). Either way in a session of its own, killed with its process group."""

    def __init__(self, pid: int, popen=None):
        self.pid, self.popen, self.code = pid, popen, None

    @classmethod
    def start(cls, req_r: int, rep_w: int, out_w: int, parent_fds: tuple) -> _Child:
        if _can_fork():
            _flush()
            pid = os.fork()
            if pid == 0:
                try:
                    for fd in parent_fds:
                        os.close(fd)
                    serve(req_r, rep_w, out_w)
                finally:
                    os._exit(70)
            return cls(pid)
        code = ("import sys; del sys.path[0]; from attnspec.conformance.check_worker import "
                "serve; serve(*map(int, sys.argv[1:]))")
        popen = subprocess.Popen([sys.executable, "-c", code, str(req_r), str(rep_w), str(out_w)],
                                 stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                 pass_fds=(req_r, rep_w, out_w))
        return cls(popen.pid, popen)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (negative: the signal), or None if still running after ``timeout``."""
        if self.popen is not None:
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.code is None:
            pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                return None
            else:
                time.sleep(0.005)
        return self.code

    def kill(self) -> None:
        """SIGKILL to its process group (the user's threads and child processes too)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # before its setsid, or ended
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait()


def _can_fork() -> bool:
    import threading

    return (hasattr(os, "fork") and threading.active_count() == 1
            and not any(name in sys.modules for name in _NO_FORK))


class _Lost(Exception):
    """The worker did not answer: it overran its time, or died."""


class Capture:
    """A vector's printed output: the first KEEP_BYTES kept, the rest counted."""

    def __init__(self):
        self.kept, self.size, self.newlines, self.shown, self.hidden = bytearray(), 0, 0, 0, 0
        self.ends_line = True

    def feed(self, data: bytes) -> None:
        self.ends_line = data.endswith(b"\n")
        self.size += len(data)
        self.newlines += data.count(b"\n")
        if len(self.kept) < KEEP_BYTES:
            self.kept += data[:KEEP_BYTES - len(self.kept)]

    def take(self) -> list[str]:
        """The lines to show for what was printed since the last take (a count for the rest)."""
        if not self.size:
            return []
        total = self.newlines + (not self.ends_line)
        room = max(0, min(OUTPUT_LINES, OUTPUT_TOTAL - self.shown))
        lines = [_printable(line) for line in self.kept.decode("utf-8", "replace").splitlines()]
        shown = lines[:room]
        self.shown += len(shown)
        rest = total - len(shown)
        if rest > 0 and shown:
            shown.append(f"... {rest} more line(s) not shown ({self.size} bytes printed)")
        elif rest > 0:  # the run's lines are spent: one count at the end
            self.hidden += rest
        self.kept, self.size, self.newlines = bytearray(), 0, 0
        return shown

    def closing(self) -> list[str]:
        return [f"... {self.hidden} more printed line(s) not shown (at most {OUTPUT_TOTAL} in a "
                f"run)"] if self.hidden else []


def _printable(line: str) -> str:
    # no escape sequences or carriage returns that could rewrite the terminal's lines
    return _clip("".join(c if c.isprintable() or c == "\t" else "?" for c in line), LINE_CHARS)


class WorkerSession:
    """The parent's side: the same load / prepare / run as LocalSession, in a child."""

    def __init__(self, target: str, framework: str, dtype: str, timeout: float | None,
                 memory: float | None):
        self.load_request = {"op": "load", "target": target, "framework": framework,
                             "dtype": dtype, "memory": memory}
        self.timeout, self.memory = timeout, memory
        self.prepare_request = None
        self.proc = None
        self.capture = Capture()
        self.losses, self.broken, self.import_output = 0, None, []
        self._spawn()  # the import starts while the parent loads the vectors

    # -- the API ----------------------------------------------------------------------------
    def load(self) -> dict:
        info = self._answer("loaded", self._import_seconds(), "importing the file")
        self.import_output = self.capture.take()
        return info

    def prepare(self, fn, vectors: list, grad: bool) -> None:
        self.prepare_request = {"op": "prepare", "fn": fn, "vectors": vectors, "grad": grad}
        self._send(self.prepare_request)
        self._answer("ready", self._import_seconds(), "preparing the run")

    def run(self, index: int, dtype: str) -> Verdict:
        if self.broken:
            return Verdict("fail", [f"not run: {self.broken}"])
        if self.proc is None and not self._restart():
            return Verdict("fail", [f"not run: {self.broken}"])
        self._send({"op": "run", "index": index, "dtype": dtype})
        try:
            reply = self._answer("done", self.timeout, "")
        except _Lost as lost:
            why = f"{lost} (the limit per vector: --timeout or ATTNSPEC_TIMEOUT)" if str(
                lost).startswith("timed out") else str(lost)
            verdict = Verdict("fail", [f"{why}; check went on in a new worker"],
                              output=self.capture.take())
            self.losses += 1
            if self.losses >= LOSSES_IN_A_ROW:
                self.broken = (f"the last {self.losses} vectors timed out or ended the worker; "
                               f"check stopped running your code")
            return verdict
        self.losses = 0
        verdict = Verdict(**reply["verdict"])
        verdict.output = self.capture.take()
        if verdict.restart:  # what it allocated may still be held: start afresh
            self._stop()
        return verdict

    def close(self) -> None:
        if self.proc is not None:
            try:
                self._send({"op": "quit"})
                self.proc.wait(timeout=1)
            except OSError:
                pass
        self._stop()

    # -- the child process -------------------------------------------------------------------
    def _spawn(self) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.out_r, out_w = os.pipe()
        try:
            self.proc = _Child.start(req_r, rep_w, out_w, (self.req_w, self.rep_r, self.out_r))
        finally:
            for fd in (req_r, rep_w, out_w):
                os.close(fd)
        for fd in (self.rep_r, self.out_r):
            os.set_blocking(fd, False)
        self.pending = bytearray()
        self._send(self.load_request)

    def _restart(self) -> bool:
        self._stop()
        self._spawn()
        try:
            self._answer("loaded", self._import_seconds(), "restarting the worker")
            self._send(self.prepare_request)
            self._answer("ready", self._import_seconds(), "restarting the worker")
        except (_Lost, CheckError) as exc:
            self.broken = f"a new worker could not be started ({exc})"
            self._stop()
            return False
        self.capture.take()  # what the file prints when imported was shown once
        return True

    def _stop(self) -> None:
        if self.proc is None:
            return
        self.proc.kill()
        for fd in (self.req_w, self.rep_r, self.out_r):
            os.close(fd)
        self.proc = None

    def _import_seconds(self) -> float | None:
        return None if self.timeout is None else max(IMPORT_SECONDS, self.timeout)

    def _send(self, request: dict) -> None:
        body = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        data = _FRAME.pack(len(body)) + body
        try:
            while data:
                data = data[os.write(self.req_w, data):]
        except BrokenPipeError:
            pass  # the worker is gone: _answer says how

    def _answer(self, event: str, seconds: float | None, doing: str) -> dict:
        """The worker's next reply; its output is captured meanwhile. A fatal reply is a
        CheckError; no reply in time, or none at all, is _Lost (the worker is stopped)."""
        try:
            reply = self._reply(seconds)
        except _Lost as lost:
            self._stop()
            if doing:
                limit = f" (the limit: {IMPORT_SECONDS:g} s, or --timeout if longer)" if str(
                    lost).startswith("timed out") else ""
                raise CheckError(f"{doing}: {lost}{limit}") from None
            raise
        if reply.get("event") == "fatal":
            raise CheckError(reply.get("message", "the worker failed"))
        if reply.get("event") != event:
            self._stop()
            raise _Lost(f"the worker answered {str(reply)[:80]!r}, not {event!r}")
        return reply

    def _reply(self, seconds: float | None) -> dict:
        deadline = None if seconds is None else time.monotonic() + seconds
        with selectors.DefaultSelector() as sel:
            sel.register(self.rep_r, selectors.EVENT_READ)
            sel.register(self.out_r, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise _Lost(f"timed out after {seconds:g} s")
                for key, _ in sel.select(left):
                    if not self._read(key.fd, sel):
                        raise _Lost(self._death())
        line, _, rest = bytes(self.pending).partition(b"\n")
        self.pending = bytearray(rest)
        self._drain()  # what was printed before the reply is in the pipe by now
        try:
            return json.loads(line)
        except ValueError:
            raise _Lost("the worker answered something that is not JSON") from None

    def _read(self, fd: int, sel) -> bool:
        """Read what is there; False when the reply pipe is closed (the worker ended)."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if fd == self.out_r:
            if data:
                self.capture.feed(data)
            else:
                sel.unregister(fd)
            return True
        if not data:
            return False
        self.pending += data
        if len(self.pending) > MAX_REPLY:
            self._stop()
            raise _Lost(f"the worker's reply is over {MAX_REPLY} bytes")
        return True

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.out_r, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            self.capture.feed(data)

    def _death(self) -> str:
        """Why the worker ended (it is reaped here)."""
        self._drain()
        code = self.proc.wait(timeout=5)
        if code is None:
            self._stop()
            return "the worker closed its reply pipe and did not end; check stopped it"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            memory = (f" (out of memory? the limit is {self.memory:g} GiB, --memory-limit)"
                      if -code in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV) and self.memory
                      else "")
            why = f"the process running your code was killed by {name}{memory}"
        else:
            why = (f"the process running your code ended with exit status {code} before "
                   f"returning (os._exit()?)")
        return why
