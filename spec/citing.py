"""Citation lines, release records, and checking a citation.

A citation is ``attnspec <version> · <target> · sha256:<first 12 hex>``:

- a vector (``mha/padding-001``): the SHA-256 of the vector's canonical content
  (:func:`~attnspec.spec.vectors.content_hash`), from spec 1.1.0 on; spec 1.0.0
  citations carry the SHA-256 of the vector's *file* instead;
- a component (``mha``): the SHA-256 of its vectors' sorted (id, sha256) pairs
  (:func:`~attnspec.spec.vectors.component_hash`); in 1.0.0, its file's SHA-256;
- the spec (``attnspec``): the version alone.

``releases/<version>.json`` records, for every vector of a release, what its
citations pin. A record is written by the generator while its version is the
current one and frozen when the version moves on: then the generator refuses to
change the content of any vector it lists, and :func:`verify` keeps accepting
the citations it made.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from . import SPEC_VERSION
from .errors import VectorFileError
from .vectors import (
    CANONICAL_FIELDS,
    SHA_RE,
    VERSION_RE,
    check_finite,
    check_id,
    component_hash,
    parse_json,
    read_bounded,
)

URL = "https://github.com/attnspec/attnspec"
RELEASES_DIR = Path(__file__).parent / "releases"
HASHES_MODULE = Path(__file__).parent / "release_hashes.py"


def cite(spec, target: str, fmt: str = "text") -> str:
    """Cite a vector id, a component id, or ``attnspec`` (the whole spec)."""
    if "/" in target:
        v = spec.vector(target)
        text = v.citation(spec.version)
        key, title, note = v.id.replace("/", ":"), f"attnspec golden vector {v.id}", text
    elif target in spec.components:
        text = f"attnspec {spec.version} · {target} · sha256:{spec.component_hash(target)[:12]}"
        key, title, note = target, f"attnspec component {target}", text
    elif target == "attnspec":
        text = f"attnspec {spec.version}"
        key, title, note = "attnspec", "attnspec: a reference specification of the Transformer stack", text
    else:
        raise KeyError(target)
    if fmt == "text":
        return text
    return (f"@misc{{attnspec-{SPEC_VERSION}-{key.replace('/', '-')},\n"
            f"  title        = {{{title}}},\n"
            f"  author       = {{{{The attnspec authors}}}},\n"
            f"  year         = {{2026}},\n"
            f"  version      = {{{spec.version}}},\n"
            f"  howpublished = {{\\url{{{URL}}}}},\n"
            f"  note         = {{{note}}}\n}}")


# -- release records ------------------------------------------------------------

def make_record(version: str, files: dict[str, str], vectors: list[dict], cites: str = "vector") -> dict:
    """A release record. ``vectors``: dicts with id, file, sha256, tolerances, deprecated.
    ``cites``: what that release's vector citations hash, "file" (1.0.0) or "vector"."""
    entries = {v["id"]: {"file": v["file"], "sha256": v["sha256"], "tolerances": v["tolerances"],
                         "deprecated": bool(v.get("deprecated", False))}
               for v in sorted(vectors, key=lambda v: v["id"])}
    return {"spec_version": version, "cites": cites, "files": dict(sorted(files.items())),
            "vectors": entries}


def dump_record(record: dict) -> str:
    """Stable text: one line per vector, so a diff shows which vectors a release added."""
    head = {k: v for k, v in record.items() if k != "vectors"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in head.items()]
    lines.append(' "vectors": {')
    rows = [f"  {json.dumps(vid)}: {json.dumps(e, sort_keys=True)}" for vid, e in record["vectors"].items()]
    lines.append(",\n".join(rows))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def shipped_hashes() -> dict[str, str]:
    """version -> SHA-256 of the record file this package shipped (release_hashes.py)."""
    from .release_hashes import RECORD_SHA256

    return dict(RECORD_SHA256)


def render_hashes(hashes: dict[str, str]) -> str:
    """The text of release_hashes.py for ``hashes`` (version -> record SHA-256)."""
    head = HASHES_MODULE.read_text(encoding="utf-8").split("RECORD_SHA256 = {")[0]
    rows = "".join(f'    "{v}": "{hashes[v]}",\n' for v in sorted(hashes, key=_version_key))
    return f"{head}RECORD_SHA256 = {{\n{rows}}}\n"


def hashes_with(version: str, record_text: bytes) -> str:
    """release_hashes.py with ``version``'s line set to the SHA-256 of ``record_text`` and
    every other (frozen) line as shipped: what the generator writes beside the record."""
    return render_hashes({**shipped_hashes(), version: hashlib.sha256(record_text).hexdigest()})


