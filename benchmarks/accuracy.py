"""Max ULP error per component in float64 and max relative error in float32, for
any backend, from the golden vectors.

    python benchmarks/accuracy.py --backend torch [--out torch.json]
    python benchmarks/accuracy.py --combine numpy.json torch.json tensorflow.json

The relative error of a vector is its max absolute error divided by the largest
finite |expected| over its outputs; a component's figure is the max over its
vectors. Each backend runs in the interpreter that has its framework.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np


def measure(backend: str, extra: list[str]) -> dict:
    from attnspec.spec.vectors import default_spec

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
                        backend, "-k", "test_golden", "--json", str(out), *extra],
                       capture_output=True, text=True)
        doc = json.loads(out.read_text())
    scale = {}
    for v in default_spec().vectors:
        finite = [np.abs(a[np.isfinite(a)]).max() for a in v.outputs.values()
                  if a.dtype.kind == "f" and np.isfinite(a).any()]
        scale[v.id] = max(finite) if finite else 0.0
    per = defaultdict(lambda: {"ulp_f64": 0.0, "rel_f32": 0.0})
    for r in doc["results"]:
        row = per[r["component"]]
        if r["dtype"] == "float64" and r["max_ulp"] is not None:
            row["ulp_f64"] = max(row["ulp_f64"], r["max_ulp"])
        if r["dtype"] == "float32" and r["max_abs_err"] is not None and scale[r["id"]] > 0:
            row["rel_f32"] = max(row["rel_f32"], r["max_abs_err"] / scale[r["id"]])
    status = {s: sum(r["status"] == s for r in doc["results"]) for s in ("pass", "fail")}
    return {"backend": backend, "versions": doc["versions"], "status": status,
            "components": dict(sorted(per.items()))}


def combine(paths: list[str]) -> str:
    docs = [json.loads(Path(p).read_text()) for p in paths]
    names = [d["backend"] for d in docs]
    head = ("| component | " + " | ".join(f"{n} f64 max ULP" for n in names) + " | "
            + " | ".join(f"{n} f32 max rel" for n in names) + " |")
    lines = [head, "|---" * (1 + 2 * len(names)) + "|"]
    for comp in docs[0]["components"]:
        cells = [f"{d['components'].get(comp, {}).get('ulp_f64', float('nan')):.3g}"
                 for d in docs]
        cells += [f"{d['components'].get(comp, {}).get('rel_f32', float('nan')):.2g}"
                  for d in docs]
        lines.append(f"| {comp} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend")
    ap.add_argument("--out")
    ap.add_argument("--backend-option", action="append", default=[])
    ap.add_argument("--combine", nargs="+")
    args = ap.parse_args()
    if args.combine:
        print(combine(args.combine))
        return 0
    extra = [x for o in args.backend_option for x in ("--backend-option", o)]
    doc = measure(args.backend, extra)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"{'component':22s} {'f64 max ULP':>12s} {'f32 max rel':>12s}   ({args.backend}: "
          f"{doc['status']['pass']} pass, {doc['status']['fail']} fail)")
    for comp, row in doc["components"].items():
        print(f"{comp:22s} {row['ulp_f64']:12.3g} {row['rel_f32']:12.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
