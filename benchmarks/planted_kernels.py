"""Planted bugs of a tiled attention kernel (tests/kernels/tiled.py) against the sdpa
vectors: bug x tiling x dtype, and which vector (or, where every current vector passes
the bug, which input built from sdpa's semantics) rejects it.

    python benchmarks/planted_kernels.py
    python benchmarks/planted_kernels.py --tiling 64x64

Columns: the number of sdpa value vectors that reject the bug, then the first of them, or
``own/...`` (the tests' own input; its stress input in the legend) when none does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/kernels holds the kernel and the bugs

from tests.kernels.planted import ALL_DTYPES, BUGS, STRESS, TILINGS, catch, own_cases  # noqa: E402
from tests.kernels.vectors import value_vectors  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiling", action="append", choices=sorted(TILINGS))
    args = ap.parse_args(argv)
    cases = own_cases()
    start = time.perf_counter()
    n = len(value_vectors())
    print(f"{n} sdpa value vectors; own inputs: {', '.join(c.id for c in cases)}\n")
    print(f"| bug | tiles | {' | '.join(ALL_DTYPES)} |")
    print(f"|---|---|{'---|' * len(ALL_DTYPES)}")
    missed = 0
    for bug in BUGS:
        for tiling in args.tiling or TILINGS:
            cells = []
            for dtype in ALL_DTYPES:
                vecs, own = catch(bug, dtype, tiling, cases)
                cell = f"{len(vecs)}: {vecs[0]}" if vecs else (f"0: {own[0]}" if own else "MISSED")
                missed += not (vecs or own)
                cells.append(cell)
            print(f"| {bug} | {tiling} | {' | '.join(cells)} |")
    print("\nbugs: " + "; ".join(f"{b}: {d}" for b, d in BUGS.items()))
    print("own inputs -> the stress input that would have caught the bug: "
          + "; ".join(f"own/{k}: {d}" for k, d in STRESS.items()))
    print(f"\n{missed} (bug, tiling, dtype) missed; {time.perf_counter() - start:.1f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
