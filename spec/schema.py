"""Validate every vector file against ``schema/vectors.schema.json``, plus the
checks a schema cannot express: unique ids across files, tensor sizes that
match their shapes, manifest and per-vector hashes, supersedes links; and that
the flag registry (``schema/flags.json``), ``FLAGS.md`` and the schema's flag
enumeration agree.

    python -m attnspec.spec.schema [DIR]
    python -m attnspec.spec.schema --write-flags   # FLAGS.md and the enum, from flags.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .vectors import MANIFEST, VECTORS_DIR, content_hash, read_file, read_manifest

SCHEMA = Path(__file__).parent / "schema" / "vectors.schema.json"
FLAGS = Path(__file__).parent / "schema" / "flags.json"
FLAGS_MD = Path(__file__).parent / "FLAGS.md"
_FLAG_ENUM = re.compile(r'^    "flag": \{"enum": \[.*\]\},$', re.M)


def registry() -> dict:
    return json.loads(FLAGS.read_text(encoding="utf-8"))


def render_flags_md(reg: dict) -> str:
    """FLAGS.md: every flag once, grouped by the kind of bug it targets."""
    out = ["# Vector flags", "",
           "<!-- Generated from spec/schema/flags.json by "
           "`python -m attnspec.spec.schema --write-flags`; do not edit. -->", "",
           "A vector's `flags` say why it exists: what it exercises and which bug it is there",
           "to catch (as Wycheproof's notes do). Flags are editorial: they are not part of a",
           "vector's content hash. The generator refuses a flag that is not listed here, and",
           "the schema enumerates the same names.", "", "| bug type | what it means |", "|---|---|"]
    out += [f"| `{t}` | {text} |" for t, text in reg["bug_types"].items()]
    for t in reg["bug_types"]:
        names = [n for n, f in reg["flags"].items() if f["bug_type"] == t]
        if not names:
            continue
        out += ["", f"## {t}", "", "| flag | meaning | bug it targets |", "|---|---|---|"]
        out += [f"| `{n}` | {reg['flags'][n]['meaning']} | {reg['flags'][n]['bug']} |" for n in names]
    return "\n".join(out) + "\n"


def schema_with_flags(text: str, names: list[str]) -> str:
    line = '    "flag": {"enum": ' + json.dumps(sorted(names)) + "},"
    return _FLAG_ENUM.sub(lambda _: line, text, count=1)


def flag_problems() -> list[str]:
    reg = registry()
    found = [f"flags.json: {n}: unknown bug_type {f.get('bug_type')!r}"
             for n, f in reg["flags"].items() if f.get("bug_type") not in reg["bug_types"]]
    found += [f"flags.json: {n}: needs a meaning and a bug" for n, f in reg["flags"].items()
              if not (f.get("meaning") and f.get("bug"))]
    text = SCHEMA.read_text(encoding="utf-8")
    if schema_with_flags(text, list(reg["flags"])) != text:
        found.append("vectors.schema.json: the flag enum differs from flags.json "
                     "(run python -m attnspec.spec.schema --write-flags)")
    if not FLAGS_MD.exists() or FLAGS_MD.read_text(encoding="utf-8") != render_flags_md(reg):
        found.append("FLAGS.md: differs from flags.json (run python -m attnspec.spec.schema --write-flags)")
    return found


def write_flags() -> None:
    reg = registry()
    FLAGS_MD.write_text(render_flags_md(reg), encoding="utf-8")
    SCHEMA.write_text(schema_with_flags(SCHEMA.read_text(encoding="utf-8"), list(reg["flags"])),
                      encoding="utf-8")


def problems(directory: Path | str = VECTORS_DIR) -> list[str]:
    import jsonschema

    directory = Path(directory)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    manifest = read_manifest(directory)
    found: list[str] = []
    seen: dict[str, str] = {}
    for name, sha in manifest["files"].items():
        doc = read_file(directory / name, sha)
        bare, data_found = _split_data(doc, name)
        found += data_found
        for err in validator.iter_errors(bare):
            where = "/".join(str(p) for p in err.absolute_path)
            found.append(f"{name}: {where}: {err.message[:200]}")
        ids = {v.get("id") for v in doc.get("vectors", [])}
        for v in doc.get("vectors", []):
            vid = v.get("id", "?")
            found += _vector_problems(name, v, ids)
            if vid in seen:
                found.append(f"{name}: duplicate id {vid} (also in {seen[vid]})")
            seen[vid] = name
            if v.get("function") not in doc.get("functions", {}):
                found.append(f"{name}: {vid}: unknown function {v.get('function')!r}")
            for group in ("inputs", "params", "outputs", "intermediates"):
                for tname, t in v.get(group, {}).items():
                    size = 1
                    for d in t["shape"]:
                        size *= d
                    if size != len(t["data"]):
                        found.append(f"{name}: {vid}: {group}.{tname} has {len(t['data'])} "
                                     f"values for shape {t['shape']}")
    listed = set(manifest["files"]) | {MANIFEST}
    for path in sorted(directory.glob("*.json")):
        if path.name not in listed:
            found.append(f"{path.name}: not listed in the manifest")
    return found


NONFINITE = ("inf", "-inf", "nan")


def _split_data(node, where: str, path: str = "") -> tuple:
    """``node`` with every tensor's ``data`` emptied (the schema's per-element check is
    ~1e5 times slower than this one, at millions of elements), and the problems of the
    elements themselves: each a number, ``inf``/``-inf``/``nan`` or a boolean."""
    if isinstance(node, list):
        parts = [_split_data(x, where, f"{path}/{i}") for i, x in enumerate(node)]
        return [b for b, _ in parts], [p for _, ps in parts for p in ps]
    if not isinstance(node, dict):
        return node, []
    if isinstance(node.get("data"), list) and "shape" in node and "dtype" in node:
        bad = [i for i, x in enumerate(node["data"])
               if type(x) not in (int, float, bool) and not (type(x) is str and x in NONFINITE)]
        found = [f"{where}: {path.lstrip('/')}/data/{i}: {node['data'][i]!r} is not a number, "
                 f"'inf', '-inf', 'nan' or a boolean" for i in bad[:5]]
        return {**node, "data": []}, found
    parts = {k: _split_data(x, where, f"{path}/{k}") for k, x in node.items()}
    return {k: b for k, (b, _) in parts.items()}, [p for _, ps in parts.values() for p in ps]


def _vector_problems(name: str, v: dict, ids: set) -> list[str]:
    vid = v.get("id", "?")
    found = []
    if "sha256" in v and "tolerances" in v and content_hash(v) != v["sha256"]:
        found.append(f"{name}: {vid}: content does not match its sha256")
    for key in ("supersedes", "superseded_by"):
        if key in v and v[key] not in ids:
            found.append(f"{name}: {vid}: {key} {v[key]!r} is not in the file")
    return found


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write-flags"]:
        write_flags()
        print(f"wrote {FLAGS_MD} and the flag enum of {SCHEMA}")
        return 0
    directory = Path(argv[0]) if argv else VECTORS_DIR
    found = problems(directory) + flag_problems()
    for p in found:
        print(p, file=sys.stderr)
    if found:
        print(f"{len(found)} problem(s)", file=sys.stderr)
        return 1
    print(f"schema: every vector file in {directory} is valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
