"""Real attention kernels on this CPU judged by the sdpa vectors (issue 21.3): a verdict
per kernel route and family of vectors, with the time each route took.

    python benchmarks/judge_kernels.py                 # every route
    python benchmarks/judge_kernels.py --route flex --dtype float32
    python benchmarks/judge_kernels.py --max-elements 4096   # size limit (B*H*T*S)

Routes: tests/kernels/torch_routes.py (flex, sdpa-math, sdpa-flash) and
tests/kernels/ort_routes.py (ort-attention, ort-gqa, ort-mha). A cell is ``pass`` (every
judged vector of the family passes at every dtype the route runs), ``FAIL a/b`` (a of b
judged (vector, dtype) pairs fail, the differences the kernel pages state), ``skip`` (the
kernel cannot express the family; reason in --verbose). Only the ``output`` is judged:
these kernels return no weights. No GPU is used.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/kernels holds the routes

from tests.kernels.vectors import as_call, judged_output, value_vectors  # noqa: E402

FAMILIES = (("non-finite", ("non-finite",)), ("fully-masked", ("fully-masked", "empty-axis")),
            ("softcap", ("softcap",)), ("gqa", ("gqa",)), ("causal", ("causal",)),
            ("bias", ("bias",)), ("mask", ("mask",)), ("scale", ("scale", "inexact-attribute")))


def family(v) -> str:
    return next((name for name, flags in FAMILIES if set(flags) & set(v.flags)), "basic")


def routes(names):
    found = {}
    try:
        from tests.kernels import torch_routes
        found.update({n: (f, torch_routes.DTYPES[n], torch_routes.Skip)
                      for n, f in torch_routes.ROUTES.items()})
    except ImportError as exc:
        print(f"torch routes unavailable: {exc}")
    try:
        from tests.kernels import ort_routes
        found.update({n: (f, ort_routes.DTYPES[n], ort_routes.Skip) for n, f in ort_routes.ROUTES.items()})
    except ImportError as exc:
        print(f"onnxruntime routes unavailable: {exc}")
    return {n: r for n, r in found.items() if not names or n in names}


def judge_route(fn, dtypes, skip_cls, vectors, verbose=False):
    cells = defaultdict(lambda: {"pass": 0, "fail": 0, "skip": 0})
    for v in vectors:
        c = as_call(v)
        for dtype in dtypes:
            if dtype not in v.dtypes:
                continue
            try:
                status = judged_output(v, dtype, fn(c, dtype)["output"]).status
            except skip_cls as exc:
                status = "skip"
                if verbose:
                    print(f"  skip {v.id} {dtype}: {exc}")
            except Exception as exc:
                status = "fail"
                if verbose:
                    print(f"  error {v.id} {dtype}: {type(exc).__name__}: {str(exc)[:120]}")
            cells[family(v)]["fail" if status != "pass" and status != "skip" else status] += 1
    return cells


def verdict(cell) -> str:
    judged = cell["pass"] + cell["fail"]
    if not judged:
        return "skip"
    return "pass" if not cell["fail"] else f"FAIL {cell['fail']}/{judged}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--route", action="append")
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--max-elements", type=int, default=1 << 20)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    vectors = value_vectors(max_elements=args.max_elements)
    names = [n for n, _ in FAMILIES] + ["basic"]
    print(f"{len(vectors)} sdpa value vectors (B*H*T*S <= {args.max_elements}); CPU only, no GPU\n")
    print(f"| route | dtypes | {' | '.join(names)} | seconds |")
    print(f"|---|---|{'---|' * len(names)}---|")
    for name, (fn, dtypes, skip_cls) in routes(args.route).items():
        dts = [d for d in dtypes if not args.dtype or d in args.dtype]
        start = time.perf_counter()
        cells = judge_route(fn, dts, skip_cls, vectors, args.verbose)
        row = " | ".join(verdict(cells[f]) for f in names)
        print(f"| {name} | {', '.join(dts)} | {row} | {time.perf_counter() - start:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
