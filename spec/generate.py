"""Turn the case modules into vector files, deterministically.

``attnspec generate`` writes ``vectors/<component>.json``, the manifest and the
release record of this version (``releases/<SPEC_VERSION>.json``); ``--check``
writes nothing and fails, naming the files, if any byte would change.

Every vector gets its own tolerances and content hash. A vector listed in an
earlier (frozen) release record must come out with the same content: the
generator fails naming its id otherwise. Where the derived tolerances
(``cases/tolerances.json``) differ from a released vector's own, the released
vector is kept, deprecated, and superseded by a new revision ``<id>r<N>``.
See spec/CITING.md.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
import re
from pathlib import Path

import mpmath
import numpy as np

from . import SPEC_VERSION
from .cases._build import Rng
from .citing import HASHES_MODULE, RELEASES_DIR, dump_record, frozen_vectors, hashes_with, make_record
from .oracle import vjps
from .oracle.core import DPS, mp, precision, tofloat
from .tensor import FLOAT_DTYPES, decode, encode, representable
from .vectors import MANIFEST, VECTORS_DIR, content_hash
from .workers import run_tasks

ID_RE = re.compile(r"^[a-z0-9_]+/[a-z0-9][a-z0-9-]*-\d{3}(r\d+)?$")
REVISION_RE = re.compile(r"^(.*-\d{3})(?:r(\d+))?$")
FLAGS_JSON = Path(__file__).parent / "schema" / "flags.json"
# Per-vector tolerances derived from real evaluation orders (benchmarks/tolerances.py):
# {"<id>": {"<dtype>": {"rtol": r, "atol": a}}, "_default": {"<component>": {...}}}; a dtype
# left out keeps the vector's (or the component's) value; keys starting with "_" are notes.
TOLERANCES_JSON = Path(__file__).parent / "cases" / "tolerances.json"


class GenerationError(Exception):
    pass


def case_modules() -> list[str]:
    from . import cases

    return sorted(m.name for m in pkgutil.iter_modules(cases.__path__) if not m.name.startswith("_"))


def known_flags() -> set[str]:
    return set(json.loads(FLAGS_JSON.read_text(encoding="utf-8"))["flags"])


def read_derived(path: Path | str | None = TOLERANCES_JSON) -> dict:
    """The derived tolerances; {} for no path or an absent file other than the spec's own,
    whose absence (a broken install) is an error, not a silent change of every tolerance."""
    if path is None:
        return {}
    path = Path(path)
    if not path.exists():
        if path.resolve() == TOLERANCES_JSON.resolve():
            raise GenerationError(f"{path} is missing: the derived tolerances are part of the "
                                  f"spec (reinstall attnspec; package data 'cases/*.json')")
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def build_component(module_name: str, frozen: dict | None = None, derived: dict | None = None
                    ) -> tuple[str, str, list[dict]]:
    """Run one case module through the oracle.

    ``frozen``: id -> release-record entry of every released vector of the component
    (its content may not change); ``derived``: the derived tolerances. Returns the file
    name, the file text and, per vector, what a release record holds.
    """
    mod = importlib.import_module(f"{__package__}.cases.{module_name}")
    comp = mod.COMPONENT
    frozen, derived = frozen or {}, derived or {}
    default = _tolerances(derived.get("_default", {}).get(comp.id), comp.tolerances)
    with precision():
        every = [*mod.cases(Rng(comp.id)), *_grad_cases(mod, comp.id)]
        built = [(case, _build_case(comp, case)) for case in every]
    vectors = _resolve(comp.id, built, frozen, derived, default)
    _check_ids(comp.id, vectors)
    _check_flags(vectors)
    _check_released(comp.id, vectors, frozen)
    doc = {
        "component": comp.id,
        "spec_version": SPEC_VERSION,
        "page": f"components/{comp.id}.md",
        "functions": {name: fn.header() for name, fn in comp.functions.items()},
        "tolerances": default,
        "vectors": vectors,
    }
    name = f"{comp.id}.json"
    entries = [{"id": v["id"], "file": name, "sha256": v["sha256"], "tolerances": v["tolerances"],
                "deprecated": v.get("deprecated", False)} for v in vectors]
    return name, dumps(doc), entries


def _grad_cases(mod, component: str) -> list:
    """The module's gradient cases, on their own stream (none for a component without)."""
    make = getattr(mod, "grad_cases", None)
    return [] if make is None else list(make(Rng(f"{component}/grad")))


