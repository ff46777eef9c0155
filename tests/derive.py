"""Tolerances derived from correct evaluation orders, and checked against planted bugs.

For each live value vector and each of float32, float16, bfloat16:

- **need**: the deviation of every correct order (tests/orders.py) from the expected values,
  element by element over outputs and intermediates (the suite judges both);
- **tolerance**: (rtol, atol) with the vector's rtol; an element passes when
  ``err <= atol + rtol * |expected|``;
- **ratio** of a run: ``max(err / (atol + rtol |expected|))``; the run passes when <= 1.
  **headroom** = 1 / ratio of the worst correct order; at least ``HEADROOM`` is required;
- **mutants**: every planted bug of tests/test_mutants_*.py for the vector's component, run in
  float64 (the bug alone, without rounding); this vector catches it when its ratio exceeds
  ``CATCH = 1 + 1/HEADROOM``: the bug's own rounding in a low-precision run deviates no more
  than a correct order's (< 1/HEADROOM of the tolerance), so it cannot pull the bug back
  inside the tolerance.

The chosen atol is the vector's current one when that has the headroom (no needless
revision); otherwise the tightest admissible atol: the smallest 1-2 significant digit value
>= what 1.5x the worst order needs (and >= the dtype's unit roundoff). A planted bug that no
vector of its component would then catch, but one vector's tightest atol does, gets that
vector tightened.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from attnspec.conformance.runner import call, vjp
from attnspec.spec.generate import REVISION_RE, TOLERANCES_JSON

from .orders import ORDERS, EmulatedBackend, EmulationBypassed

DTYPES = ("float32", "float16", "bfloat16")
HEADROOM = 1.5
CATCH = 1 + 1 / HEADROOM  # a planted bug's float64 deviation/tolerance above this is caught
# The smallest atol chosen: the dtype's unit roundoff, rounded to a short value.
FLOOR = {"float32": 6e-8, "float16": 5e-4, "bfloat16": 4e-3}
NICE = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
NOTE = ("Derived by benchmarks/tolerances.py --write from the correct evaluation orders of "
        "tests/orders.py, with >= 1.5x headroom over the worst; see spec/TOLERANCES.md.")


def nice_up(x: float) -> float:
    """The smallest value of the form {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8} x 10^k >= x."""
    if x <= 0:
        return 0.0
    k = math.floor(math.log10(x))
    for m in NICE:
        v = float(f"{m}e{k}") if m < 10 else float(f"1e{k + 1}")
        if v >= x * (1 - 1e-12):
            return v
    return float(f"1e{k + 1}")


@dataclass
class Deviation:
    """Element-wise |got - expected| (inf where a non-finite or exact value differs)."""
    err: np.ndarray
    mag: np.ndarray

    def ratio(self, tol: dict) -> float:
        if self.err.size == 0:
            return 0.0
        bound = tol["atol"] + tol["rtol"] * self.mag
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(self.err == 0, 0.0, self.err / bound)
        return float(np.max(r))

    def need_atol(self, rtol: float, headroom: float = 1.0) -> float:
        """The smallest atol with which ``headroom`` x this deviation passes."""
        if self.err.size == 0:
            return 0.0
        return float(max(0.0, np.max(headroom * self.err - rtol * self.mag)))

    @staticmethod
    def worst(devs: list[Deviation]) -> Deviation:
        return Deviation(np.max([d.err for d in devs], axis=0), devs[0].mag)


def deviation(v, outputs: dict | None, inter: dict) -> Deviation:
    """How far a run is from the vector's expected outputs and intermediates (for a gradient
    vector: ``outputs`` and ``inter`` are the input and the parameter gradients)."""
    errs, mags = [], []
    expected = ((v.gradients.get("inputs", {}), v.gradients.get("params", {}))
                if v.expect == "gradient" else (v.outputs, v.intermediates))
    for group, got in zip(expected, (outputs, inter)):
        for name, exp in group.items():
            g = None if got is None else got.get(name)
            errs.append(_err(g, exp).ravel())
            mags.append(np.where(np.isfinite(exp), np.abs(exp), 0.0).ravel().astype(float)
                        if exp.dtype.kind == "f" else np.zeros(exp.size))
    if not errs:
        return Deviation(np.zeros(0), np.zeros(0))
    return Deviation(np.concatenate(errs), np.concatenate(mags))


def _err(got, exp: np.ndarray) -> np.ndarray:
    if got is None or np.shape(got) != exp.shape:
        return np.full(exp.shape, np.inf)
    got = np.asarray(got)
    if exp.dtype.kind != "f":
        return np.where(got.astype(exp.dtype) == exp, 0.0, np.inf)
    got = got.astype(np.float64)
    finite = np.isfinite(exp)
    same = (np.isnan(exp) & np.isnan(got)) | (got == exp)
    with np.errstate(invalid="ignore"):
        e = np.where(finite, np.abs(got - exp), np.where(same, 0.0, np.inf))
    return np.where(np.isnan(e), np.inf, e)


# -- running ---------------------------------------------------------------------------

def _run(backend, spec, v, dtype: str, device: str = "cpu"):
    """(outputs, intermediates); for a gradient vector (input gradients, param gradients)."""
    fn = spec.functions[v.function]
    try:
        with np.errstate(all="ignore"):
            if v.expect == "gradient":
                return vjp(backend, fn, v.inputs, v.attributes, v.params, v.cotangents,
                           dtype, device)[:2]
            return call(backend, fn, v.inputs, v.attributes, v.params, dtype, device)
    except EmulationBypassed:
        raise
    except Exception:  # a crash deviates everywhere
        return None, {}


def order_deviations(spec, v, dtype: str, extra: dict | None = None) -> dict[str, Deviation]:
    """Each correct order's deviation at ``dtype`` (``extra``: name -> an object with
    ``backend`` and ``device``, e.g. torch's kernels; None where it lacks the dtype)."""
    out = {o.name: Deviation.worst([deviation(v, *_run(EmulatedBackend(dtype, x), spec, v, dtype))
                                    for x in o.variants()]) for o in ORDERS}
    for name, other in (extra or {}).items():
        if other is None:
            continue
        try:
            got = _run_raising(other.backend, spec, v, dtype, other.device)
        except Exception as exc:  # a framework that cannot run it is no order
            SKIPPED.append(f"{name} {v.id}[{dtype}]: {type(exc).__name__}: {exc}"[:200])
            continue
        out[name] = deviation(v, *got)
    return out


