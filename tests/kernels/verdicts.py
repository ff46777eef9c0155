"""The real kernels' verdicts (issue 21.3): every route judged by every sdpa value vector,
counted per family, each failing (vector, dtype) with the cause its kernel page states.

``python benchmarks/judge_kernels.py --write`` writes them to ``verdicts.json`` (committed,
with the kernel versions); ``test_kernel_routes.py`` asserts the committed file equals what
the installed kernels give, and ``attnspec generate`` renders it into README's
``kernel-verdicts`` block (spec/derived.py, which reads the JSON and imports no kernel).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from .vectors import as_call, judged_output

RESULTS = Path(__file__).resolve().parent / "verdicts.json"
ROUTES = ("flex", "sdpa-math", "sdpa-flash", "ort-attention", "ort-gqa", "ort-mha")

# column -> the flags that put a vector there (first match wins; "stress" first)
FAMILIES = (("stress", ("stress",)), ("non-finite", ("non-finite",)),
            ("fully-masked", ("fully-masked", "empty-axis")), ("softcap", ("softcap",)),
            ("gqa", ("gqa",)), ("causal", ("causal",)), ("bias", ("bias",)), ("mask", ("mask",)),
            ("scale", ("scale", "inexact-attribute")))
COLUMNS = tuple(name for name, _ in FAMILIES) + ("basic",)

TORCH_PAGE = "spec/components/flexattention.md"
ORT_PAGE = "spec/components/onnxruntime.md"
# cause -> (page, its anchor there): each is a line of the page's "Differences" or "The
# stress family", asserted by a test in test_kernel_routes.py
CAUSES = {
    "nonfinite-masked": (TORCH_PAGE, "cause-nonfinite-masked"),
    "flex-short-keys": (TORCH_PAGE, "cause-flex-short-keys"),
    "math-sqrt-scale": (TORCH_PAGE, "cause-math-sqrt-scale"),
    "ort-nonfinite-masked": (ORT_PAGE, "cause-ort-nonfinite-masked"),
    "ort-float64-scale": (ORT_PAGE, "cause-ort-float64-scale"),
    "ort-float64-softcap": (ORT_PAGE, "cause-ort-float64-softcap"),
    "mha-empty-row-nan": (ORT_PAGE, "cause-mha-empty-row-nan"),
}

MATH_SQRT_SCALE = {"sdpa/stress-far-below-001", "sdpa/stress-mask-above-001"}


def cause(route: str, v, dtype: str) -> str:
    """The page's cause of a failing (vector, dtype) on ``route``; "unexplained" if none."""
    flags = set(v.flags)
    if route.startswith("ort-"):
        if route == "ort-attention" and dtype == "float64" and v.id == "sdpa/stress-softcap-001":
            return "ort-float64-softcap"
        if route == "ort-attention" and dtype == "float64":
            return "ort-float64-scale"
        if "non-finite" in flags:
            return "ort-nonfinite-masked"
        if route == "ort-mha" and ("fully-masked" in flags or v.id == "sdpa/bias-mask-001"):
            return "mha-empty-row-nan"
        return "unexplained"
    if "non-finite" in flags:
        return "nonfinite-masked"
    if route == "flex" and v.id == "sdpa/large-001":
        return "flex-short-keys"
    if route == "sdpa-math" and dtype == "float32" and v.id in MATH_SQRT_SCALE:
        return "math-sqrt-scale"
    return "unexplained"


def family(v) -> str:
    return next((name for name, flags in FAMILIES if set(flags) & set(v.flags)), "basic")


def judge_route(route: str, fn, dtypes, skip_cls, vectors) -> dict:
    """{"dtypes", "families": {column: {pass, fail, skip, causes}}, "failing": {id: {dtype:
    cause}}}: ``causes`` lists the causes of the column's failures."""
    cells = {name: {"pass": 0, "fail": 0, "skip": 0, "causes": []} for name in COLUMNS}
    failing: dict[str, dict[str, str]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in vectors:
            c = as_call(v)
            for dtype in dtypes:
                if dtype not in v.dtypes:
                    continue
                try:
                    ok = judged_output(v, dtype, fn(c, dtype)["output"]).status == "pass"
                except skip_cls:
                    cells[family(v)]["skip"] += 1
                    continue
                except Exception:  # a refusal or a crash: the kernel did not give the output
                    ok = False
                cells[family(v)]["pass" if ok else "fail"] += 1
                if not ok:
                    why = failing.setdefault(v.id, {})[dtype] = cause(route, v, dtype)
                    cells[family(v)]["causes"] = sorted({*cells[family(v)]["causes"], why})
    return {"dtypes": list(dtypes), "families": cells, "failing": failing}


def versions() -> dict:
    import onnx
    import onnxruntime
    import torch
    # the release without its local build tag (2.13.0+cpu and a CPU wheel's 2.13.0 are one release)
    return {m.__name__: m.__version__.split("+")[0] for m in (torch, onnxruntime, onnx)}


def dumps(results: dict) -> str:
    return json.dumps(results, indent=1, sort_keys=True) + "\n"


def committed() -> dict:
    return json.loads(RESULTS.read_text(encoding="utf-8"))


def route_dtypes(route: str, dtypes) -> tuple:
    """FlexAttention (compiled once per dtype and shape bucket) is judged at float32 here;
    ``benchmarks/judge_kernels.py --all-flex`` adds float16 and bfloat16."""
    return ("float32",) if route == "flex" else tuple(dtypes)


def route_vectors(route: str, vectors) -> list:
    """What a route is judged by in the committed set: every sdpa value vector, but for
    FlexAttention the small GQA ones (five more compiled head layouts, about two minutes of a
    cold cache on two cores; ``benchmarks/judge_kernels.py --all-flex`` judges them)."""
    if route != "flex":
        return list(vectors)
    return [v for v in vectors if "/stress-" in v.id or v.attributes.get("num_kv_heads") is None]