def _tolerances(given: dict | None, base: dict) -> dict:
    """``given`` over ``base``, per dtype, as floats (1e-2 and 0.01 hash alike)."""
    merged = {d: dict(base[d]) for d in FLOAT_DTYPES}
    for d, t in (given or {}).items():
        if d.startswith("_"):  # a note, not a dtype
            continue
        if d not in merged:
            raise GenerationError(f"tolerances name an unknown dtype {d!r}")
        merged[d].update(t)
    return {d: {"rtol": float(t["rtol"]), "atol": float(t["atol"])} for d, t in merged.items()}


# Key order of a vector in its file (the content hash does not depend on it).
ORDER = ("id", "sha256", "function", "description", "flags", "dtypes", "dtype_note", "deprecated",
         "superseded_by", "supersedes", "expect", "attributes", "tolerances", "inputs", "params",
         "outputs", "intermediates", "cotangents", "gradients", "error", "error_mentions")


def _resolve(component: str, built: list, frozen: dict, derived: dict, default: dict) -> list[dict]:
    """Give every vector its tolerances; a released vector keeps the ones it was released
    with, and where the derived tolerances differ it is followed by a revision that has them."""
    out: list[dict] = []
    yielded = {case.id for case, _ in built}
    explicit = {case.supersedes for case, _ in built if case.supersedes}
    for case, v in built:
        if case.supersedes:
            v["supersedes"] = case.supersedes
        if case.id not in frozen:
            v["tolerances"] = _tolerances(derived.get(case.id, case.tolerances), default)
            out.append(v)
            continue
        v["tolerances"] = _tolerances(None, frozen[case.id]["tolerances"])
        released = v
        if content_hash(v) != frozen[case.id]["sha256"] and "gradients" in v:
            released = _released_content(component, v, frozen[case.id])
        chain = [released] + _released_revisions(released, frozen, yielded, v)
        last = chain[-1]
        stem = REVISION_RE.match(case.id).group(1)
        given = derived.get(last["id"], derived.get(case.id, derived.get(stem)))
        want = _tolerances(given, last["tolerances"])
        zeros = released is not v and not _same_gradients(last, v)
        if (want != last["tolerances"] or zeros) and not case.deprecated and last["id"] not in explicit:
            chain.append(_revision(v if zeros else last, want, last["id"]))
        out.extend(chain)
    return _link(component, out)


def _released_content(component: str, v: dict, entry: dict) -> dict:
    """The released vector of ``v``'s id, where ``v`` differs from it only in exact-zero
    gradients that the release stored as oracle residues (|x| < 1e-40, the noise of a sum
    that cancels at 50 digits) and ``v`` stores as 0.0. Residues are not reproducible (they
    depend on the rounding of each product), so the released content is read back from
    the package's vector file, pinned by the release record's hash; ``v`` becomes its
    revision."""
    path = VECTORS_DIR / f"{component}.json"
    doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"vectors": []}
    old = next((dict(x) for x in doc["vectors"] if x["id"] == v["id"]), None)
    if old is None or content_hash(old) != entry["sha256"] or not _only_residues(old, v):
        raise GenerationError(
            f"{v['id']}: its content would change (released in attnspec {entry['released']} "
            f"with sha256 {entry['sha256'][:12]}): a released vector is never changed in place; "
            f"add {REVISION_RE.match(v['id']).group(1)}r<N> with supersedes={v['id']!r} "
            f"(see spec/CITING.md)")
    for k in ("sha256", "deprecated", "superseded_by"):
        old.pop(k, None)
    return old