def _run_raising(backend, spec, v, dtype: str, device: str):
    fn = spec.functions[v.function]
    with np.errstate(all="ignore"):
        if v.expect == "gradient":
            return vjp(backend, fn, v.inputs, v.attributes, v.params, v.cotangents, dtype,
                       device)[:2]
        return call(backend, fn, v.inputs, v.attributes, v.params, dtype, device)


# What an extra order (a framework) could not run, for the summary.
SKIPPED: list[str] = []


@dataclass
class Row:
    """One vector at one dtype."""
    key: str  # the id tolerances.json names (a revision's stem)
    id: str
    component: str
    dtype: str
    orders: dict[str, Deviation]
    current: dict  # the tolerance in force now (tolerances.json, else the vector file)
    mutants: dict[str, Deviation] = field(default_factory=dict)
    chosen: dict | None = None
    file: dict | None = None  # the tolerance the vector file holds now

    @property
    def changes_file(self) -> bool:
        """Whether ``attnspec generate`` would give this vector another tolerance."""
        return (self.chosen or self.current) != self.file

    @property
    def worst(self) -> Deviation:
        return Deviation.worst(list(self.orders.values()))

    def headroom(self, tol: dict | None = None) -> float:
        r = self.worst.ratio(tol or self.chosen or self.current)
        return math.inf if r == 0 else 1.0 / r

    def worst_order(self) -> str:
        tol = self.chosen or self.current
        return max(self.orders, key=lambda o: self.orders[o].ratio(tol))

    def caught(self, tol: dict | None = None) -> set[str]:
        tol = tol or self.chosen or self.current
        return {m for m, d in self.mutants.items() if d.ratio(tol) > CATCH}

    @property
    def attainable(self) -> bool:
        return bool(np.all(np.isfinite(self.worst.err)))


