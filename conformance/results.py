"""One model of conformance results, read by every summary of them.

``attnspec verify --json`` (and each run of ``attnspec report``) writes a results
document: ``backend``, ``device``, ``dtypes``, ``versions``, ``problems`` and
``results``, one entry per (vector, dtype) run::

    {"id": "sdpa/basic-001", "component": "sdpa", "dtype": "float32",
     "status": "pass" | "fail" | "error" | "missing", "max_abs_err": 1e-7 | null,
     "max_ulp": 3.0 | null, "message": "...", "known_failure": "reason"  (optional)}

Each result counts under exactly one outcome (:data:`OUTCOMES`): ``known`` when it
did not pass and matched a known-failure pattern, else its status. The worst
absolute, ULP and relative errors are over every result that measured them,
passing or failing, so a summary never hides the error of a failing vector.
The verify table, report.md, report.html and the benchmark scripts all summarise
through :func:`tally`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from attnspec.spec.errors import AttnSpecError

STATUSES = ("pass", "fail", "error", "missing")
OUTCOMES = (*STATUSES, "known")
RESULT_FIELDS = ("id", "component", "dtype", "status", "max_abs_err", "max_ulp")


class ResultsError(AttnSpecError, ValueError):
    """A results document that is not what ``attnspec verify --json`` writes."""


def outcome(r: dict) -> str:
    """The one outcome a result counts under."""
    return "known" if r.get("known_failure") else r["status"]


def _max(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else max(a, b)


@dataclass
class Tally:
    """Counts per outcome and worst errors over a group of results."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    max_abs: float | None = None
    max_ulp: float | None = None
    max_rel: float | None = None  # max_abs_err / max |expected|, when scales are given

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def __getitem__(self, outcome_name: str) -> int:
        return self.counts[outcome_name]

    def add(self, r: dict, scale: float | None = None) -> None:
        self.counts[outcome(r)] += 1
        self.max_abs = _max(self.max_abs, r.get("max_abs_err"))
        self.max_ulp = _max(self.max_ulp, r.get("max_ulp"))
        if scale and r.get("max_abs_err") is not None:
            self.max_rel = _max(self.max_rel, r["max_abs_err"] / scale)

    def merge(self, other: Tally) -> Tally:
        out = Tally({k: self.counts[k] + other.counts[k] for k in OUTCOMES})
        out.max_abs, out.max_ulp = _max(self.max_abs, other.max_abs), _max(self.max_ulp,
                                                                            other.max_ulp)
        out.max_rel = _max(self.max_rel, other.max_rel)
        return out


def by_component_dtype(r: dict) -> tuple[str, str]:
    return r["component"], r["dtype"]


def tally(results: Iterable[dict], key: Callable[[dict], object] = by_component_dtype,
          scales: dict[str, float] | None = None) -> dict:
    """``{key(result): Tally}`` in first-seen order; ``scales`` (vector id -> max
    |expected|, see :func:`scales_of`) adds the relative error."""
    out: dict = {}
    for r in results:
        out.setdefault(key(r), Tally()).add(r, (scales or {}).get(r["id"]))
    return out


def total(tallies: Iterable[Tally]) -> Tally:
    out = Tally()
    for t in tallies:
        out = out.merge(t)
    return out


def scales_of(spec) -> dict[str, float]:
    """Each value vector's largest finite |expected| over its float outputs (0 when it
    has none): the denominator of the relative error."""
    out = {}
    for v in spec.vectors:
        finite = [float(np.abs(a[np.isfinite(a)]).max()) for a in v.outputs.values()
                  if a.dtype.kind == "f" and np.isfinite(a).any()]
        out[v.id] = max(finite, default=0.0)
    return out


def check_document(doc, source: str = "results") -> dict:
    """Refuse a document that is not a results document, naming what is wrong."""
    if not isinstance(doc, dict):
        raise ResultsError(f"{source}: not a JSON object")
    for name in ("backend", "device", "results"):
        if name not in doc:
            raise ResultsError(f"{source}: field '{name}' is missing (not written by "
                               f"`attnspec verify --json`?)")
    if not isinstance(doc["results"], list):
        raise ResultsError(f"{source}: field 'results' must be an array")
    for i, r in enumerate(doc["results"]):
        absent = [f for f in RESULT_FIELDS if not isinstance(r, dict) or f not in r]
        if absent:
            raise ResultsError(f"{source}: results[{i}]: field '{absent[0]}' is missing")
        if r["status"] not in STATUSES:
            raise ResultsError(f"{source}: results[{i}] ({r['id']}): status {r['status']!r} "
                               f"is not one of {list(STATUSES)}")
    return doc


def load(path: str | Path) -> dict:
    """Read and check a results document (``attnspec verify --json PATH``)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read results {path}: {exc}") from None
    return check_document(doc, str(path))


def fmt(x: float | None, spec: str = ".3g") -> str:
    """A worst error for a table: ``-`` when nothing measured it."""
    return "-" if x is None else format(x, spec)