def read_record(path: Path | str, trusted: str | None = None) -> dict:
    """One release record, bounded and strictly parsed; with ``trusted`` (a SHA-256) the
    file must hash to it. Any fault is a :class:`VectorFileError` naming the file. The bytes
    are read and hashed at every call; the same bytes are parsed and checked once (the
    record returned is shared: read it, never change it)."""
    path = Path(path)
    data = read_bounded(path, what="release record")
    if trusted is not None and hashlib.sha256(data).hexdigest() != trusted:
        raise VectorFileError(
            f"release record {path} is not the one attnspec shipped (sha256 "
            f"{hashlib.sha256(data).hexdigest()[:12]}..., shipped {trusted[:12]}...): it was edited; "
            f"reinstall attnspec")
    key = (str(path.resolve()), hashlib.sha256(data).hexdigest())
    if key not in _RECORDS:  # `cite --verify` of many lines reads one record many times
        record = parse_json(data, path, "release record")
        _check_record(record, path)
        if len(_RECORDS) >= 16:
            _RECORDS.clear()
        _RECORDS[key] = record
    return _RECORDS[key]


# (path, SHA-256 of its bytes) -> the record parsed and checked; read-only for its callers
_RECORDS: dict[tuple[str, str], dict] = {}


def _check_record(record, path: Path) -> None:
    def bad(why: str):
        raise VectorFileError(f"release record {path}: {why}")

    if not isinstance(record, dict):
        bad("not a JSON object")
    for key, kind in (("spec_version", str), ("cites", str), ("files", dict), ("vectors", dict)):
        if not isinstance(record.get(key), kind):
            bad(f"field '{key}' is missing or not {'a string' if kind is str else 'an object'}")
    if record["spec_version"] != path.stem or not VERSION_RE.fullmatch(path.stem):
        bad(f"field 'spec_version' {record['spec_version'][:40]!r} is not the file's version")
    if record["cites"] not in ("file", "vector"):
        bad(f"field 'cites' must be 'file' or 'vector', got {record['cites'][:40]!r}")
    for name, sha in record["files"].items():
        if not (isinstance(sha, str) and SHA_RE.fullmatch(sha)):
            bad(f"files.{name[:60]}: not a SHA-256 (64 hex digits)")
    for vid, e in record["vectors"].items():
        check_id(vid, f"release record {path}", "vectors")
        if not (isinstance(e, dict) and isinstance(e.get("file"), str) and e["file"] in record["files"]
                and isinstance(e.get("sha256"), str) and SHA_RE.fullmatch(e["sha256"])
                and isinstance(e.get("tolerances"), dict) and isinstance(e.get("deprecated"), bool)):
            bad(f"vectors.{vid}: want {{file (one of 'files'), sha256, tolerances, deprecated}}")
    check_finite(record, f"release record {path}")


def read_records(directory: Path | str = RELEASES_DIR) -> dict[str, dict]:
    """Every release record in ``directory``, oldest first: version -> record."""
    out = {}
    for path in Path(directory).glob("*.json"):
        if VERSION_RE.fullmatch(path.stem):
            out[path.stem] = read_record(path)
    return dict(sorted(out.items(), key=lambda kv: _version_key(kv[0])))


def frozen_vectors(directory: Path | str = RELEASES_DIR, current: str = SPEC_VERSION) -> dict[str, dict]:
    """id -> record entry of every vector released before ``current`` (oldest release
    first, so an id keeps the tolerances it was first released with)."""
    out: dict[str, dict] = {}
    for version, record in read_records(directory).items():
        if version == current:
            continue
        for vid, entry in record["vectors"].items():
            out.setdefault(vid, {**entry, "released": version})
    return out


def record_of_spec(spec) -> dict:
    """The record of a loaded spec (what its own citations pin)."""
    return make_record(spec.version, spec.files, [
        {"id": v.id, "file": v.file, "sha256": v.sha256, "tolerances": v.tolerances,
         "deprecated": v.deprecated} for v in spec.vectors])


# -- checking a citation ---------------------------------------------------------

CITATION_RE = re.compile(r"^\s*attnspec\s+(\d+\.\d+\.\d+)\s*(?:·\s*(\S+)\s*·\s*sha256:([0-9a-fA-F]+))?\s*$")


def parse_citation(line: str) -> tuple[str, str | None, str] | None:
    """(version, target or None, hash prefix in lower case) of a citation line, or None."""
    m = CITATION_RE.match(line)
    return (m.group(1), m.group(2), (m.group(3) or "").lower()) if m else None


def verify(line: str, spec, directory: Path | str = RELEASES_DIR,
           trusted: dict[str, str] | None = None) -> tuple[bool, str]:
    """Check a citation line against the release record of the version it names. Returns
    (valid, one line): "valid: ..." (unchanged, or superseded and by what) or "invalid: ...".

    The record, never the loaded vectors, decides validity. In the package's own
    ``releases/`` only the records it shipped count, each checked against its SHA-256
    in ``release_hashes.py`` (``trusted``: version -> SHA-256), so an edited record is
    refused. ``spec`` (the loaded vectors) only says whether a valid citation's vector is
    still live or has been superseded, and by what.
    """
    if trusted is None and Path(directory).resolve() == RELEASES_DIR.resolve():
        trusted = shipped_hashes()
    ok, text = _verify(line, spec, Path(directory), trusted)
    return ok, text if ok or text.startswith("invalid: ") else f"invalid: {text}"