def _only_residues(old: dict, new: dict) -> bool:
    """``old`` and ``new`` agree except where ``new`` has 0.0 and ``old`` a residue."""
    if {k: x for k, x in old.items() if k not in ("gradients", "sha256", "deprecated", "superseded_by")} \
            != {k: x for k, x in new.items() if k != "gradients"}:
        return False
    for group in ("inputs", "params"):
        a, b = old["gradients"][group], new["gradients"][group]
        if set(a) != set(b):
            return False
        for name in a:
            x, y = np.asarray(decode(a[name])), np.asarray(decode(b[name]))
            if x.shape != y.shape or not np.all((x == y) | ((y == 0) & (np.abs(x) < 1e-40))):
                return False
    return True


def _same_gradients(a: dict, b: dict) -> bool:
    """``a`` and ``b`` hold bitwise the same gradients (a revision released for its
    tolerances alone still holds the residues, and needs one more for the zeros)."""
    for group in ("inputs", "params"):
        x, y = a["gradients"][group], b["gradients"][group]
        if set(x) != set(y) or any(not np.array_equal(np.asarray(decode(x[n])), np.asarray(decode(y[n])))
                                   for n in x):
            return False
    return True


def _released_revisions(v: dict, frozen: dict, yielded: set, fresh: dict | None = None) -> list[dict]:
    """Automatic revisions of ``v`` already released (rebuilt from its case): each one a
    copy of the one before with new tolerances, or, where that is not what was released, a
    copy of ``fresh`` (the case built now: a revision that stored exact zeros for the
    residues of the one before)."""
    stem, n = REVISION_RE.match(v["id"]).groups()
    out, prev, k = [], v, int(n or 1) + 1
    while f"{stem}r{k}" in frozen and f"{stem}r{k}" not in yielded:
        entry = frozen[f"{stem}r{k}"]
        tolerances = _tolerances(None, entry["tolerances"])
        tried = [_revision(prev, tolerances)]
        if fresh is not None and fresh is not v:
            tried.append(_revision(fresh, tolerances, prev["id"]))
        prev = next((c for c in tried if content_hash(c) == entry["sha256"]), tried[0])
        out.append(prev)
        k += 1
    return out


def _revision(old: dict, tolerances: dict, of: str | None = None) -> dict:
    """A copy of ``old`` under the next revision id of ``of`` (default: old's), with new
    tolerances."""
    of = old["id"] if of is None else of
    stem, n = REVISION_RE.match(of).groups()
    new = dict(old, id=f"{stem}r{int(n or 1) + 1}", tolerances=tolerances, supersedes=of)
    new.pop("superseded_by", None)
    new.pop("deprecated", None)
    return new


def _link(component: str, vectors: list[dict]) -> list[dict]:
    """Mark each superseded vector deprecated + superseded_by, hash, order the keys."""
    by_id = {v["id"]: v for v in vectors}
    for v in vectors:
        target = v.get("supersedes")
        if target is None:
            continue
        old = by_id.get(target)
        if old is None:
            raise GenerationError(f"{v['id']}: supersedes {target!r}, which {component} does not have")
        if old.get("superseded_by") not in (None, v["id"]):
            raise GenerationError(f"{target}: superseded by both {old['superseded_by']} and {v['id']}")
        old["deprecated"], old["superseded_by"] = True, v["id"]
    out = []
    for v in vectors:
        v["sha256"] = content_hash(v)
        out.append({k: v[k] for k in ORDER if k in v})
    return out


def _check_flags(vectors: list[dict]) -> None:
    known = known_flags()
    for v in vectors:
        unknown = [f for f in v["flags"] if f not in known]
        if unknown:
            raise GenerationError(f"{v['id']}: unknown flag(s) {unknown}: describe each in "
                                  f"spec/schema/flags.json, then run "
                                  f"python -m attnspec.spec.schema --write-flags")


