"""Validate every vector file against ``schema/vectors.schema.json``, plus the
checks a schema cannot express: unique ids across files, tensor sizes that
match their shapes, and manifest hashes.

    python -m attnspec.spec.schema [DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .vectors import MANIFEST, VECTORS_DIR, read_file, read_manifest

SCHEMA = Path(__file__).parent / "schema" / "vectors.schema.json"


def problems(directory: Path | str = VECTORS_DIR) -> list[str]:
    import jsonschema

    directory = Path(directory)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    manifest = read_manifest(directory)
    found: list[str] = []
    seen: dict[str, str] = {}
    for name, sha in manifest["files"].items():
        doc = read_file(directory / name, sha)
        for err in validator.iter_errors(doc):
            where = "/".join(str(p) for p in err.absolute_path)
            found.append(f"{name}: {where}: {err.message[:200]}")
        for v in doc.get("vectors", []):
            vid = v.get("id", "?")
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


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    directory = Path(argv[0]) if argv else VECTORS_DIR
    found = problems(directory)
    for p in found:
        print(p, file=sys.stderr)
    if found:
        print(f"{len(found)} problem(s)", file=sys.stderr)
        return 1
    print(f"schema: every vector file in {directory} is valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
