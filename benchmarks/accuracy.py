"""Max ULP error per component in float64 and max relative error in float32, for
any backend, from the golden vectors.

    python benchmarks/accuracy.py --backend torch [--out torch.json]
    python benchmarks/accuracy.py --combine numpy.json torch.json tensorflow.json

The relative error of a vector is its max absolute error divided by the largest
finite |expected| over its float outputs; a component's figure is the max over
its vectors, failing ones included (the one results model,
``attnspec.conformance.results``). Each backend runs in the interpreter that has
its framework.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def measure(backend: str, extra: list[str]) -> dict:
    from attnspec.conformance import results
    from attnspec.spec.vectors import default_spec

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
                        backend, "-k", "test_golden", "--json", str(out), *extra],
                       capture_output=True, text=True)
        doc = results.load(out)
    return summarise(doc, results.scales_of(default_spec()))


def summarise(doc: dict, scales: dict[str, float]) -> dict:
    """Per component: max ULP at float64 and max relative error at float32, over every
    vector that measured them (conformance/results.py); the outcome counts."""
    from attnspec.conformance import results

    per = results.tally(doc["results"], scales=scales)
    comps = sorted({c for c, _ in per})
    empty = results.Tally()
    return {"backend": doc["backend"], "versions": doc.get("versions", {}),
            "status": results.total(per.values()).counts,
            "components": {c: {"ulp_f64": per.get((c, "float64"), empty).max_ulp,
                               "rel_f32": per.get((c, "float32"), empty).max_rel}
                           for c in comps}}


def combine(paths: list[str]) -> str:
    from attnspec.conformance.results import fmt

    docs = [json.loads(Path(p).read_text()) for p in paths]
    names = [d["backend"] for d in docs]
    head = ("| component | " + " | ".join(f"{n} f64 max ULP" for n in names) + " | "
            + " | ".join(f"{n} f32 max rel" for n in names) + " |")
    lines = [head, "|---" * (1 + 2 * len(names)) + "|"]
    for comp in docs[0]["components"]:
        cells = [fmt(d["components"].get(comp, {}).get("ulp_f64")) for d in docs]
        cells += [fmt(d["components"].get(comp, {}).get("rel_f32"), ".2g") for d in docs]
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
    from attnspec.conformance.results import fmt
    from attnspec.spec.errors import AttnSpecError

    extra = [x for o in args.backend_option for x in ("--backend-option", o)]
    try:
        doc = measure(args.backend, extra)
    except AttnSpecError as exc:
        print(f"accuracy.py: error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    counts = ", ".join(f"{n} {o}" for o, n in doc["status"].items() if n)
    print(f"{'component':22s} {'f64 max ULP':>12s} {'f32 max rel':>12s}   ({args.backend}: "
          f"{counts})")
    for comp, row in doc["components"].items():
        print(f"{comp:22s} {fmt(row['ulp_f64']):>12s} {fmt(row['rel_f32'], '.2g'):>12s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
