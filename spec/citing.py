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

import json
import re
from pathlib import Path

from . import SPEC_VERSION
from .vectors import CANONICAL_FIELDS, component_hash

URL = "https://github.com/attnspec/attnspec"
RELEASES_DIR = Path(__file__).parent / "releases"


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


def read_records(directory: Path | str = RELEASES_DIR) -> dict[str, dict]:
    """Every release record in ``directory``, oldest first: version -> record."""
    out = {}
    for path in Path(directory).glob("*.json"):
        if re.fullmatch(r"\d+\.\d+\.\d+", path.stem):
            out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
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


def verify(line: str, spec, directory: Path | str = RELEASES_DIR) -> tuple[bool, str]:
    """Check a citation line against the release it names. Returns (valid, one line):
    "valid: ..." (unchanged, or superseded and by what) or "invalid: ...".

    ``spec`` is the loaded (current) spec: it says whether a valid citation's vector
    is still live or has been superseded, and by what.
    """
    ok, text = _verify(line, spec, directory)
    return ok, text if ok or text.startswith("invalid: ") else f"invalid: {text}"


def _verify(line: str, spec, directory: Path | str) -> tuple[bool, str]:
    m = CITATION_RE.match(line)
    if not m:
        return False, (f"not a citation: {line.strip()!r} (want 'attnspec <version> · <id> · "
                       f"sha256:<hex>' or 'attnspec <version>')")
    version, target, prefix = m.group(1), m.group(2), (m.group(3) or "").lower()
    records = read_records(directory)
    if version == spec.version:
        records[version] = record_of_spec(spec)
    record = records.get(version)
    if record is None:
        return False, f"attnspec {version} is not a known release (known: {', '.join(records)})"
    if target is None:
        return True, f"valid: attnspec {version} is a release"
    if len(prefix) < 8:
        return False, f"the hash sha256:{prefix} is too short (a citation gives 12 hex digits)"
    if "/" in target:
        return _verify_vector(record, target, prefix, spec)
    return _verify_component(record, target, prefix, spec)


def _verify_vector(record: dict, vid: str, prefix: str, spec) -> tuple[bool, str]:
    version = record["spec_version"]
    entry = record["vectors"].get(vid)
    if entry is None:
        return False, f"attnspec {version} has no vector {vid}"
    pinned = record["files"][entry["file"]] if record["cites"] == "file" else entry["sha256"]
    if not pinned.startswith(prefix):
        what = f"its file {entry['file']}" if record["cites"] == "file" else "it"
        return False, (f"invalid: in attnspec {version}, {what} has sha256:{pinned[:12]}, "
                       f"not sha256:{prefix[:12]}")
    head = f"valid: {vid} as released in attnspec {version}"
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


def _verify_component(record: dict, comp: str, prefix: str, spec) -> tuple[bool, str]:
    version = record["spec_version"]
    pairs = [(vid, e["sha256"]) for vid, e in record["vectors"].items() if vid.split("/")[0] == comp]
    if not pairs:
        return False, f"attnspec {version} has no component {comp}"
    if record["cites"] == "file":
        pinned = record["files"].get(f"{comp}.json", "")
    else:
        pinned = component_hash(pairs)
    if not pinned.startswith(prefix):
        return False, (f"invalid: in attnspec {version}, component {comp} has sha256:{pinned[:12]}, "
                       f"not sha256:{prefix[:12]}")
    head = f"valid: component {comp} as released in attnspec {version}"
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