def live_vectors(spec, components=None, stress: bool = False):
    """The live value and gradient vectors; ``stress``: the stress family instead of the
    others (its sizes make every order's emulation take minutes: benchmarks/tolerances.py
    --stress derives it on its own)."""
    for v in spec.vectors:
        if v.expect in ("value", "gradient") and not v.deprecated and \
                ("stress" in v.flags) == stress and (components is None or v.component in components):
            yield v


def measure(spec, components=None, derived: dict | None = None, extra_orders=None,
            mutants=None, stress: bool = False) -> list[Row]:
    """A Row per live value vector and dtype; ``mutants``: (component, name, backend) list;
    ``stress``: the stress family's vectors instead of the others."""
    derived = read(TOLERANCES_JSON) if derived is None else derived
    by_component = defaultdict(list)
    for component, name, backend in (mutants or []):
        by_component[component].append((name, backend))
    rows = []
    for v in live_vectors(spec, components, stress):
        key = REVISION_RE.match(v.id).group(1)
        planted = {name: deviation(v, *_run(backend, spec, v, "float64"))
                   for name, backend in by_component[v.component]}
        for dtype in DTYPES:
            if dtype not in v.dtypes:
                continue
            extra = {n: make(dtype) for n, make in (extra_orders or {}).items()}
            current = derived.get(key, {}).get(dtype) or v.tolerances[dtype]
            rows.append(Row(key, v.id, v.component, dtype, order_deviations(spec, v, dtype, extra),
                            _floats(current), planted, file=_floats(v.tolerances[dtype])))
    return rows


def cost(v) -> int:
    """A vector's expected share of :func:`measure`'s time: its low-precision dtypes times
    (3 + its inputs and parameters), as the time goes in NumPy calls on small arrays and a
    composite takes more parameters (measured per component, 2026-11-29: within 2x)."""
    return sum(d in v.dtypes for d in DTYPES) * (3 + len(v.inputs) + len(v.params))


def shards(spec, n: int) -> list[list[str]]:
    """The components with live vectors dealt into ``n`` lists of about equal :func:`cost`
    (the most costly first, each to the lightest list): :func:`problems` judges a component
    by its own rows alone, so the shards' problems together are the whole derivation's, and
    ``n`` processes can share it."""
    totals: dict[str, int] = defaultdict(int)
    for v in live_vectors(spec):
        totals[v.component] += cost(v)
    out: list[list[str]] = [[] for _ in range(n)]
    load = [0] * n
    for c in sorted(totals, key=lambda c: (-totals[c], c)):
        i = load.index(min(load))
        out[i].append(c)
        load[i] += totals[c]
    return [sorted(s) for s in out]


SHARDS = 2  # tests/test_tolerances_shard{1,2}.py: one per pytest-xdist worker of tox's numpy


def shard_problems(spec, index: int, planted) -> list[str]:
    """:func:`problems` of the ``index``-th of the :data:`SHARDS` shards' components."""
    derived = read()
    return problems(measure(spec, shards(spec, SHARDS)[index], derived, None, planted), derived)


def tightest(row: Row) -> dict:
    """The smallest short atol with which 1.5x the worst correct order passes."""
    rtol = row.current["rtol"]
    return {"rtol": rtol, "atol": nice_up(max(row.worst.need_atol(rtol, HEADROOM),
                                              FLOOR[row.dtype]))}


def _floats(tol: dict) -> dict:
    return {"rtol": float(tol["rtol"]), "atol": float(tol["atol"])}


