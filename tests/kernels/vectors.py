"""The sdpa vectors as a kernel sees them, and the judging shared by the tiled kernel's
tests, the planted bugs and the real kernels (tests/kernels, benchmarks/judge_kernels.py).

Every value vector of a component is taken, whatever its flags (the stress family,
``<component>/stress-...``, included once it lands), up to ``max_elements`` scores
(``B·H·T·S``) where a kernel is slow. A causal or sliding-window mask is recognised and
handed to the kernel as ``causal`` / ``window``, as a kernel's adapter would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from attnspec.backends.numpy import attention as npa
from attnspec.conformance.runner import Result, judge
from attnspec.spec.tensor import round_to
from attnspec.spec.vectors import default_spec

SPEC = default_spec()


def value_vectors(component: str = "sdpa", max_elements: int | None = None) -> list:
    found = [v for v in SPEC.vectors
             if v.component == component and v.expect == "value" and not v.deprecated
             and (max_elements is None or scores_size(v) <= max_elements)]
    assert found, f"no {component} value vector"
    return found


def scores_size(v) -> int:
    q, k = v.inputs["q"], v.inputs["k"]
    return math.prod(q.shape[:-2]) * max(1, math.prod(k.shape[:-3])) * q.shape[-2] * k.shape[-2]


@dataclass
class Call:
    """One sdpa call: arrays (float64) and attributes, the mask split into a recognised
    ``causal`` / ``window`` and the rest."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None = None
    bias: np.ndarray | None = None
    scale: float | None = None
    num_kv_heads: int | None = None
    softcap: float | None = None
    causal: bool = False
    window: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def t(self):
        return self.q.shape[-2]

    @property
    def s(self):
        return self.k.shape[-2]


def as_call(v) -> Call:
    attrs = {**SPEC.functions[v.function].attributes, **v.attributes}
    x = v.inputs
    c = Call(x["q"], x["k"], x["v"], x.get("mask"), x.get("bias"), attrs.get("scale"),
             attrs.get("num_kv_heads"), attrs.get("softcap"))
    return recognise_mask(c)


def recognise_mask(c: Call) -> Call:
    """A mask equal in every batch slice to the bottom-right causal mask, or to a sliding
    window of it, becomes ``causal=True`` or ``window=w`` (mask None)."""
    if c.mask is None or c.mask.ndim < 2 or c.mask.shape[-2:] != (c.t, c.s) or c.t == 0 or c.s == 0:
        return c
    m = c.mask.reshape(-1, c.t, c.s)
    if not (m == m[:1]).all():
        return c
    causal = npa.causal_mask(t=c.t, s=c.s)
    if (m[0] == causal).all():
        c.mask, c.causal = None, True
        return c
    for w in range(1, c.s):
        if (m[0] == npa.sliding_window_mask(t=c.t, s=c.s, window=w)).all():
            c.mask, c.window = None, w
            return c
    return c


def rounded(a, dtype):
    return None if a is None else (round_to(a, dtype) if a.dtype.kind == "f" else a)


def judged(v, dtype: str, outputs: dict) -> Result:
    """The vector's own judgement at ``dtype`` (its tolerances, every output)."""
    got = {n: np.asarray(a).astype(np.float64) for n, a in outputs.items()}
    return judge(v, dtype, got, {}, Result(v.id, dtype, "pass", component=v.component))


ALL_DTYPES = ("float64", "float32", "float16", "bfloat16")


def own_case(case_id: str, call: Call, note: str, dtypes=ALL_DTYPES):
    """A vector-like case built here: expected output and weights are the NumPy backend's
    sdpa in float64 on ``call``'s inputs (exact in each of ``dtypes``, checked), with sdpa's
    component tolerances (those of ``sdpa/basic-001``)."""
    arrays = [a for a in (call.q, call.k, call.v, call.bias) if a is not None]
    for dtype in dtypes:
        assert all((round_to(a, dtype) == a)[np.isfinite(a)].all() for a in arrays), \
            f"{case_id}: inputs must be exact in {dtype}"
    mask = call.mask
    if call.causal or call.window is not None:
        cm = (npa.causal_mask(t=call.t, s=call.s) if call.window is None
              else npa.sliding_window_mask(t=call.t, s=call.s, window=call.window))
        mask = cm if mask is None else mask & cm
    q, scale = call.q, call.scale
    if scale is not None and math.frexp(scale)[0] == 0.5 and call.softcap is None:
        q, scale = q * scale, 1.0  # c q k^T exactly, without overflowing q k^T in float64
    out, w = npa.sdpa(q, call.k, call.v, mask, call.bias, scale=scale,
                      num_kv_heads=call.num_kv_heads, softcap=call.softcap)
    basic = next(x for x in SPEC.vectors if x.id == "sdpa/basic-001")
    return SimpleNamespace(id=case_id, component="sdpa", call=call, note=note,
                           outputs={"output": out, "weights": w}, intermediates={},
                           tolerances=basic.tolerances,
                           dtypes=tuple(dtypes))


def judged_output(v, dtype: str, got: np.ndarray) -> Result:
    """The vector's judgement of its ``output`` alone (kernels return no weights)."""
    one = SimpleNamespace(id=v.id, component=v.component, outputs={"output": v.outputs["output"]},
                          intermediates={}, tolerances=v.tolerances)
    return judge(one, dtype, {"output": np.asarray(got, np.float64)}, {},
                 Result(v.id, dtype, "pass", component=v.component))
