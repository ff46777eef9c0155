"""Loading golden vectors: hashes first, then plain JSON (never pickle, never code).

``load_all()`` reads ``vectors/MANIFEST.json``, checks the SHA-256 of every
file it lists before parsing it, and returns :class:`Vector` objects.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from . import SPEC_VERSION
from .errors import VectorFileError
from .tensor import decode

VECTORS_DIR = Path(__file__).parent / "vectors"
MANIFEST = "MANIFEST.json"


@dataclass(frozen=True)
class Function:
    """The calling convention of one spec function (from a vector file's header)."""

    name: str
    component: str
    module: str  # backend module that holds it: attention, positional, norm...
    inputs: tuple[str, ...]  # keyword arguments that take arrays
    optional: tuple[str, ...]  # the subset of inputs that may be omitted
    attributes: dict  # keyword attributes with their defaults
    params: bool  # takes ``params=`` (canonical path -> array)
    trace: bool  # takes ``trace=`` and records named intermediates
    returns: tuple[str, ...]  # output names, in return order
    required_attributes: tuple[str, ...] = ()  # keyword attributes without a default


@dataclass(frozen=True)
class Vector:
    id: str
    component: str
    function: str
    description: str
    flags: tuple[str, ...]
    dtypes: tuple[str, ...]
    expect: str  # "value" or "error"
    attributes: dict
    inputs: dict = field(repr=False)
    params: dict = field(repr=False)
    outputs: dict = field(repr=False)
    intermediates: dict = field(repr=False)
    error: str | None
    error_mentions: tuple[str, ...]
    tolerances: dict = field(repr=False)
    file: str = ""
    sha256: str = ""
    dtype_note: str | None = None
    deprecated: bool = False
    raw: dict = field(default=None, repr=False, compare=False)

    def citation(self, version: str = SPEC_VERSION) -> str:
        return f"attnspec {version} · {self.id} · sha256:{self.sha256[:12]}"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(directory: Path | str = VECTORS_DIR) -> dict:
    path = Path(directory) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VectorFileError(f"cannot read vector manifest {path}: {exc}") from exc


def read_file(path: Path, expected_sha: str) -> dict:
    """Parse one vector file after checking its SHA-256 against the manifest."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise VectorFileError(
            f"vector file {path} listed in the manifest cannot be read: {exc}") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha:
        raise VectorFileError(
            f"vector file {path} does not match the manifest: sha256 {actual[:12]}... "
            f"!= {expected_sha[:12]}... (edited by hand? run `attnspec generate`)")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise VectorFileError(f"vector file {path} is not valid JSON: {exc}") from exc


def functions_of(doc: dict) -> dict[str, Function]:
    out = {}
    for name, f in doc["functions"].items():
        out[name] = Function(name, doc["component"], f["module"], tuple(f["inputs"]),
                             tuple(f.get("optional", ())), dict(f.get("attributes", {})),
                             bool(f.get("params", False)), bool(f.get("trace", False)),
                             tuple(f["returns"]), tuple(f.get("required_attributes", ())))
    return out


def vectors_of(doc: dict, file: str = "", sha: str = "") -> list[Vector]:
    tolerances = doc["tolerances"]
    out = []
    for v in doc["vectors"]:
        out.append(Vector(
            id=v["id"], component=doc["component"], function=v["function"],
            description=v["description"], flags=tuple(v.get("flags", ())),
            dtypes=tuple(v["dtypes"]), expect=v["expect"],
            attributes=dict(v.get("attributes", {})),
            inputs={k: decode(t) for k, t in v.get("inputs", {}).items()},
            params={k: decode(t) for k, t in v.get("params", {}).items()},
            outputs={k: decode(t) for k, t in v.get("outputs", {}).items()},
            intermediates={k: decode(t) for k, t in v.get("intermediates", {}).items()},
            error=v.get("error"), error_mentions=tuple(v.get("error_mentions", ())),
            tolerances=v.get("tolerances", tolerances), file=file, sha256=sha,
            dtype_note=v.get("dtype_note"), deprecated=bool(v.get("deprecated", False)), raw=v))
    return out


@dataclass
class Spec:
    version: str
    functions: dict[str, Function]
    vectors: list[Vector]
    files: dict[str, str]  # file name -> sha256
    components: dict[str, list[str]]  # component -> function names

    def vector(self, vid: str) -> Vector:
        for v in self.vectors:
            if v.id == vid:
                return v
        raise KeyError(vid)

    def by_component(self) -> dict[str, list[Vector]]:
        out: dict[str, list[Vector]] = {c: [] for c in self.components}
        for v in self.vectors:
            out[v.component].append(v)
        return out


def load(directory: Path | str = VECTORS_DIR) -> Spec:
    """Load and hash-check every vector file listed in the manifest."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    functions: dict[str, Function] = {}
    vectors: list[Vector] = []
    components: dict[str, list[str]] = {}
    for name, sha in manifest["files"].items():
        doc = read_file(directory / name, sha)
        fns = functions_of(doc)
        functions.update(fns)
        components[doc["component"]] = list(fns)
        vectors.extend(vectors_of(doc, name, sha))
    return Spec(manifest["spec_version"], functions, vectors, dict(manifest["files"]), components)


@cache
def default_spec() -> Spec:
    return load(VECTORS_DIR)


def as_numpy_inputs(v: Vector, dtype: str) -> dict[str, np.ndarray]:
    """Float inputs rounded to ``dtype`` (they are exact in every dtype the vector lists)."""
    from .tensor import round_to

    return {k: round_to(a, dtype) if a.dtype == np.float64 else a for k, a in v.inputs.items()}
