"""Turn the case modules into vector files, deterministically.

``attnspec generate`` writes ``vectors/<component>.json`` and the manifest;
``--check`` writes nothing and fails, naming the files, if any byte would change.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from . import SPEC_VERSION
from .tensor import FLOAT_DTYPES, encode, representable
from .vectors import MANIFEST, VECTORS_DIR

ID_RE = re.compile(r"^[a-z0-9_]+/[a-z0-9][a-z0-9-]*-\d{3}$")


class GenerationError(Exception):
    pass


def case_modules() -> list[str]:
    from . import cases

    return sorted(m.name for m in pkgutil.iter_modules(cases.__path__) if not m.name.startswith("_"))


def build_component(module_name: str) -> tuple[str, str]:
    """Run one case module through the oracle; returns (file name, file text)."""
    from .cases._build import Rng

    mod = importlib.import_module(f"{__package__}.cases.{module_name}")
    comp = mod.COMPONENT
    vectors = [_build_case(comp, case) for case in mod.cases(Rng(comp.id))]
    _check_ids(comp.id, vectors)
    doc = {
        "component": comp.id,
        "spec_version": SPEC_VERSION,
        "page": f"components/{comp.id}.md",
        "functions": {name: fn.header() for name, fn in comp.functions.items()},
        "tolerances": comp.tolerances,
        "vectors": vectors,
    }
    return f"{comp.id}.json", dumps(doc)


def _build_case(comp, case) -> dict:
    fn = comp.functions.get(case.function)
    where = f"{case.id}"
    if fn is None:
        raise GenerationError(f"{where}: unknown function {case.function!r}")
    unknown = set(case.inputs) - set(fn.inputs)
    if unknown and case.expect == "value":
        raise GenerationError(f"{where}: inputs {sorted(unknown)} not in the signature")
    restricted = [d for d in FLOAT_DTYPES if d not in case.dtypes]
    if restricted and not case.dtype_note:
        raise GenerationError(f"{where}: leaves out {restricted} without a dtype_note")
    if case.expect == "value":
        for group in (case.inputs, case.params):
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
    v["attributes"] = {**fn.attributes, **case.attributes}
    v["inputs"] = {k: encode(a) for k, a in case.inputs.items()}
    if case.params:
        v["params"] = {k: encode(a) for k, a in case.params.items()}
    if case.expect == "error":
        v["error"] = case.error
        v["error_mentions"] = case.error_mentions
        return v
    kwargs = dict(case.inputs)
    kwargs.update(case.attributes)
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
    if inter:
        v["intermediates"] = {k: _encode_result(a) for k, a in inter.items()}
    return v


def _encode_result(a):
    from .oracle.core import tofloat

    a = np.asarray(a)
    if a.dtype == object:
        a = tofloat(a)
    return encode(a)


def _check_ids(component: str, vectors: list[dict]) -> None:
    seen = set()
    for v in vectors:
        vid = v["id"]
        if not ID_RE.match(vid) or not vid.startswith(component + "/"):
            raise GenerationError(f"bad vector id {vid!r} (want {component}/<case>-NNN)")
        if vid in seen:
            raise GenerationError(f"duplicate vector id {vid!r}")
        seen.add(vid)


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
    return isinstance(obj, dict) and set(obj) == {"dtype", "shape", "data"}


def generate(directory: Path | str = VECTORS_DIR, check: bool = False, jobs: int = 2,
             only: list[str] | None = None) -> list[str]:
    """Regenerate every vector file; returns the names of files that changed (or would).

    ``only`` rebuilds just those components; the manifest keeps the others' hashes
    as they are on disk.
    """
    directory = Path(directory)
    modules = case_modules()
    if only:
        unknown = sorted(set(only) - set(modules))
        if unknown:
            raise GenerationError(f"no case module for {unknown}")
        modules = [m for m in modules if m in only]
    if jobs > 1 and len(modules) > 1:
        with ProcessPoolExecutor(jobs) as pool:
            built = list(pool.map(build_component, modules))
    else:
        built = [build_component(m) for m in modules]
    files = {name: text.encode("utf-8") for name, text in built}
    hashes = {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    if only:
        for m in case_modules():
            path = directory / f"{m}.json"
            if f"{m}.json" not in hashes and path.exists():
                hashes[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = {"spec_version": SPEC_VERSION, "files": dict(sorted(hashes.items()))}
    files[MANIFEST] = dumps(manifest).encode("utf-8")
    changed = []
    for name, data in sorted(files.items()):
        path = directory / name
        if not path.exists() or path.read_bytes() != data:
            changed.append(name)
            if not check:
                path.write_bytes(data)
    stale = [] if only else sorted(p.name for p in directory.glob("*.json")
                                   if p.name not in files)
    changed.extend(f"{name} (no case module)" for name in stale)
    return changed
