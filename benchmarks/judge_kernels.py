"""Real attention kernels on this CPU judged by the sdpa vectors (issue 21.3): a verdict
per kernel route and family of vectors, with the time each route took.

    python benchmarks/judge_kernels.py                 # every route, the committed set
    python benchmarks/judge_kernels.py --write         # ... and write tests/kernels/verdicts.json
    python benchmarks/judge_kernels.py --route flex --all-flex   # flex at float16, bfloat16, small GQA too
    python benchmarks/judge_kernels.py --max-elements 4096   # size limit (B*H*T*S)

Routes: tests/kernels/torch_routes.py (flex, sdpa-math, sdpa-flash) and
tests/kernels/ort_routes.py (ort-attention, ort-gqa, ort-mha). A cell is ``pass`` (every
judged vector of the family passes at every dtype the route runs), ``FAIL a/b`` (a of b
judged (vector, dtype) pairs fail, each with the cause its kernel page states: see
tests/kernels/verdicts.py), ``skip`` (the kernel cannot express the family). Only the
``output`` is judged: these kernels return no weights. No GPU is used. ``--write`` needs
the committed set (every route, no --dtype, --max-elements or --all-flex): README's
kernel table is rendered from that file by ``attnspec generate``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/kernels holds the routes

from tests.kernels import verdicts  # noqa: E402
from tests.kernels.vectors import value_vectors  # noqa: E402


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


def verdict(cell) -> str:
    judged = cell["pass"] + cell["fail"]
    if not judged:
        return "skip" if cell["skip"] else "not run"
    return "pass" if not cell["fail"] else f"FAIL {cell['fail']}/{judged}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--route", action="append")
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--max-elements", type=int)
    ap.add_argument("--all-flex", action="store_true", help="flex at every dtype, on every vector")
    ap.add_argument("--write", action="store_true", help=f"write {verdicts.RESULTS.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.write and (args.route or args.dtype or args.max_elements or args.all_flex):
        ap.error("--write takes the committed set: no --route, --dtype, --max-elements, --all-flex")
    warnings.filterwarnings("ignore")
    vectors = value_vectors(max_elements=args.max_elements)
    found = routes(args.route)
    if args.write and set(found) != set(verdicts.ROUTES):
        ap.error("--write needs torch and onnxruntime (the kernels extra)")
    print(f"{len(vectors)} sdpa value vectors (B*H*T*S <= {args.max_elements or 'any'}); CPU only, no GPU\n")
    print(f"| route | dtypes | {' | '.join(verdicts.COLUMNS)} | seconds |")
    print(f"|---|---|{'---|' * len(verdicts.COLUMNS)}---|")
    results = {}
    for name, (fn, dtypes, skip_cls) in found.items():
        dts = dtypes if args.all_flex else verdicts.route_dtypes(name, dtypes)
        dts = [d for d in dts if not args.dtype or d in args.dtype]
        start = time.perf_counter()
        vs = vectors if args.all_flex else verdicts.route_vectors(name, vectors)
        results[name] = verdicts.judge_route(name, fn, dts, skip_cls, vs)
        row = " | ".join(verdict(results[name]["families"][f]) for f in verdicts.COLUMNS)
        print(f"| {name} | {', '.join(dts)} | {row} | {time.perf_counter() - start:.1f} |", flush=True)
    unexplained = [(r, i, d) for r, res in results.items() for i, ds in res["failing"].items()
                   for d, why in ds.items() if why == "unexplained"]
    for r, i, d in unexplained:
        print(f"unexplained: {r} {i} {d}")
    if args.write:
        out = {"versions": verdicts.versions(), "columns": list(verdicts.COLUMNS), "routes": results,
               "causes": {k: list(x) for k, x in verdicts.CAUSES.items()}}
        verdicts.RESULTS.write_text(verdicts.dumps(out), encoding="utf-8")
        print(f"wrote {verdicts.RESULTS.relative_to(ROOT)}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
