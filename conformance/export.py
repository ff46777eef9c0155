"""``attnspec export ID``: one vector for use outside Python.

``.npz`` holds plain numeric arrays only (``inputs/x``, ``params/w_q``,
``outputs/y``, ``intermediates/...``; a gradient vector also ``cotangents/y``,
``gradients/inputs/x``, ``gradients/params/gamma``), saved without pickled objects (load with
``allow_pickle=False``); attributes and the citation go in a JSON string array
``meta``. ``.json`` is the vector exactly as in its file, plus the citation.
An existing file is replaced only with ``force``. The format is ``fmt``, else the
extension of ``out``, else npz; an ``out`` whose extension is not the format's is refused
(JSON written into ``x.npz`` would mislead every reader of the file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from attnspec.spec.errors import ConfigError

FORMATS = ("npz", "json")


def output_path(vid: str, fmt: str | None, out: str | None) -> tuple[str, Path]:
    """(format, path) for ``--format`` and ``--out``; a mismatch is a ConfigError."""
    ext = Path(out).suffix.lower().lstrip(".") if out else ""
    fmt = fmt or (ext if ext in FORMATS else "npz")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if out and ext != fmt:
        raise ConfigError(f"--out {out}: the extension is not .{fmt}, the --format; name the "
                          f"file *.{fmt}" + (f" or pass --format {ext}" if ext in FORMATS else ""))
    return fmt, Path(out or f"{vid.replace('/', '-')}.{fmt}")


def export(spec, vid: str, fmt: str | None = None, out: str | None = None,
           force: bool = False) -> Path:
    fmt, path = output_path(vid, fmt, out)
    v = spec.vector(vid)
    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to replace it")
    meta = {"id": v.id, "citation": v.citation(spec.version), "function": v.function,
            "attributes": v.attributes, "expect": v.expect, "error": v.error,
            "dtypes": list(v.dtypes), "tolerances": v.tolerances}
    if fmt == "json":
        doc = {"citation": meta["citation"], "functions": {v.function: _fn_header(spec, v)},
               "vector": v.raw}
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        return path
    arrays = {"meta": np.array(json.dumps(meta))}
    for group, tensors in (("inputs", v.inputs), ("params", v.params), ("outputs", v.outputs),
                           ("intermediates", v.intermediates), ("cotangents", v.cotangents),
                           *((f"gradients/{k}", g) for k, g in v.gradients.items())):
        for name, a in tensors.items():
            arrays[f"{group}/{name}"] = a
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _fn_header(spec, v) -> dict:
    fn = spec.functions[v.function]
    return {"module": fn.module, "inputs": list(fn.inputs), "optional": list(fn.optional),
            "required_attributes": list(fn.required_attributes), "attributes": fn.attributes,
            "params": fn.params, "trace": fn.trace, "returns": list(fn.returns)}
