"""Expected values of the router and MoE stress vectors (spec/stress/fastmoe.py) and their
mpmath check: both components act token by token (the router on a row of logits, the layer
on a row of x), so sampled tokens go through the mpmath oracles (spec/oracle/moe_router.py,
spec/oracle/moe_layer.py) on their own rows and every output, index and gradient row is
compared exactly. The layer's parameter gradients sum over every token: with gradients,
a sampled subset of tokens is checked through both oracles, the fast one run on the same
subset (the sums over the subset, element for element).
"""

from __future__ import annotations

import numpy as np

from .. import fastoracle as fo
from . import fastmoe as fm

ROUTER = ("top_k", "scoring", "renormalize", "eps", "n_group", "topk_group",
          "routed_scaling_factor")
TOKENS = 5  # sampled tokens (and the last) per vector


def _f(x):
    return fo.to_float(x)


def moe_expected(fn: str, x: dict, p: dict, a: dict, cot):
    """({output: array}, {"inputs": ..., "params": ...} or None)."""
    if fn == "moe_router":
        kw = {k: a[k] for k in ROUTER}
        z = fo.dd(np.asarray(x["logits"], np.float64))
        r = fm.router(z, x.get("correction_bias"), **kw)
        out = {"weights": _f(r["weights"]), "indices": r["indices"].astype(np.int64)}
        grads = None
        if cot:
            dz = fm.router_vjp(fo.dd(np.asarray(cot["weights"], np.float64)), z,
                               x.get("correction_bias"), **kw)
            grads = {"inputs": {"logits": _f(dz)}, "params": {}}
            if x.get("correction_bias") is not None:
                grads["inputs"]["correction_bias"] = np.zeros(np.shape(x["correction_bias"]))
        return out, grads
    out = fm.moe(x["x"], p, a)
    grads = None
    if cot:
        gi, gp = fm.moe_vjp(cot, x["x"], p, a)
        grads = {"inputs": {"x": _f(gi["x"])}, "params": {k: _f(v) for k, v in gp.items()}}
    return {"y": _f(out["y"]), "router_logits": _f(out["router_logits"])}, grads


def _tokens(rng, n: int) -> list[int]:
    return sorted({n - 1} | {int(i) for i in rng.integers(0, n, size=TOKENS)})


def moe_check(vid, fn, x, p, a, cot, outputs, grads, rng) -> int:
    from ..oracle import moe_layer, moe_router
    from .build import _same

    n = 0
    if fn == "moe_router":
        kw = {k: a[k] for k in ROUTER}
        rows = _tokens(rng, x["logits"].shape[0])
        z, b = x["logits"][rows], x.get("correction_bias")
        want = moe_router.moe_router(z, b, **kw)
        n += _same(outputs["weights"][rows], want["weights"], f"{vid} weights of tokens {rows}")
        if not np.array_equal(outputs["indices"][rows], want["indices"]):
            from .build import StressError

            raise StressError(f"{vid}: the fast oracle's indices of tokens {rows} differ from mpmath")
        n += len(rows) * want["indices"].shape[1]
        if grads:
            gi, _ = moe_router.moe_router_vjp({"weights": cot["weights"][rows]}, z, b, **kw)
            n += _same(grads["inputs"]["logits"][rows], gi["logits"], f"{vid} dlogits of {rows}")
        return n
    kw = {k: a[k] for k in ROUTER}
    rows = _tokens(rng, x["x"].shape[0])
    xs = x["x"][rows]
    want = moe_layer.moe(xs, params=p, **kw)
    for name in ("y", "router_logits"):
        n += _same(outputs[name][rows], want[name], f"{vid} {name} of tokens {rows}")
    if grads:
        c = {k: v[rows] for k, v in cot.items()}
        gi, gp = moe_layer.moe_vjp(c, xs, params=p, **kw)
        n += _same(grads["inputs"]["x"][rows], gi["x"], f"{vid} dx of tokens {rows}")
        fi, fp = fm.moe_vjp(c, xs, p, a)  # the same subset through the fast oracle
        for k in gp:
            n += _same(_f(fp[k]), gp[k], f"{vid} d{k} over tokens {rows}")
    return n
