"""The stress family's budgets (issue 21): repository bytes, generation time, and each
backend's suite time on the stress vectors alone.

    python benchmarks/bench_stress.py [--generate] [--backends numpy torch ...] [--jobs N]

Budgets: the family adds at most 30 MB to the repository; `tox -e spec` (which regenerates
it with `generate --check`) stays under 5 minutes; each backend's suite stays under its
README target. Each backend runs in its own process (`attnspec verify -k stress`).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time

REPO_BUDGET = 30 * 1024 * 1024
GENERATE_BUDGET_S = 300.0


def sizes() -> dict:
    from attnspec.spec.stress import DATA_DIR, INDEX, STRESS_DIR, read_index

    doc = read_index()
    data = sum(p.stat().st_size for p in DATA_DIR.rglob("*.z"))
    index = (STRESS_DIR / INDEX).stat().st_size
    raw = sum(e["data"]["raw_bytes"] for e in doc["vectors"])
    by_comp: dict[str, list[int]] = {}
    for e in doc["vectors"]:
        by_comp.setdefault(e["id"].split("/")[0], []).append(e["data"]["bytes"])
    print(f"stress vectors: {len(doc['vectors'])}; data files {data} bytes (raw float64 {raw} "
          f"bytes), index {index} bytes; total {data + index} bytes = "
          f"{(data + index) / 2**20:.2f} MiB of the {REPO_BUDGET / 2**20:.0f} MiB budget "
          f"{'OK' if data + index <= REPO_BUDGET else 'OVER'}")
    for comp, b in sorted(by_comp.items()):
        print(f"  {comp:16s} {len(b):3d} vectors {sum(b):10d} bytes")
    return {"bytes": data + index}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def generate(jobs: int) -> dict:
    t0, c0 = time.perf_counter(), _cpu()
    p = subprocess.run([sys.executable, "-W", "ignore", "-m", "attnspec.spec.stress.build", "--check",
                        "--jobs", str(jobs)], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    print(p.stdout[-3000:], p.stderr[-2000:])
    print(f"stress generation (--check, every vector rebuilt and checked against mpmath, "
          f"--jobs {jobs}): {wall:.1f} s wall, {cpu:.1f} s CPU; budget {GENERATE_BUDGET_S:.0f} s "
          f"{'OK' if wall <= GENERATE_BUDGET_S else 'OVER'}; rc {p.returncode} "
          f"({'byte-identical' if p.returncode == 0 else 'DIFFERS'})")
    return {"generate_s": wall}


def suite(backend: str) -> dict:
    t0, c0 = time.perf_counter(), _cpu()
    p = subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend", backend,
                        "-k", "stress", "--jobs", "1"], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    tail = [ln for ln in p.stdout.splitlines() if ln.strip()][-3:]
    print(f"attnspec verify --backend {backend} -k stress: {wall:.1f} s wall, {cpu:.1f} s CPU, "
          f"rc {p.returncode}: {' | '.join(tail)[-300:]}")
    return {f"{backend}_s": wall, f"{backend}_rc": p.returncode}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generate", action="store_true", help="also time the regeneration")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backends", nargs="*", default=["numpy", "torch"])
    args = ap.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}")
    out = sizes()
    if args.generate:
        out.update(generate(args.jobs))
    for b in args.backends:
        out.update(suite(b))
    failed = [k for k, v in out.items() if k.endswith("_rc") and v != 0]
    return 0 if out["bytes"] <= REPO_BUDGET and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