def _check_released(component: str, vectors: list[dict], frozen: dict) -> None:
    """A released vector is never changed in place, and never removed."""
    have = {v["id"]: v for v in vectors}
    for vid, entry in frozen.items():
        v = have.get(vid)
        if v is None:
            raise GenerationError(f"{vid}: released in attnspec {entry['released']} but no longer "
                                  f"generated (a released vector stays; deprecate it instead)")
        if v["sha256"] != entry["sha256"]:
            raise GenerationError(
                f"{vid}: its content would change (sha256 {v['sha256'][:12]} != "
                f"{entry['sha256'][:12]}, released in attnspec {entry['released']}): a released "
                f"vector is never changed in place; add {REVISION_RE.match(vid).group(1)}r<N> "
                f"with supersedes={vid!r} (see spec/CITING.md)")


def _build_case(comp, case) -> dict:
    fn = comp.functions.get(case.function)
    where = f"{case.id}"
    if fn is None:
        raise GenerationError(f"{where}: unknown function {case.function!r}")
    unknown = set(case.inputs) - set(fn.inputs)
    if unknown and case.expect != "error":
        raise GenerationError(f"{where}: inputs {sorted(unknown)} not in the signature")
    restricted = [d for d in FLOAT_DTYPES if d not in case.dtypes]
    if restricted and not case.dtype_note:
        raise GenerationError(f"{where}: leaves out {restricted} without a dtype_note")
    if case.expect != "error":
        for group in (case.inputs, case.params, case.cotangents or {}):
            for name, arr in group.items():
                a = np.asarray(arr)
                if a.dtype.kind == "f":
                    for d in case.dtypes:
                        if not representable(a, d):
                            raise GenerationError(f"{where}: {name} is not exact in {d}")
    v = {"id": case.id, "function": case.function, "description": case.description,
         "flags": case.flags, "dtypes": case.dtypes}
    if case.dtype_note:
        v["dtype_note"] = case.dtype_note
    if case.deprecated:
        v["deprecated"] = True
    v["expect"] = case.expect
    attributes = {**fn.attributes, **case.attributes}  # what the oracle computes with
    absent = [a for a in fn.required if a not in case.attributes]
    if case.omit_defaults and absent:
        raise GenerationError(f"{where}: omit_defaults leaves out required {absent}")
    v["attributes"] = dict(case.attributes) if case.omit_defaults else attributes
    v["inputs"] = {k: encode(a) for k, a in case.inputs.items()}
    if case.params:
        v["params"] = {k: encode(a) for k, a in case.params.items()}
    if case.expect == "error":
        v["error"] = case.error
        v["error_mentions"] = case.error_mentions
        return v
    kwargs = dict(case.inputs)
    kwargs.update(attributes)
    if fn.params:
        kwargs["params"] = case.params
    result = fn.oracle(**kwargs)
    missing = [r for r in fn.returns if r not in result]
    if missing:
        raise GenerationError(f"{where}: the oracle did not return {missing}")
    v["outputs"] = {r: _encode_result(result[r]) for r in fn.returns}
    inter = {k: a for k, a in result.items() if k not in fn.returns}
    if case.keep is not None:
        inter = {k: inter[k] for k in case.keep}
    if case.expect == "gradient":
        _gradients(fn, case.function, case, kwargs, v, where)
    elif inter:
        v["intermediates"] = {k: _encode_result(a) for k, a in inter.items()}
    return v


