"""The spec's float32/float16/bfloat16 tolerances, derived from correct evaluation orders.

    python benchmarks/tolerances.py            # the table and a summary
    python benchmarks/tolerances.py --write    # update spec/cases/tolerances.json
    python benchmarks/tolerances.py --check    # fail on < 1.5x headroom or a missed bug
    python benchmarks/tolerances.py --torch cuda  # torch's kernels as one more order
    python benchmarks/tolerances.py --component mha --component sdpa

Per vector and dtype: need (the atol the worst correct order needs at the vector's rtol),
the tolerance, the headroom (tolerance over the worst order) and the worst order; then per
component and dtype each planted bug's largest deviation/tolerance (caught above 1 + 1/1.5,
marked ! otherwise). The method
is spec/TOLERANCES.md. After --write, run `attnspec generate`: a released vector whose
tolerance changed gets a revision <id>r<N>.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ holds the orders and the planted bugs

from tests import derive  # noqa: E402
from tests.mutants import catalogue  # noqa: E402


class TorchOrder:
    """torch's own kernels on ``device`` as one more order. On the CPU the torch backend
    offers float64 and float32 only; torch's CPU float16/bfloat16 kernels are used anyway
    (an order, not a supported configuration)."""

    def __init__(self, device: str):
        from attnspec.backends import get_backend

        backend = get_backend("torch")
        if device == "cpu":
            class CpuHalves(type(backend)):
                def dtypes(self, device: str) -> list[str]:
                    return ["float64", "float32", "float16", "bfloat16"]

            backend = CpuHalves(**getattr(backend, "options", {}))
        self.backend, self.device = backend, device
        self.dtypes = backend.dtypes(device)

    def __call__(self, dtype: str):
        return self if dtype in self.dtypes else None


class AutogradOrder(TorchOrder):
    """Autograd through a forward written step by step in the dtype: the torch backend's
    explicit path (matmul, softmax, norms... one op at a time, each result rounded to the
    dtype) on the CPU, differentiated by torch.autograd. A correct order (TOLERANCES.md):
    nothing in it is wrong, only rounded at other places than the hand-written VJPs."""

    def __init__(self):
        super().__init__("cpu")
        opts = dict(getattr(self.backend, "options", {}), attention="explicit")
        self.backend = type(self.backend)(**opts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update spec/cases/tolerances.json")
    ap.add_argument("--check", action="store_true", help="exit 1 on any problem")
    ap.add_argument("--torch", metavar="DEVICE", help="torch's kernels on DEVICE (cpu, cuda) "
                    "as one more order")
    ap.add_argument("--no-autograd", action="store_true", help="leave out the autograd order "
                    "(torch's explicit path differentiated by autograd; needs torch)")
    ap.add_argument("--stress", action="store_true", help="the stress family only (spec/STRESS.md; "
                    "without planted bugs; --write then replaces its entries only)")
    ap.add_argument("--component", action="append", help="only these components (--write "
                    "then replaces their entries only)")
    ap.add_argument("--quiet", action="store_true", help="the summary only")
    ap.add_argument("--verbose", action="store_true",
                    help="also every planted bug's deviation/tolerance on every vector")
    args = ap.parse_args(argv)

    from attnspec.spec.vectors import default_spec

    spec = default_spec()
    known = {v.component for v in spec.vectors}
    unknown = sorted(set(args.component or []) - known)
    if unknown:
        print(f"error: no component {', '.join(unknown)}", file=sys.stderr)
        return 2
    derived = derive.read()
    extra = {f"torch-{args.torch}": TorchOrder(args.torch)} if args.torch else {}
    if not args.no_autograd:
        extra["autograd-stepwise"] = AutogradOrder()
    rows = derive.measure(spec, args.component, derived, extra, None if args.stress else catalogue(),
                          stress=args.stress)
    if args.write:
        derive.choose(rows)
    if not args.quiet:
        print_rows(rows)
        if args.verbose:
            print_mutants_per_vector(rows)
        print_mutants(rows)
    print_summary(rows, derived)
    if args.write:
        doc = derive.document(rows)
        if args.stress:  # the others' entries stay as they are
            doc = {**derived, **{k: {**derived.get(k, {}), **v} for k, v in doc.items()
                                 if not k.startswith("_")}}
        elif args.component:  # the other components' entries stay as they are
            doc = merge_components(derived, doc, set(args.component))
        else:  # the stress family's entries stay as they are (--stress derives them)
            doc = {**doc, **{k: v for k, v in derived.items() if "/stress-" in k}}
        from attnspec.spec.generate import TOLERANCES_JSON, dumps

        TOLERANCES_JSON.write_text(dumps(doc), encoding="utf-8")
        print(f"wrote {TOLERANCES_JSON.relative_to(ROOT)}; now run `attnspec generate`")
        derived = doc
        for r in rows:
            r.current, r.chosen = r.chosen, None
    if args.check or args.write:
        found = derive.problems(rows, derived)
        if args.component:  # a subset cannot judge the whole file's claims
            found = [p for p in found if p.split("/")[0].split("[")[0] in args.component]
        for p in found:
            print(f"problem: {p}", file=sys.stderr)
        if found:
            return 1
    return 0


def merge_components(derived: dict, doc: dict, components: set[str]) -> dict:
    """``derived`` with the entries of ``components`` (their stress vectors aside) replaced
    by ``doc``'s in place: a vector of theirs that is gone loses its entry, a new one comes
    last, the other components' entries stay as they are (so the file's diff is theirs)."""
    def theirs(key: str) -> bool:
        return key.split("/")[0] in components and "/stress-" not in key

    missed = {c: d for c, d in derived.get("_uncatchable", {}).items() if c not in components}
    missed.update(doc.get("_uncatchable", {}))
    out = {k: doc[k] if theirs(k) else v for k, v in derived.items()
           if not theirs(k) or k in doc}
    out.update({k: v for k, v in doc.items() if not k.startswith("_") and k not in out})
    out["_uncatchable"] = dict(sorted(missed.items()))
    return out


def _g(x: float) -> str:
    return f"{x:.2g}" if x < float("inf") else "inf"


def print_rows(rows) -> None:
    print(f"{'vector':34} {'dtype':8} {'need atol':>9} {'rtol':>7} {'atol':>7} "
          f"{'headroom':>8}  {'worst order':20} {'caught':>7} {'min caught dev/tol':>18}")
    for r in rows:
        tol = r.chosen or r.current
        caught = r.caught(tol)
        low = min((r.mutants[m].ratio(tol) for m in caught), default=None)
        print(f"{r.id:34} {r.dtype:8} {_g(r.worst.need_atol(tol['rtol'])):>9} "
              f"{_g(tol['rtol']):>7} {_g(tol['atol']):>7} {_g(r.headroom(tol)):>8}  "
              f"{r.worst_order():20} {len(caught):>3}/{len(r.mutants):<3} "
              f"{_g(low) if low is not None else '-':>18}")


def print_mutants_per_vector(rows) -> None:
    print(f"\n{'vector':34} {'dtype':8} {'planted bug':44} {'dev/tol':>8}")
    for r in rows:
        tol = r.chosen or r.current
        for m, d in sorted(r.mutants.items()):
            ratio = d.ratio(tol)
            print(f"{r.id:34} {r.dtype:8} {m[:44]:44} {_g(ratio):>8}"
                  f"{'' if ratio > derive.CATCH else ' !'}")


def print_mutants(rows) -> None:
    table = derive.caught_by_component(rows)
    print("\nplanted bugs: largest deviation/tolerance over the component's vectors "
          f"(caught above {derive.CATCH:.3g}; ! not caught)")
    print(f"{'component':20} {'planted bug':44} " + " ".join(f"{d:>9}" for d in derive.DTYPES))
    comps = sorted({c for c, _ in table})
    for c in comps:
        names = sorted({m for (cc, _), ms in table.items() if cc == c for m in ms})
        for m in names:
            cells = []
            for d in derive.DTYPES:
                r = table.get((c, d), {}).get(m)
                mark = "" if r is None or r > derive.CATCH else "!"
                cells.append(f"{'-' if r is None else _g(r):>8}{mark}")
            print(f"{c:20} {m[:44]:44} " + " ".join(cells))


def print_summary(rows, derived) -> None:
    print("\nsummary")
    by_dtype = defaultdict(list)
    for r in rows:
        by_dtype[r.dtype].append(r)
    table = derive.caught_by_component(rows)
    for d in derive.DTYPES:
        rs = [r for r in by_dtype[d] if r.attainable]
        if not rs:
            continue
        low = min(rs, key=lambda r: r.headroom())
        changed = sum(r.changes_file for r in rs)
        ms = [ratio for (c, dd), m in table.items() if dd == d for ratio in m.values()]
        print(f"  {d:9} min headroom {low.headroom():.2f} ({low.id}, {low.worst_order()}); "
              f"vectors {len(rs)}, {changed} differ from the vector files; planted bugs caught "
              f"{sum(x > derive.CATCH for x in ms)}/{len(ms)}")
    if derive.SKIPPED:
        print(f"  extra orders could not run {len(derive.SKIPPED)} vector/dtype pairs, e.g. "
              f"{derive.SKIPPED[0]}")
    bad = derive.unattainable(rows)
    if bad:
        print(f"  no tolerance passes every correct order: {', '.join(bad)}")


if __name__ == "__main__":
    sys.exit(main())