def _verify(line: str, spec, directory: Path, trusted: dict | None) -> tuple[bool, str]:
    parsed = parse_citation(line)
    if parsed is None:
        return False, (f"not a citation: {line.strip()[:200]!r} (want 'attnspec <version> · "
                       f"<id> · sha256:<hex>' or 'attnspec <version>')")
    version, target, prefix = parsed
    known = sorted(trusted if trusted is not None else
                   (p.stem for p in directory.glob("*.json") if VERSION_RE.fullmatch(p.stem)),
                   key=_version_key)
    if version not in known:
        return False, f"attnspec {version} is not a known release (known: {', '.join(known)})"
    path = directory / f"{version}.json"
    try:
        record = read_record(path, None if trusted is None else trusted[version])
    except VectorFileError as exc:
        return False, str(exc)
    if target is None:
        return True, f"valid: attnspec {version} is a release"
    if len(prefix) > 64:
        return False, (f"the hash sha256:{prefix[:16]}... has {len(prefix)} hex digits; a SHA-256 "
                       f"has 64 (a citation gives the first 12)")
    if len(prefix) < 8:
        return False, f"the hash sha256:{prefix} is too short (a citation gives 12 hex digits)"
    source = f"per the {'shipped ' if trusted is not None else ''}release record {path.name}"
    if "/" in target:
        return _verify_vector(record, target, prefix, spec, source)
    return _verify_component(record, target, prefix, spec, source)


def _verify_vector(record: dict, vid: str, prefix: str, spec, source: str) -> tuple[bool, str]:
    version = record["spec_version"]
    entry = record["vectors"].get(vid)
    if entry is None:
        return False, f"attnspec {version} has no vector {vid} ({source})"
    pinned = record["files"][entry["file"]] if record["cites"] == "file" else entry["sha256"]
    if not pinned.startswith(prefix):
        what = f"its file {entry['file']}" if record["cites"] == "file" else "it"
        return False, (f"invalid: in attnspec {version}, {what} has sha256:{pinned[:12]}, "
                       f"not sha256:{prefix[:12]} ({source})")
    head = f"valid: {vid} as released in attnspec {version} ({source})"
    try:
        now = spec.vector(vid)
    except KeyError:
        return True, f"{head}; the loaded vectors ({spec.version}) do not hold it"
    if now.sha256 != entry["sha256"]:
        return True, (f"{head}; but its content differs in attnspec {spec.version} "
                      f"(a vector must never change in place: please report this)")
    if not now.superseded_by:
        return True, f"{head}; unchanged in attnspec {spec.version}"
    chain, v = [], now
    while v.superseded_by:
        nxt = spec.vector(v.superseded_by)
        chain.append(f"{nxt.id} ({what_changed(v.raw, nxt.raw)})")
        v = nxt
    return True, f"{head}; superseded in attnspec {spec.version} by " + ", then ".join(chain)


def _verify_component(record: dict, comp: str, prefix: str, spec, source: str) -> tuple[bool, str]:
    version = record["spec_version"]
    pairs = [(vid, e["sha256"]) for vid, e in record["vectors"].items() if vid.split("/")[0] == comp]
    if not pairs:
        return False, f"attnspec {version} has no component {comp} ({source})"
    if record["cites"] == "file":
        pinned = record["files"].get(f"{comp}.json", "")
    else:
        pinned = component_hash(pairs)
    if not pinned.startswith(prefix):
        return False, (f"invalid: in attnspec {version}, component {comp} has sha256:{pinned[:12]}, "
                       f"not sha256:{prefix[:12]} ({source})")
    head = f"valid: component {comp} as released in attnspec {version} ({source})"
    now = {v.id: v for v in spec.vectors if v.component == comp}
    old = dict(pairs)
    added = sorted(set(now) - set(old))
    # superseded since the cited release (one already deprecated in it is no news)
    was_deprecated = {vid for vid, e in record["vectors"].items() if e.get("deprecated")}
    superseded = sorted(vid for vid in old if vid in now and now[vid].superseded_by
                        and vid not in was_deprecated)
    changed = sorted(vid for vid in old if vid in now and now[vid].sha256 != old[vid])
    if not (added or superseded or changed) and len(now) == len(old):
        return True, f"{head}; unchanged in attnspec {spec.version}"
    parts = [f"{len(added)} vector(s) added"] if added else []
    if superseded:
        parts.append(f"{len(superseded)} superseded ({', '.join(superseded)})")
    if changed:
        parts.append(f"{len(changed)} changed in place (please report this)")
    return True, f"{head}; in attnspec {spec.version}: " + "; ".join(parts or ["vectors missing"])


def what_changed(old: dict, new: dict) -> str:
    """Which canonical fields differ between two vectors, tolerances per dtype."""
    out = []
    for key in CANONICAL_FIELDS:
        if key == "id" or old.get(key) == new.get(key):
            continue
        if key == "tolerances" and old.get(key) and new.get(key):
            for dtype, t in new[key].items():
                o = old[key].get(dtype, {})
                out += [f"{dtype} {k} {o.get(k)} -> {t[k]}" for k in ("rtol", "atol") if o.get(k) != t[k]]
        else:
            out.append(key)
    return "changed: " + ", ".join(out) if out else "no change in content"
