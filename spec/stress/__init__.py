"""The stress family (spec/STRESS.md): vectors at kernel sizes and extreme magnitudes.

Stored compactly and without pickle: ``index.json`` holds, per vector, the recipes that
rebuild its inputs from the spec's seeded number source (recipes.py), the SHA-256 of every
rebuilt input, and the file under ``data/`` that holds its expected values as one zlib
stream of little-endian float64 (bool: uint8; int64: expert indices) arrays, with that
file's size and SHA-256.
Each vector's own ``sha256`` covers all of that (:func:`canonical_hash`). :func:`load_vectors`
checks every hash, reads every file with a size bound, and returns ordinary
:class:`~attnspec.spec.vectors.Vector` objects flagged ``"stress"``.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np

from ..errors import VectorFileError

STRESS_DIR = Path(__file__).parent
INDEX = "index.json"
INDEX_PATH = STRESS_DIR / INDEX
DATA_DIR = STRESS_DIR / "data"
MAX_INDEX_BYTES = 8 << 20
MAX_DATA_BYTES = 64 << 20
# What a stress vector claims (its hash): as vectors.CANONICAL_FIELDS, with the recipes,
# the input digests and the data file in place of inline tensors.
CANONICAL_FIELDS = ("id", "function", "dtypes", "expect", "attributes", "tolerances", "recipes",
                    "digests", "data")


def canonical_hash(entry: dict) -> str:
    content = {k: entry[k] for k in CANONICAL_FIELDS if k in entry}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_index(directory: Path = STRESS_DIR) -> dict | None:
    """The parsed index, or None where the stress family is not installed."""
    path = Path(directory) / INDEX
    if not path.exists():
        return None
    from ..vectors import parse_json, read_bounded

    doc = parse_json(read_bounded(path, MAX_INDEX_BYTES, "stress index"), path, "stress index")
    if not isinstance(doc, dict) or not isinstance(doc.get("vectors"), list):
        raise VectorFileError(f"{path}: needs 'vectors' (a list)")
    return doc


def read_data(entry: dict, directory: Path = STRESS_DIR) -> dict[str, np.ndarray]:
    """The expected arrays of one entry, size-bounded and hash-checked."""
    vid, d = entry["id"], entry["data"]
    path = Path(directory) / "data" / d["file"]
    if ".." in Path(d["file"]).parts or Path(d["file"]).is_absolute():
        raise VectorFileError(f"stress vector {vid}: data file {d['file']!r} leaves data/")
    want = sum(int(np.prod(a["shape"], dtype=np.int64)) * (1 if a["dtype"] == "bool" else 8)
               for a in d["arrays"])
    if int(d["bytes"]) > MAX_DATA_BYTES or want != int(d["raw_bytes"]) or want > MAX_DATA_BYTES:
        raise VectorFileError(f"stress vector {vid}: data sizes {d['bytes']}/{d['raw_bytes']} "
                              f"do not match its arrays ({want} bytes) or pass {MAX_DATA_BYTES}")
    from ..vectors import read_bounded

    blob = read_bounded(path, int(d["bytes"]), f"stress vector {vid}: data file")
    if len(blob) != int(d["bytes"]) or hashlib.sha256(blob).hexdigest() != d["sha256"]:
        raise VectorFileError(f"stress vector {vid}: {path} does not match its size and sha256 "
                              f"in {INDEX} (edited by hand? run `attnspec generate`)")
    z = zlib.decompressobj()
    raw = z.decompress(blob, want + 1)
    if len(raw) != want or not z.eof:
        raise VectorFileError(f"stress vector {vid}: {path} holds {len(raw)} bytes, want {want}")
    out, at = {}, 0
    for a in d["arrays"]:
        n = int(np.prod(a["shape"], dtype=np.int64))
        if a["dtype"] == "bool":
            arr = np.frombuffer(raw, np.uint8, n, at).astype(bool)
            at += n
        elif a["dtype"] == "int64":  # expert indices: compared exactly, as the suite does ints
            arr = np.frombuffer(raw, "<i8", n, at).astype(np.int64)
            at += 8 * n
        else:
            arr = np.frombuffer(raw, "<f8", n, at).astype(np.float64)
            at += 8 * n
        out[a["name"]] = arr.reshape(a["shape"])
    return out


def load_vectors(functions: dict, directory: Path = STRESS_DIR, version: str | None = None) -> list:
    """Every stress vector as a :class:`Vector` (none where the index is absent, or is of
    another spec version than ``version``)."""
    from ..vectors import Vector
    from .recipes import build_inputs, digest

    doc = read_index(directory)
    if doc is None or (version is not None and doc.get("spec_version") != version):
        return []
    out = []
    for e in doc["vectors"]:
        vid = e.get("id", "?")
        if not isinstance(e, dict) or canonical_hash(e) != e.get("sha256"):
            raise VectorFileError(f"stress vector {vid} in {INDEX} does not match its own sha256 "
                                  f"(edited by hand? run `attnspec generate`)")
        component = vid.split("/")[0]
        if e["function"] not in functions or functions[e["function"]].component != component:
            raise VectorFileError(f"stress vector {vid}: unknown function {e['function']!r}")
        groups = {g: build_inputs(e["recipes"].get(g, {}), vid) for g in ("inputs", "params", "cotangents")}
        for g, arrays in groups.items():
            for name, a in arrays.items():
                if digest(a) != e["digests"].get(f"{g}.{name}"):
                    raise VectorFileError(f"stress vector {vid}: rebuilt {g}.{name} does not match "
                                          f"its sha256 (a changed number source?)")
        data = read_data(e, directory)
        grads = {"inputs": _pick(data, "gradients.inputs."), "params": _pick(data, "gradients.params.")} \
            if e["expect"] == "gradient" else {}
        out.append(Vector(
            id=vid, component=component, function=e["function"], description=e["description"],
            flags=tuple(e["flags"]), dtypes=tuple(e["dtypes"]), expect=e["expect"],
            attributes=dict(e["attributes"]), inputs=groups["inputs"], params=groups["params"],
            outputs=_pick(data, "outputs."), intermediates={}, error=None, error_mentions=(),
            tolerances=e["tolerances"], file=f"stress/{INDEX}", sha256=e["sha256"],
            dtype_note=e.get("dtype_note"), raw=e, cotangents=groups["cotangents"], gradients=grads))
    return out


def _pick(data: dict, prefix: str) -> dict:
    return {k[len(prefix):]: a for k, a in data.items() if k.startswith(prefix)}
