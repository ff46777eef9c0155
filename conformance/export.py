"""``attnspec export ID``: one vector for use outside Python.

``.npz`` holds plain numeric arrays only (``inputs/x``, ``params/w_q``,
``outputs/y``, ``intermediates/...``; a gradient vector also ``cotangents/y``,
``gradients/inputs/x``, ``gradients/params/gamma``), saved without pickled objects (load with
``allow_pickle=False``); attributes and the citation go in a JSON string array
``meta``. ``.json`` is the vector exactly as in its file, plus the citation.
An existing file is replaced only with ``force``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from attnspec.spec.errors import ConfigError


def export(spec, vid: str, fmt: str = "npz", out: str | None = None,
           force: bool = False) -> Path:
    v = spec.vector(vid)
    path = Path(out or f"{vid.replace('/', '-')}.{fmt}")
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