def _gradients(fn, name: str, case, kwargs: dict, v: dict, where: str) -> None:
    """Cotangents and the oracle's VJP: a gradient for every float input and parameter."""
    vjp = vjps().get(name)
    if vjp is None:
        raise GenerationError(f"{where}: the oracle has no VJP for {name!r} (VJPS of its "
                              f"oracle module, spec/oracle/{fn.oracle.__module__.split('.')[-1]}.py)")
    cot = case.cotangents or {}
    unknown = [k for k in cot if k not in fn.returns]
    if not cot or unknown:
        raise GenerationError(f"{where}: cotangents {sorted(cot)} must name outputs of "
                              f"{name} {list(fn.returns)}")
    for k, c in cot.items():
        if np.shape(c) != tuple(v["outputs"][k]["shape"]):
            raise GenerationError(f"{where}: cotangent {k!r} of shape {np.shape(c)} for an "
                                  f"output of shape {tuple(v['outputs'][k]['shape'])}")
    cot64 = {k: np.asarray(c, dtype=np.float64) for k, c in cot.items()}
    grad_inputs, grad_params = _exact_zeros(vjp, cot64, kwargs, *vjp(cot64, **kwargs))
    want = {k for k, a in case.inputs.items() if np.asarray(a).dtype.kind == "f"}
    if set(grad_inputs) != want or set(grad_params) != set(case.params):
        raise GenerationError(f"{where}: the VJP gave gradients for {sorted(grad_inputs)} "
                              f"and params {sorted(grad_params)}; want {sorted(want)} and "
                              f"{sorted(case.params)}")
    v["cotangents"] = {k: encode(np.asarray(c, dtype=np.float64)) for k, c in cot.items()}
    v["gradients"] = {"inputs": {k: _encode_result(a) for k, a in grad_inputs.items()},
                      "params": {k: _encode_result(a) for k, a in grad_params.items()}}


def _exact_zeros(vjp, cot: dict, kwargs: dict, *groups: dict) -> tuple:
    """Every gradient element that is exactly zero, as 0.0.

    A gradient that is 0 by the algebra (a key bias under a softmax, which ignores a
    shift of a row) comes out of 50-digit sums that cancel as a residue near 1e-50. An
    element below 1e-30 is computed again at DPS + 20 digits: a true value agrees to 50
    digits, a residue moves (it depends on the rounding), so an element whose two values
    differ beyond 1e-20 of the larger is an exact zero."""
    if not any(0 < abs(x) < 1e-30 for g in groups for a in g.values() for x in np.ravel(a)):
        return groups
    with mp.workdps(DPS + 20):
        again = vjp(cot, **kwargs)
    out = []
    for g, h in zip(groups, again):
        fixed = {}
        for name, a in g.items():
            a, b = np.array(a, dtype=object), np.asarray(h[name], dtype=object)
            for idx in np.ndindex(a.shape):
                x, y = a[idx], b[idx]
                if 0 < abs(x) < 1e-30 and abs(x - y) > 1e-20 * max(abs(x), abs(y)):
                    a[idx] = mpmath.mpf(0)
            fixed[name] = a
        out.append(fixed)
    return tuple(out)


def _encode_result(a):
    a = np.asarray(a)
    if a.dtype == object:
        a = tofloat(a)
    return encode(a)


def _check_ids(component: str, vectors: list[dict]) -> None:
    seen = set()
    for v in vectors:
        vid = v["id"]
        if not ID_RE.match(vid) or not vid.startswith(component + "/"):
            raise GenerationError(f"bad vector id {vid!r} (want {component}/<case>-NNN, or "
                                  f"-NNNr<N> for a revision)")
        if vid in seen:
            raise GenerationError(f"duplicate vector id {vid!r}")
        seen.add(vid)
        stem, n = REVISION_RE.match(vid).groups()
        if n is not None:
            prev = stem if n == "2" else f"{stem}r{int(n) - 1}"
            if int(n) < 2 or v.get("supersedes") != prev:
                raise GenerationError(f"{vid}: a revision supersedes the one before it "
                                      f"(want supersedes={prev!r}, got {v.get('supersedes')!r})")
        elif "supersedes" in v:
            raise GenerationError(f"{vid}: supersedes {v['supersedes']!r} but is not a revision "
                                  f"id (want {v['supersedes']}r<N>)")


