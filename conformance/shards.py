"""The suite in N processes: ``attnspec verify --jobs N``.

The suite's tests are cut into groups that share work (a compiling backend compiles a
shape once per process; every backend warms its caches): one group per (component,
dtype) for the tests over vectors (golden, errors, gradients, differential, and the
properties run over every value vector), one group per test function otherwise. The
groups go to the N parts largest first, each to the part with the least work so far.
A test over one vector weighs 1 + its number of parameter arrays (a composite costs more
to trace and compile than a kernel), any other test PROPERTY_WEIGHT (a hypothesis test
runs up to 20 examples, most of them new shapes). Replayed on measured per-test times
(the JAX suite's vector tests; tox's TensorFlow graph run), this split comes within 7 %
and 14 % of even, where counting tests leaves one part 1.6x and 2.1x the other.

Every process collects the same tests, so each computes the same split and runs its own
part (``--attnspec-shard I/N``); the parent merges the parts' JSON results, judges stale
known failures over all of them and decides the exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROPERTY_WEIGHT = 80  # ~2 s per property test on jax-cpu; 1 unit ~ 1/40 s there
MAX_AUTO_JOBS = 8
NO_TESTS = 5  # pytest's exit status when a part selected nothing


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` -> (I, N) with 1 <= I <= N, or SuiteConfigError naming the option."""
    from .plugin import SuiteConfigError

    if not text:
        return None
    i, _, n = str(text).partition("/")
    try:
        part = (int(i), int(n))
    except ValueError:
        part = (0, 0)
    if not 1 <= part[0] <= part[1]:
        raise SuiteConfigError(f"--attnspec-shard {text!r}: expected I/N with 1 <= I <= N "
                               f"(e.g. 1/2)")
    return part


def parse_jobs(text: str | int) -> int:
    """``--jobs``: a count >= 1, or ``auto`` (the CPUs this process may use, at most
    MAX_AUTO_JOBS)."""
    from .plugin import SuiteConfigError

    if str(text) == "auto":
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return max(1, min(usable or 1, MAX_AUTO_JOBS))
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise SuiteConfigError(f"--jobs {text!r}: expected a number of processes >= 1 or auto")
    return jobs


def group_of(item, property_dtype: str) -> tuple[str, int]:
    """(group key, weight) of one collected suite test."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "vector_dtype" in params:
        vector, dtype = params["vector_dtype"]
        return f"{vector.component}[{dtype}]", 1 + len(vector.params)
    if "value_vector" in params:
        vector = params["value_vector"]
        return f"{vector.component}[{property_dtype}]", 1 + len(vector.params)
    return item.nodeid.split("[")[0], PROPERTY_WEIGHT


def assign(groups: dict[str, int], count: int) -> dict[str, int]:
    """{group: weight} -> {group: part index 0..count-1}: largest first, to the least
    loaded part (ties: the lower index), so the split depends only on the groups."""
    load = [0] * count
    part = {}
    for key in sorted(groups, key=lambda k: (-groups[k], k)):
        i = min(range(count), key=lambda j: (load[j], j))
        part[key] = i
        load[i] += groups[key]
    return part


def split(items: list, shard: tuple[int, int], property_dtype: str,
          in_suite) -> tuple[list, list]:
    """(kept, deselected): the suite tests of part ``shard``; tests outside the suite
    (``in_suite(item)`` False) are always kept."""
    index, count = shard
    keys = {id(item): group_of(item, property_dtype) for item in items if in_suite(item)}
    groups: dict[str, int] = {}
    for key, weight in keys.values():
        groups[key] = groups.get(key, 0) + weight
    part = assign(groups, count)
    kept, dropped = [], []
    for item in items:
        key = keys.get(id(item))
        (kept if key is None or part[key[0]] == index - 1 else dropped).append(item)
    return kept, dropped


# -- the parent: run the parts, merge their results ------------------------------------


def run_parts(argv: list[str], jobs: int, cwd: Path, work: Path, echo, state: dict
              ) -> list[tuple[int, str, Path]]:
    """Run ``pytest argv`` as ``jobs`` parts at once; (exit status, output, JSON path) for
    each. Part 1's output is echoed as it comes, the others' when they are done. Each
    part leads its own process group (``state["procs"]``, for stopping them all)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    parts = []
    for i in range(1, jobs + 1):
        json_path = work / f"part-{i}.json"
        log = None if i == 1 else open(work / f"part-{i}.log", "w+", encoding="utf-8",
                                       errors="replace")
        cmd = [sys.executable, "-m", "pytest", *argv, f"--attnspec-json={json_path}",
               f"--attnspec-shard={i}/{jobs}"]
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, text=True, errors="replace",
                                stdout=subprocess.PIPE if i == 1 else log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        state["procs"].append(proc)
        parts.append((proc, log, json_path))
    first = parts[0][0]
    echo(f"attnspec verify: {jobs} processes; part 1/{jobs} follows, the others after it")
    lines = []
    for line in first.stdout:
        lines.append(line)
        echo(line.rstrip("\n"))
    out = []
    for i, (proc, log, json_path) in enumerate(parts, start=1):
        code = proc.wait()
        if i == 1:
            text = "".join(lines)
        else:
            log.seek(0)
            text = log.read()
            echo(f"\n---------- attnspec verify: part {i}/{jobs} ----------")
            for line in text.splitlines():
                echo(line)
            log.close()
        out.append((code, text, json_path))
    return out


def merge(parts: list[tuple[int, str, Path]], session) -> tuple[dict | None, int, str]:
    """One results document and exit status from the parts; (None, status, why) when a
    part did not run the suite. Stale known failures are judged over every part."""
    from .runner import Result

    docs = []
    codes = [_status(code) for code, _, _ in parts]
    for i, (_, text, json_path) in enumerate(parts, start=1):
        if not json_path.is_file() or not json_path.stat().st_size:
            last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
            return None, codes[i - 1] or 1, (f"part {i}/{len(parts)} did not finish (exit "
                                              f"status {codes[i - 1]})" +
                                              (f": {last.strip()}" if last else ""))
        docs.append(json.loads(json_path.read_text(encoding="utf-8")))
    doc = dict(docs[0])
    doc.pop("shard", None)
    doc["results"] = [r for d in docs for r in d["results"]]
    doc["notes"] = list(dict.fromkeys(n for d in docs for n in d.get("notes", [])))
    doc["problems"] = list(dict.fromkeys(p for d in docs for p in d.get("problems", [])))
    doc["jobs"] = len(parts)
    ran = [c for c in codes if c != NO_TESTS]
    status = max(ran) if ran else NO_TESTS
    stale = session.stale_known_failures([Result(r["id"], r["dtype"], r["status"])
                                          for r in doc["results"]])
    if stale and status == 0:
        status = 1
    doc["stale_known_failures"] = stale
    doc["exitstatus"] = status
    return doc, status, ""


def _status(code: int) -> int:
    """A process's exit status as a shell reports it: killed by signal S is 128 + S."""
    return 128 - code if code < 0 else code


def temporary_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="attnspec-verify-"))
