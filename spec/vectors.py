"""Loading golden vectors: hashes first, then plain JSON (never pickle, never code).

``load()`` reads ``vectors/MANIFEST.json``, refuses a directory whose ``*.json``
files and manifest entries differ, checks the SHA-256 of every file it lists
before parsing it, then checks every vector's own SHA-256 (of its canonical
content, see :func:`content_hash`) and its structure, and returns :class:`Vector`
objects. Every refusal is a :class:`VectorFileError` naming the file, and the
vector and field where there is one.
"""

from __future__ import annotations

import difflib
import gc
import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from . import SPEC_VERSION
from .errors import AttnSpecError, VectorFileError
from .tensor import decode

VECTORS_DIR = Path(__file__).parent / "vectors"
MANIFEST = "MANIFEST.json"
SCHEMA_PATH = Path(__file__).parent / "schema" / "vectors.schema.json"
# The largest file a loader reads: every read is bounded (the biggest vector file is ~1.3 MB).
MAX_FILE_BYTES = 256 * 2**20

# What a vector claims: the fields its content hash covers. description, flags,
# dtype_note and the deprecated/supersedes links are editorial and left out.
CANONICAL_FIELDS = ("id", "function", "dtypes", "expect", "attributes", "inputs", "params",
                    "outputs", "intermediates", "cotangents", "gradients", "error",
                    "error_mentions", "tolerances")


def canonical_json(v: dict, tolerances: dict | None = None) -> bytes:
    """The canonical serialisation of a vector's content: the fields of
    ``CANONICAL_FIELDS`` that it has, keys sorted, no whitespace, UTF-8.
    ``tolerances`` stands in for a vector that carries none (spec 1.0.0 files kept
    them at file level)."""
    content = {k: v[k] for k in CANONICAL_FIELDS if k in v}
    if "tolerances" not in content and tolerances is not None:
        content["tolerances"] = tolerances
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def content_hash(v: dict, tolerances: dict | None = None) -> str:
    """SHA-256 (hex) of :func:`canonical_json`: what a vector citation pins."""
    return hashlib.sha256(canonical_json(v, tolerances)).hexdigest()


def component_hash(pairs) -> str:
    """A component's hash: SHA-256 of its vectors' sorted ``id sha256`` lines."""
    text = "".join(f"{vid} {sha}\n" for vid, sha in sorted(pairs))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    expect: str  # "value", "error" or "gradient"
    attributes: dict
    inputs: dict = field(repr=False)
    params: dict = field(repr=False)
    outputs: dict = field(repr=False)
    intermediates: dict = field(repr=False)
    error: str | None
    error_mentions: tuple[str, ...]
    tolerances: dict = field(repr=False)
    file: str = ""
    sha256: str = ""  # of the vector's canonical content (content_hash), not of its file
    dtype_note: str | None = None
    deprecated: bool = False
    supersedes: str | None = None  # the id this vector corrects
    superseded_by: str | None = None  # the id that corrects this one (then deprecated)
    raw: dict = field(default=None, repr=False, compare=False)
    # gradient vectors: {output: cotangent} and {"inputs": {name: grad}, "params": {path: grad}}
    cotangents: dict = field(default_factory=dict, repr=False)
    gradients: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # short: hypothesis and pytest print it in failure reports
        return f"<Vector {self.id}>"

    def citation(self, version: str = SPEC_VERSION) -> str:
        return f"attnspec {version} · {self.id} · sha256:{self.sha256[:12]}"


class NoSuchVector(AttnSpecError, KeyError):
    """An id that the loaded vectors do not hold (a ``KeyError`` too, for old callers)."""

    def __str__(self) -> str:
        return str(self.args[0])