# -- writing: stable, diff-friendly JSON (one tensor per line) -----------------

def dumps(obj) -> str:
    return _dump(obj, 0) + "\n"


def _dump(obj, level: int) -> str:
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(obj, dict) and not _is_tensor(obj) and obj:
        items = [f"{inner}{json.dumps(k)}: {_dump(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and any(isinstance(x, dict) for x in obj):
        items = [inner + _dump(x, level + 1) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def _is_tensor(obj) -> bool:
    """A tensor, or a tolerance table: written on one line."""
    if isinstance(obj, dict) and obj and all(isinstance(t, dict) and set(t) == {"rtol", "atol"}
                                             for t in obj.values()):
        return True
    return isinstance(obj, dict) and set(obj) == {"dtype", "shape", "data"}


def generate(directory: Path | str = VECTORS_DIR, check: bool = False, jobs: int = 2,
             only: list[str] | None = None, releases_dir: Path | str | None = None,
             frozen_dir: Path | str = RELEASES_DIR,
             tolerances: Path | str | None = TOLERANCES_JSON) -> list[str]:
    """Regenerate every vector file; returns the names of files that changed (or would).

    ``only`` rebuilds just those components; the manifest keeps the others' hashes
    as they are on disk. ``frozen_dir`` holds the release records whose vectors may not
    change; the record of this version is written to ``releases_dir`` (by default the
    package's ``releases/`` when ``directory`` is the package's vector directory).
    """
    directory = Path(directory)
    if releases_dir is None and directory.resolve() == VECTORS_DIR.resolve():
        releases_dir = RELEASES_DIR
    modules = case_modules()
    if only:
        unknown = sorted(set(only) - set(modules))
        if unknown:
            raise GenerationError(f"no case module for {unknown}")
        modules = [m for m in modules if m in only]
    frozen, derived = frozen_vectors(frozen_dir, SPEC_VERSION), read_derived(tolerances)
    per = [{k: e for k, e in frozen.items() if k.split("/")[0] == m and "/stress-" not in k}
           for m in modules]
    from .stress import build as stress

    with_stress = directory.resolve() == VECTORS_DIR.resolve()  # the stress family (spec/STRESS.md)
    cases = stress.stress_cases() if with_stress and not only else []
    tasks = [(build_component, (m, f, derived)) for m, f in zip(modules, per)] + \
        [(stress.build_vector, (c, derived, not check)) for c in cases]
    done = _run(tasks, jobs, [_weight(directory, m) for m in modules] + [_stress_weight(c) for c in cases])
    built, stress_built = done[:len(modules)], done[len(modules):]
    files = {name: text.encode("utf-8") for name, text, _ in built}
    entries = [e for _, _, es in built for e in es]
    stress_changed, stress_index = [], {}
    if cases:
        stress_changed, stress_entries, index_sha = stress.finish(stress_built, check)
    elif with_stress:  # --only: the family as it is on disk
        stress_entries, index_sha = _stress_on_disk()
    if with_stress and stress_entries:
        stress_index = {stress_entries[0]["file"]: index_sha}
        _check_released("stress", [{"id": e["id"], "sha256": e["sha256"]} for e in stress_entries],
                        {k: e for k, e in frozen.items() if "/stress-" in k})
        entries += stress_entries
    if not only:
        _check_derived(derived, entries, modules)
    hashes = {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    if only:
        for m in case_modules():
            path = directory / f"{m}.json"
            if f"{m}.json" not in hashes and path.exists():
                hashes[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
                entries += _entries_on_disk(path)
    manifest = {"spec_version": SPEC_VERSION, "files": dict(sorted(hashes.items()))}
    files[MANIFEST] = dumps(manifest).encode("utf-8")
    changed = _write(directory, files, check) + stress_changed
    stale = [] if only else sorted(p.name for p in directory.glob("*.json")
                                   if p.name not in files)
    changed.extend(f"{name} (no case module)" for name in stale)
    if releases_dir is not None:
        # the record names every file its vectors are in: the manifest's and the stress index
        record = dump_record(make_record(SPEC_VERSION, {**hashes, **stress_index}, entries)).encode("utf-8")
        name = f"{SPEC_VERSION}.json"
        changed += [f"releases/{n}" for n in _write(Path(releases_dir), {name: record}, check)]
        if Path(releases_dir).resolve() == RELEASES_DIR.resolve():  # what cite --verify trusts
            text = hashes_with(SPEC_VERSION, record).encode("utf-8")
            changed += _write(HASHES_MODULE.parent, {HASHES_MODULE.name: text}, check)
    return changed


def _run(tasks: list, jobs: int, weights: list[float]) -> list:
    """``[f(*args) for f, args in tasks]``, on ``jobs`` processes the heaviest first (the
    run ends with the last task to finish: a heavy one started last would keep one process
    busy while the others wait). Any exception (Ctrl-C, or SIGTERM made one by the caller)
    stops the workers: none outlives the run (spec/workers.py says why not a Pool)."""
    if jobs <= 1 or len(tasks) <= 1:
        return [f(*args) for f, args in tasks]
    return run_tasks(tasks, jobs, sorted(range(len(tasks)), key=lambda i: -weights[i]))


# CPU seconds one process took to build these modules (2026-11-29, the 2-core machine,
# `generate --check`); the others cost about their vector file's size / 1e5 or less. Only
# the order of the work uses it: beam_search, started last, kept the run going ~20 s
# after every other module was built.
SLOW_MODULES = {"beam_search": 65.0, "greedy_decode": 16.0, "seq2seq_attention": 4.0}


def _weight(directory: Path, module: str) -> float:
    """A module's expected cost in seconds, for the order of the work."""
    path = directory / f"{module}.json"
    return SLOW_MODULES.get(module, path.stat().st_size / 1e5 if path.exists() else 10.0)


def _stress_weight(case: dict) -> float:
    """A stress vector's expected cost in seconds: its mpmath check dominates when it runs
    (not under --check: spec/STRESS.md), and a gradient vector checks the most."""
    return 8.0 if "grad" in case["id"] else 4.0


def _stress_on_disk() -> tuple[list[dict], str]:
    """The release-record entries of the stress family as it is on disk, and the SHA-256
    of its index (``generate --only`` leaves it as it is)."""
    from .stress import INDEX_PATH, MAX_INDEX_BYTES, read_index
    from .vectors import read_bounded

    doc = read_index()
    if doc is None:
        return [], ""
    index_sha = hashlib.sha256(read_bounded(INDEX_PATH, MAX_INDEX_BYTES, "stress index")).hexdigest()
    return [{"id": e["id"], "file": f"stress/{INDEX_PATH.name}", "sha256": e["sha256"],
             "tolerances": e["tolerances"], "deprecated": False} for e in doc["vectors"]], index_sha


def _check_derived(derived: dict, entries: list[dict], modules: list[str]) -> None:
    """Every id and component the derived tolerances name exists (no stale entries)."""
    ids = {e["id"] for e in entries}
    stale = sorted(k for k in derived if not k.startswith("_") and k not in ids)
    stale += sorted(f"_default.{c}" for c in derived.get("_default", {}) if c not in modules)
    if stale:
        raise GenerationError(f"{TOLERANCES_JSON.name} names what no case module yields: "
                              f"{', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}")


def _write(directory: Path, files: dict[str, bytes], check: bool) -> list[str]:
    changed = []
    for name, data in sorted(files.items()):
        path = directory / name
        if not path.exists() or path.read_bytes() != data:
            changed.append(name)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    return changed


def _entries_on_disk(path: Path) -> list[dict]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [{"id": v["id"], "file": path.name, "sha256": v["sha256"], "tolerances": v["tolerances"],
             "deprecated": v.get("deprecated", False)} for v in doc["vectors"]]