def choose(rows: list[Row]) -> None:
    """Set ``row.chosen`` for every row: the current tolerance where it has the headroom, else
    the tightest; then, for each planted bug that no vector of its component catches but the
    tightest tolerance of some vector would, that vector's tightest (fewest revisions)."""
    for r in rows:
        keep = not r.attainable or r.headroom(r.current) >= HEADROOM
        r.chosen = dict(r.current) if keep else tightest(r)
    groups = defaultdict(list)
    for r in rows:
        if r.attainable:
            groups[(r.component, r.dtype)].append(r)
    for group in groups.values():
        for m in sorted({m for r in group for m in r.mutants}):
            if any(m in r.caught(r.chosen) for r in group):
                continue
            best = max(group, key=lambda r: r.mutants[m].ratio(tightest(r)) if m in r.mutants
                       else 0.0)
            if m in best.caught(tightest(best)):
                best.chosen = tightest(best)


# -- what the table claims ---------------------------------------------------------------

def caught_by_component(rows: list[Row]) -> dict[tuple[str, str], dict[str, float]]:
    """(component, dtype) -> mutant -> its largest ratio over the component's vectors."""
    out: dict = defaultdict(dict)
    for r in rows:
        tol = r.chosen or r.current
        for m, d in r.mutants.items():
            out[(r.component, r.dtype)][m] = max(out[(r.component, r.dtype)].get(m, 0.0),
                                                 d.ratio(tol))
    return out


def uncatchable(rows: list[Row]) -> dict[str, dict[str, list[str]]]:
    out: dict = defaultdict(dict)
    for (comp, dtype), ms in sorted(caught_by_component(rows).items()):
        missed = sorted(m for m, r in ms.items() if r <= CATCH)
        if missed:
            out[comp][dtype] = missed
    return dict(out)


def unattainable(rows: list[Row]) -> list[str]:
    return sorted(f"{r.id}[{r.dtype}]" for r in rows if not r.attainable)


def document(rows: list[Row]) -> dict:
    """The tolerances.json content for ``rows`` (chosen)."""
    doc: dict = {"_note": NOTE}
    for r in sorted(rows, key=lambda r: r.key):
        doc.setdefault(r.key, {})[r.dtype] = r.chosen
    doc["_uncatchable"] = uncatchable(rows)
    return doc


def problems(rows: list[Row], derived: dict) -> list[str]:
    """What --check fails on, one line each."""
    out = []
    for r in rows:
        if r.key not in derived or r.dtype not in derived[r.key]:
            out.append(f"{r.id}[{r.dtype}]: no derived tolerance (run benchmarks/tolerances.py "
                       f"--write)")
        elif r.attainable and r.headroom() < HEADROOM:
            out.append(f"{r.id}[{r.dtype}]: headroom {r.headroom():.2f} < {HEADROOM} over the "
                       f"worst correct order ({r.worst_order()}) with {r.current}")
    out += [f"{x}: no tolerance passes every correct order (an arg-max or a non-finite value "
            f"differs): restrict the vector's dtypes with a dtype_note, or change the case"
            for x in unattainable(rows)]
    claimed_missed = derived.get("_uncatchable", {})
    for (comp, dtype), ms in sorted(caught_by_component(rows).items()):
        listed = set(claimed_missed.get(comp, {}).get(dtype, []))
        for m, ratio in sorted(ms.items()):
            if ratio <= CATCH and m not in listed:
                out.append(f"{comp}[{dtype}]: planted bug {m} is caught by no vector (largest "
                           f"deviation/tolerance {ratio:.2f} <= {CATCH:.2f}) but is not listed "
                           f"as uncatchable")
            if ratio > CATCH and m in listed:
                out.append(f"{comp}[{dtype}]: planted bug {m} is listed as uncatchable but "
                           f"is caught (deviation/tolerance {ratio:.2f})")
    return out


def read(path: Path | str = TOLERANCES_JSON) -> dict:
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
