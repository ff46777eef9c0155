"""How many processes ``attnspec verify --jobs`` and ``attnspec generate --jobs`` run.

``auto`` is one process per usable CPU, at most MAX_AUTO_JOBS. Any count is bounded by
the usable CPUs and by the memory available (MemAvailable / BYTES_PER_JOB, one
process at least): a larger count is clamped to that bound, with one line saying so.
"""

from __future__ import annotations

import os

MAX_AUTO_JOBS = 8
# A suite worker with a framework loaded (JAX, torch, TensorFlow) and its compile
# caches stays under ~1.5 GiB on the CPU; the NumPy backend well under.
BYTES_PER_JOB = 3 << 29


class JobsError(ValueError):
    """``--jobs`` is not a count >= 1 or ``auto``; the message is one line naming it."""


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes the kernel says new processes may use (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def bound() -> tuple[int, str]:
    """(the most processes this machine can run, why: the CPUs and memory it read)."""
    cpus, memory = usable_cpus(), available_memory()
    most, why = cpus, f"{cpus} usable CPU(s)"
    if memory is not None:
        most = min(most, max(1, memory // BYTES_PER_JOB))
        why += f", {memory / (1 << 30):.1f} GiB available at ~{BYTES_PER_JOB / (1 << 30):.1f} GiB a process"
    return most, why


def parse_jobs(text, option: str = "--jobs") -> tuple[int, str | None]:
    """``text`` (a count >= 1 or ``auto``) -> (processes, a line saying it was clamped, or
    None); JobsError naming ``option`` otherwise."""
    most, why = bound()
    if str(text).strip() == "auto":
        return max(1, min(most, MAX_AUTO_JOBS)), None
    try:
        jobs = int(str(text).strip())
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise JobsError(f"{option} {text!r}: expected a number of processes >= 1 or auto")
    if jobs > most:
        return most, f"{option} {jobs} is more than this machine can run ({why}): running {most}"
    return jobs, None