def read_bounded(path: Path | str, limit: int = MAX_FILE_BYTES, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. Opened without blocking
    (a FIFO does not hang the open) and checked with fstat before reading, so a link to
    /dev/zero, a FIFO or a device is refused, naming ``path``, instead of read forever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise VectorFileError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise VectorFileError(f"{what} {path} is not a regular file (a FIFO, device or "
                                  f"link to one?): refused")
        if st.st_size > limit:
            raise VectorFileError(f"{what} {path} has {st.st_size} bytes, more than the "
                                  f"{limit} a loader reads: refused")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise VectorFileError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise VectorFileError(f"{what} {path} grew past {limit} bytes while read: refused")
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON (a non-finite value is the string 'inf', '-inf' "
                     f"or 'nan')")


def parse_json(data: bytes, path, what: str = "file"):
    """Strict JSON: NaN/Infinity literals and nesting deeper than Python's recursion
    limit are refused as :class:`VectorFileError` naming ``path``."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise VectorFileError(f"{what} {path} is nested too deeply to be a vector file") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise VectorFileError(f"{what} {path} is not valid JSON: {exc}") from None


def read_manifest(directory: Path | str = VECTORS_DIR) -> dict:
    path = Path(directory) / MANIFEST
    return parse_json(read_bounded(path, 2**20, "vector manifest"), path, "vector manifest")


def listed_files(directory: Path, manifest: dict) -> dict[str, str]:
    """The manifest's ``{file name: sha256}``, refused unless it names exactly the
    ``*.json`` files (besides the manifest) that the directory holds."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(manifest.get("spec_version"), str) \
            or not VERSION_RE.fullmatch(manifest["spec_version"]):
        raise VectorFileError(f"vector manifest {directory / MANIFEST} needs 'spec_version' "
                              f"(N.N.N) and 'files' (name -> sha256)")
    for name, sha in files.items():
        if not FILE_NAME_RE.fullmatch(name) or not (isinstance(sha, str) and SHA_RE.fullmatch(sha)):
            raise VectorFileError(f"vector manifest {directory / MANIFEST}: entry {name[:60]!r}: "
                                  f"want '<component>.json': '<64 hex digits>'")
    on_disk = {p.name for p in directory.glob("*.json")} - {MANIFEST}
    unlisted, absent = sorted(on_disk - set(files)), sorted(set(files) - on_disk)
    if unlisted:
        raise VectorFileError(
            f"vector file {directory / unlisted[0]} is not listed in {MANIFEST}"
            f"{f' (nor are {unlisted[1:]})' if unlisted[1:] else ''}: its vectors would be "
            f"skipped silently; run `attnspec generate`, or remove the file")
    if absent:
        raise VectorFileError(
            f"{MANIFEST} lists {absent[0]}, but {directory / absent[0]} does not exist"
            f"{f' (nor do {absent[1:]})' if absent[1:] else ''}")
    return files


def read_file(path: Path, expected_sha: str) -> dict:
    """Parse one vector file after checking its SHA-256 against the manifest."""
    data = read_bounded(path, what="vector file")
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha:
        raise VectorFileError(
            f"vector file {path} does not match the manifest: sha256 {actual[:12]}... "
            f"!= {expected_sha[:12]}... (edited by hand? run `attnspec generate`)")
    return parse_json(data, path, "vector file")


# -- structure: what the loader relies on (the JSON schema in schema/ says more) --------

_FILE_FIELDS = {"component": str, "functions": dict, "vectors": list}
_FUNCTION_FIELDS = {"module": str, "inputs": list, "returns": list}
_FUNCTION_OPTIONAL = {"optional": list, "attributes": dict, "params": bool, "trace": bool,
                      "required_attributes": list}
_VECTOR_FIELDS = {"id": str, "sha256": str, "function": str, "description": str,
                  "dtypes": list, "expect": str, "tolerances": dict}
_VECTOR_OPTIONAL = {"flags": list, "attributes": dict, "inputs": dict, "params": dict,
                    "outputs": dict, "intermediates": dict, "error": str,
                    "error_mentions": list, "dtype_note": str, "deprecated": bool,
                    "supersedes": str, "superseded_by": str, "cotangents": dict,
                    "gradients": dict}
TENSOR_GROUPS = ("inputs", "params", "outputs", "intermediates", "cotangents")
VERSION_RE = re.compile(r"\d{1,6}\.\d{1,6}\.\d{1,6}")
SHA_RE = re.compile(r"[0-9a-f]{64}")
FILE_NAME_RE = re.compile(r"[a-z0-9_]{1,100}\.json")


@cache
def schema_rules() -> tuple[re.Pattern, re.Pattern, frozenset]:
    """The id and component patterns and the error names of ``schema/vectors.schema.json``:
    what every id, component and error the loader hands on (to ``list``, to a report)
    must match, so none carries a path (``../``) or a line break."""
    schema = parse_json(read_bounded(SCHEMA_PATH, 2**20, "schema"), SCHEMA_PATH, "schema")
    vector = schema["$defs"]["vector"]["properties"]
    return (re.compile(schema["$defs"]["id"]["pattern"]),
            re.compile(schema["properties"]["component"]["pattern"]),
            frozenset(vector["error"]["enum"]))


def check_id(vid, where: str, field: str = "id") -> None:
    if not (isinstance(vid, str) and len(vid) <= 200 and schema_rules()[0].fullmatch(vid)):
        raise VectorFileError(f"{where}: field '{field}' {str(vid)[:80]!r} does not match the "
                              f"schema's id pattern {schema_rules()[0].pattern}")
EXPECTS = ("value", "error", "gradient")
_JSON_TYPE = {str: "a string", list: "an array", dict: "an object", bool: "true or false"}


def _fields(obj: dict, required: dict, optional: dict, where: str) -> None:
    for name, kind in {**required, **optional}.items():
        if name not in obj:
            if name in required:
                raise VectorFileError(f"{where}: field '{name}' is missing")
        elif not isinstance(obj[name], kind):
            raise VectorFileError(f"{where}: field '{name}' must be {_JSON_TYPE[kind]}, "
                                  f"got {type(obj[name]).__name__} {str(obj[name])[:40]}")


def check_file_structure(doc, file: str) -> None:
    """Refuse a parsed vector file that lacks what the loader reads, naming the field."""
    if not isinstance(doc, dict):
        raise VectorFileError(f"file {file}: not a JSON object")
    _fields(doc, _FILE_FIELDS, {}, f"file {file}")
    if not schema_rules()[1].fullmatch(doc["component"]):
        raise VectorFileError(f"file {file}: field 'component' {doc['component'][:80]!r} does "
                              f"not match the schema's pattern {schema_rules()[1].pattern}")
    for name, f in doc["functions"].items():
        if not isinstance(f, dict):
            raise VectorFileError(f"file {file}: function {name}: not a JSON object")
        _fields(f, _FUNCTION_FIELDS, _FUNCTION_OPTIONAL, f"file {file}: function {name}")
        check_finite(f, f"file {file}: function {name}")
    for i, v in enumerate(doc["vectors"]):
        if not isinstance(v, dict):
            raise VectorFileError(f"file {file}: vectors[{i}]: not a JSON object")


def check_finite(obj, where: str) -> None:
    """Refuse a number JSON cannot hold (1e400 reads as inf), naming ``where``."""
    try:
        json.dumps(obj, allow_nan=False)
    except ValueError:
        raise VectorFileError(f"{where}: holds a number out of range (such as 1e400) or NaN; "
                              f"non-finite values are the strings 'inf', '-inf', 'nan'") from None


def _check_vector(v: dict, functions: dict, file: str, component: str) -> None:
    where = f"file {file}: vector {v.get('id', '?')}"
    _fields(v, _VECTOR_FIELDS, _VECTOR_OPTIONAL, where)
    if v["id"].split("/")[0] != component:
        raise VectorFileError(f"{where}: the id's component is not the file's ({component!r})")
    for key in ("supersedes", "superseded_by"):
        if key in v:
            check_id(v[key], where, key)
    if "error" in v and v["error"] not in schema_rules()[2]:
        raise VectorFileError(f"{where}: field 'error' {v['error'][:80]!r} is not one of "
                              f"{sorted(schema_rules()[2])}")
    if v["function"] not in functions:
        raise VectorFileError(f"{where}: field 'function': {v['function']!r} is not one of "
                              f"the file's functions {sorted(functions)}")
    if v["expect"] not in EXPECTS:
        raise VectorFileError(f"{where}: field 'expect' must be one of {list(EXPECTS)}, "
                              f"got {v['expect']!r}")
    if v["expect"] == "gradient":
        g = v.get("gradients")
        if not v.get("cotangents") or not isinstance(g, dict) or set(g) != {"inputs", "params"} \
                or not all(isinstance(x, dict) for x in g.values()):
            raise VectorFileError(f"{where}: a gradient vector needs 'cotangents' and "
                                  f"'gradients' {{inputs: {{...}}, params: {{...}}}}")
    if v["expect"] == "error" and "error" not in v:
        raise VectorFileError(f"{where}: field 'error' is missing (expect is 'error')")
    for d in v["dtypes"]:
        tol = v["tolerances"].get(d) if isinstance(d, str) else None
        if not (isinstance(tol, dict) and {"rtol", "atol"} <= set(tol)):
            raise VectorFileError(f"{where}: field 'tolerances': no {{rtol, atol}} for "
                                  f"dtype {str(d)[:40]!r}, which the vector lists")
        for k in ("rtol", "atol"):
            t = tol[k]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
                raise VectorFileError(f"{where}: field 'tolerances.{d}.{k}' must be a finite "
                                      f"number >= 0, got {str(t)[:40]}")


def _tensors(v: dict, group: str, file: str) -> dict[str, np.ndarray]:
    out = {}
    for name, t in v.get(group, {}).items():
        try:
            if t["dtype"] in ("int64", "bool") and not all(
                    type(x) is (int if t["dtype"] == "int64" else bool) for x in t["data"]):
                raise ValueError(f"{t['dtype']} data holds a value of another type")
            out[name] = decode(t)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise VectorFileError(
                f"file {file}: vector {v['id']}: field '{group}.{name}' is not a tensor "
                f"{{dtype, shape, data}} ({type(exc).__name__}: {exc})") from None
    return out


def functions_of(doc: dict) -> dict[str, Function]:
    out = {}
    for name, f in doc["functions"].items():
        out[name] = Function(name, doc["component"], f["module"], tuple(f["inputs"]),
                             tuple(f.get("optional", ())), dict(f.get("attributes", {})),
                             bool(f.get("params", False)), bool(f.get("trace", False)),
                             tuple(f["returns"]), tuple(f.get("required_attributes", ())))
    return out


def vectors_of(doc: dict, file: str = "", shipped: bool = False) -> list[Vector]:
    """The vectors of one parsed file; refuses one whose content hash does not match.
    ``shipped``: the file's bytes hash to its entry in the release record this package
    shipped, so each vector's hash was checked when generated and is not recomputed."""
    check_file_structure(doc, file)
    out = []
    for v in doc["vectors"]:
        if "id" in v:  # first: every message below names it
            check_id(v["id"], f"file {file}")
        sha = _checked_hash(v, file, recompute=not shipped)
        _check_vector(v, doc["functions"], file, doc["component"])
        out.append(Vector(
            id=v["id"], component=doc["component"], function=v["function"],
            description=v["description"], flags=tuple(v.get("flags", ())),
            dtypes=tuple(v["dtypes"]), expect=v["expect"],
            attributes=dict(v.get("attributes", {})),
            **{group: _tensors(v, group, file) for group in TENSOR_GROUPS},
            error=v.get("error"), error_mentions=tuple(v.get("error_mentions", ())),
            tolerances=v["tolerances"], file=file, sha256=sha,
            dtype_note=v.get("dtype_note"), deprecated=bool(v.get("deprecated", False)),
            supersedes=v.get("supersedes"), superseded_by=v.get("superseded_by"), raw=v,
            gradients={k: _tensors({"id": v["id"], f"gradients.{k}": g}, f"gradients.{k}", file)
                       for k, g in v.get("gradients", {}).items()}))
    return out


def _checked_hash(v: dict, file: str, recompute: bool = True) -> str:
    vid = v.get("id", "?")
    if "sha256" not in v or "tolerances" not in v:
        raise VectorFileError(f"vector {vid} in {file or 'a vector file'} has no "
                              f"{'sha256' if 'sha256' not in v else 'tolerances'} "
                              f"(a file older than spec 1.1.0? run `attnspec generate`)")
    if not recompute and isinstance(v["sha256"], str):
        return v["sha256"]
    try:
        actual = content_hash(v)
    except ValueError:  # allow_nan=False: an inf or nan number (1e400) in the content
        check_finite(v, f"file {file}: vector {vid}")
        raise
    except RecursionError:
        raise VectorFileError(f"file {file}: vector {vid} is nested too deeply") from None
    if actual != v["sha256"]:
        raise VectorFileError(
            f"vector {vid} in {file or 'a vector file'} does not match its own sha256: "
            f"{actual[:12]}... != {str(v['sha256'])[:12]}... (edited by hand? a vector is "
            f"never changed in place: add a revision that supersedes it)")
    return actual


@dataclass
class Spec:
    version: str
    functions: dict[str, Function]
    vectors: list[Vector]
    files: dict[str, str]  # file name -> sha256
    components: dict[str, list[str]]  # component -> function names

    def __repr__(self) -> str:  # short: the whole spec is megabytes of text
        return (f"<Spec {self.version}: {len(self.vectors)} vectors, "
                f"{len(self.functions)} functions>")

    def component_hash(self, component: str) -> str:
        """What a component citation pins: its vectors' (id, sha256) pairs."""
        if component not in self.components:
            raise KeyError(component)
        return component_hash((v.id, v.sha256) for v in self.vectors if v.component == component)

    def vector(self, vid: str) -> Vector:
        for v in self.vectors:
            if v.id == vid:
                return v
        near = difflib.get_close_matches(vid, [v.id for v in self.vectors], n=3)
        raise NoSuchVector(f"no such vector {vid!r} in attnspec {self.version}"
                           + (f" (did you mean {', '.join(near)}?)" if near else
                              " (`attnspec list` shows every id)"))

    def by_component(self) -> dict[str, list[Vector]]:
        out: dict[str, list[Vector]] = {c: [] for c in self.components}
        for v in self.vectors:
            out[v.component].append(v)
        return out


def shipped_files(version: str) -> dict[str, str]:
    """{file name: sha256} from ``version``'s release record as this package shipped it
    (the record pinned by its hash in release_hashes.py); {} for a version it did not
    ship or a record that is not the shipped one."""
    from .citing import RELEASES_DIR, read_record, shipped_hashes

    trusted = shipped_hashes().get(version)
    if trusted is None or not VERSION_RE.fullmatch(version):
        return {}
    try:
        files = read_record(RELEASES_DIR / f"{version}.json", trusted)["files"]
    except VectorFileError:
        return {}
    return {k: v for k, v in files.items() if isinstance(v, str)}


def load(directory: Path | str = VECTORS_DIR, stress: bool = True) -> Spec:
    """Load and hash-check every vector file listed in the manifest (and, with ``stress``,
    the package's stress family where its spec version is the manifest's)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    files = listed_files(directory, manifest)
    functions: dict[str, Function] = {}
    vectors: list[Vector] = []
    components: dict[str, list[str]] = {}
    seen: dict[str, str] = {}  # vector id -> file
    file_of: dict[str, str] = {}  # component -> file
    shipped = shipped_files(manifest["spec_version"])
    for name, sha in files.items():
        doc = read_file(directory / name, sha)
        check_file_structure(doc, name)
        if doc["component"] in components:
            raise VectorFileError(f"component {doc['component']!r} is in two files: "
                                  f"{directory / file_of[doc['component']]} and {directory / name}")
        file_of[doc["component"]] = name
        fns = functions_of(doc)
        functions.update(fns)
        components[doc["component"]] = list(fns)
        for v in vectors_of(doc, name, shipped=shipped.get(name) == sha):
            if v.id in seen:
                raise VectorFileError(f"duplicate vector id {v.id}: in {directory / seen[v.id]} "
                                      f"and in {directory / name}")
            seen[v.id] = name
            vectors.append(v)
    if stress:  # the stress family (spec/STRESS.md), where it is of the same spec version
        from .stress import load_vectors

        files = dict(files)
        for v in load_vectors(functions, version=manifest["spec_version"]):
            if v.id in seen:
                raise VectorFileError(f"duplicate vector id {v.id}: in {directory / seen[v.id]} "
                                      f"and in the stress family")
            vectors.append(v)
            files.setdefault(v.file, None)
        if any(sha is None for sha in files.values()):  # the record names the index's hash too
            from .stress import INDEX_PATH, MAX_INDEX_BYTES

            sha = hashlib.sha256(read_bounded(INDEX_PATH, MAX_INDEX_BYTES, "stress index")).hexdigest()
            files = {name: sha if h is None else h for name, h in files.items()}
    return Spec(manifest["spec_version"], functions, vectors, dict(files), components)


@cache
def default_spec() -> Spec:
    spec = load(VECTORS_DIR)
    # The default spec lives as long as the process (it is cached), so its ~80,000 dicts and
    # lists are moved out of the cyclic garbage collector's reach: every full collection
    # walked them for nothing (pytest alone runs five at the end of each session, a third
    # of a short `attnspec verify`'s CPU time). Nothing about the spec changes.
    gc.freeze()
    return spec
