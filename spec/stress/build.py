"""Generate the stress family: expected values from the fast exact oracle, each vector checked
against the mpmath oracle on sampled rows, written as ``index.json`` plus one zlib'd file of
little-endian float64 (bool: uint8) arrays per vector. ``generate(check=True)`` writes
nothing and returns the files that would change.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import zlib

import numpy as np

from .. import SPEC_VERSION
from .. import fastoracle as fo
from . import DATA_DIR, INDEX, STRESS_DIR, canonical_hash
from .cases import every
from .recipes import build_inputs, digest

SAMPLE_ROWS = 4  # norm/softmax rows checked against mpmath per vector (and the last)
ROW_BUDGET = 300_000  # mpmath multiply-adds per sdpa vector for its sampled query rows
FULL_MP_LIMIT = 1_200_000  # multiply-adds up to which a whole VJP is checked with mpmath


class StressError(Exception):
    pass


def _function(component: str, name: str):
    mod = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.cases.{component}")
    return mod.COMPONENT, mod.COMPONENT.functions[name]


def _f(x):
    return fo.to_float(x) if isinstance(x, tuple) else np.asarray(x)


# -- expected values -------------------------------------------------------------------

def expected(fn: str, x: dict, p: dict, a: dict, cot: dict | None):
    """({output: array}, {"inputs": {...}, "params": {...}} or None)."""
    if fn in MOE:
        from .moecheck import moe_expected

        return moe_expected(fn, x, p, a, cot)
    if fn == "mla":  # small enough for the mpmath oracle itself (its matmuls are exact)
        from ..oracle.core import tofloat
        from ..oracle.mla import mla, mla_vjp

        out = {"y": tofloat(mla(**x, **a, params=p)["y"])}
        grads = None
        if cot:
            gi, gp = mla_vjp(cot, **x, **a, params=p)
            grads = {"inputs": {"x": tofloat(gi["x"])}, "params": {k: tofloat(v) for k, v in gp.items()}}
        return out, grads
    if fn == "sdpa":
        kw = {k: a[k] for k in ("scale", "num_kv_heads", "softcap")}
        out = fo.sdpa(x["q"], x["k"], x["v"], x.get("mask"), x.get("bias"), **kw)
        grads = None
        if cot:
            g = fo.sdpa_vjp(cot, x["q"], x["k"], x["v"], x.get("mask"), None, **kw)
            grads = {"inputs": {n: _f(g[n]) for n in ("q", "k", "v")}, "params": {}}
        return {"output": _f(out["output"]), "weights": _f(out["weights"])}, grads
    if fn == "mha":
        kw = {"num_heads": a["num_heads"], "num_kv_heads": a["num_kv_heads"], "params": p}
        out = fo.mha(x["query"], x["key"], x["value"], x.get("mask"), **kw)
        grads = None
        if cot:
            gi, gp = fo.mha_vjp(cot, x["query"], x["key"], x["value"], x.get("mask"), **kw)
            grads = {"inputs": {n: _f(gi[n]) for n in ("query", "key", "value")},
                     "params": {n: _f(gp[n]) for n in p}}
        return {"output": _f(out["output"]), "weights": _f(out["weights"])}, grads
    if fn == "softmax":
        if a["axis"] != -1:
            raise StressError("softmax stress vectors use axis = -1")
        y = fo.softmax(x["x"], x.get("mask"))["y"]
        grads = cot and {"inputs": {"x": _f(fo.softmax_vjp(x["x"], cot["y"], x.get("mask"))["x"])},
                         "params": {}}
        return {"y": _f(y)}, grads or None
    if fn == "layer_norm":
        if a["variant"] != "canonical":
            raise StressError("layer_norm stress vectors use the canonical variant")
        y = fo.layer_norm(x["x"], p["gamma"], p["beta"], a["eps"])["y"]
        grads = None
        if cot:
            g = fo.layer_norm_vjp(cot["y"], x["x"], p["gamma"], p["beta"], a["eps"])
            grads = {"inputs": {"x": _f(g["x"])}, "params": {"gamma": _f(g["gamma"]), "beta": _f(g["beta"])}}
        return {"y": _f(y)}, grads
    if fn == "rms_norm":
        y = fo.rms_norm(x["x"], p["gamma"], a["eps"])["y"]
        grads = None
        if cot:
            g = fo.rms_norm_vjp(cot["y"], x["x"], p["gamma"], a["eps"])
            grads = {"inputs": {"x": _f(g["x"])}, "params": {"gamma": _f(g["gamma"])}}
        return {"y": _f(y)}, grads
    if fn == "cross_entropy":
        if a["label_smoothing"] != 0.0 or a["reduction"] != "mean":
            raise StressError("cross_entropy stress vectors use the mean, without smoothing")
        loss = fo.cross_entropy(x["logits"], x["targets"], a["ignore_index"])["loss"]
        grads = None
        if cot:
            g = fo.cross_entropy_vjp(float(cot["loss"]), x["logits"], x["targets"], a["ignore_index"])
            grads = {"inputs": {"logits": _f(g["logits"])}, "params": {}}
        return {"loss": _f(loss)}, grads
    if fn == "sdpa_lse" and cot:
        kw = {k: a.get(k) for k in ("scale", "num_kv_heads", "softcap")}
        g = fo.sdpa_vjp(cot, x["q"], x["k"], x["v"], x.get("mask"), None, **kw)
        return (_interface_expected(fn, x, a, None),
                {"inputs": {n: _f(g[n]) for n in ("q", "k", "v")}, "params": {}})
    if fn in INTERFACES:
        return _interface_expected(fn, x, a, cot), None
    if fn in ("causal_mask", "sliding_window_mask", "local_window_mask", "chunked_mask",
              "rope"):  # exact or small: the oracle itself
        from ..oracle import masks, rope
        from ..oracle.core import tofloat

        def _np(v):
            return tofloat(v) if np.asarray(v).dtype == object else np.asarray(v)

        if cot and fn != "rope":
            raise StressError(f"{fn}: no stress gradients")
        f = {"causal_mask": masks.causal_mask, "sliding_window_mask": masks.sliding_window_mask,
             "local_window_mask": masks.local_window_mask, "chunked_mask": masks.chunked_mask,
             "rope": rope.rope}[fn]
        out = f(**x, **a)
        grads = None
        if cot:  # rope: dx = R^T dy, the oracle's rotation by the opposite angle
            from ..oracle.rope import rope_vjp

            dx, _ = rope_vjp(cot, x["x"], **a)
            grads = {"inputs": {"x": _np(dx["x"])}, "params": {}}
        return {k: _np(v) for k, v in out.items()}, grads
    raise StressError(f"no fast oracle for {fn!r}")


INTERFACES = ("sdpa_lse", "sdpa_sinks", "sdpa_varlen", "paged_attention")
MOE = ("moe_router", "moe")  # spec/stress/fastmoe.py, checked by spec/stress/moecheck.py


def _interface_expected(fn: str, x: dict, a: dict, cot) -> dict:
    """The kernel interfaces' outputs (stress gradients: sdpa_lse's only, in expected)."""
    if cot:
        raise StressError(f"{fn}: no stress gradients")
    attention = {k: a.get(k) for k in ("scale", "num_kv_heads", "softcap")}
    if fn == "sdpa_lse":
        out = fo.sdpa_lse(x["q"], x["k"], x["v"], x.get("mask"), x.get("bias"), **attention)
    elif fn == "sdpa_sinks":
        out = fo.sdpa_sinks(x["q"], x["k"], x["v"], x["sinks"], x.get("mask"), x.get("bias"),
                            **attention)
    elif fn == "sdpa_varlen":
        out = fo.sdpa_varlen(x["q"], x["k"], x["v"], x["cu_seqlens_q"], x["cu_seqlens_k"],
                             **{k: a.get(k) for k in ("scale", "causal", "window", "window_left",
                                                      "window_right")})
    else:
        out = fo.paged_attention(x["q"], x["k_cache"], x["v_cache"], x["block_table"],
                                 x["seq_lens"], a.get("scale"), a.get("causal", False))
    return {k: _f(v) for k, v in out.items()}


# -- the mpmath check --------------------------------------------------------------------

def _same(got: np.ndarray, want, where: str) -> int:
    from ..oracle.core import tofloat

    want = np.asarray(want)
    want = tofloat(want) if want.dtype == object else want.astype(np.float64)
    got = np.asarray(got, dtype=np.float64)
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    # an exact zero (cancelling terms) that the mpmath oracle leaves as a residue far below
    # any float64 term (its working precision): the fast oracle's 0 is the exact value
    bad &= ~((got == 0) & (np.abs(want) < 2.0 ** -130))
    if got.shape != want.shape or np.any(bad):
        i = np.argwhere(bad)[0] if got.shape == want.shape else None
        raise StressError(f"{where}: the fast oracle differs from mpmath"
                          + (f" at {tuple(i)}: {got[tuple(i)]!r} != {want[tuple(i)]!r}" if i is not None
                             else f": shapes {got.shape} != {want.shape}"))
    return got.size


def _rows(rng: np.random.Generator, n: int, k: int = SAMPLE_ROWS) -> list[int]:
    """The last row and k random ones."""
    return sorted({n - 1} | {int(i) for i in rng.integers(0, n, size=k)})


def mp_check(vid: str, fn: str, x: dict, p: dict, a: dict, cot, outputs: dict, grads) -> int:
    """Compare sampled rows (or everything, where cheap) with the mpmath oracle; returns the
    number of elements compared."""
    from ..oracle import vjps

    VJPS = vjps()

    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(vid.encode()).digest()[:4], "little"))
    n = 0
    if fn in MOE:
        from .moecheck import moe_check

        return moe_check(vid, fn, x, p, a, cot, outputs, grads, rng)
    if fn == "sdpa":
        from ..oracle.sdpa import sdpa as mp_sdpa

        q = x["q"]
        full = q.shape[:-2] if a["num_kv_heads"] is not None else np.broadcast_shapes(
            q.shape[:-2], x["k"].shape[:-2], x["v"].shape[:-2])
        per_row = int(np.prod(full[1:])) * x["k"].shape[-2] * (q.shape[-1] + x["v"].shape[-1])
        for b in _rows(rng, full[0], 0):
            for t in _rows(rng, q.shape[-2], max(0, ROW_BUDGET // per_row - 1)):
                sub = _sdpa_row(x, b, t, full)
                want = mp_sdpa(**sub, **{k: a[k] for k in ("scale", "num_kv_heads", "softcap")})
                for name in ("output", "weights"):
                    n += _same(outputs[name][b:b + 1, ..., t:t + 1, :], want[name],
                               f"{vid} {name}[{b},..,{t}]")
                if grads:
                    c = {k: v[b:b + 1, ..., t:t + 1, :] for k, v in cot.items()}
                    gi, _ = VJPS["sdpa"](c, **sub, **{k: a[k] for k in ("scale", "num_kv_heads", "softcap")})
                    n += _same(grads["inputs"]["q"][b:b + 1, ..., t:t + 1, :], gi["q"],
                               f"{vid} dq[{b},..,{t}]")
        if grads:
            cost = np.prod(full) * q.shape[-2] * x["k"].shape[-2] * (q.shape[-1] + x["v"].shape[-1])
            if cost <= FULL_MP_LIMIT:
                gi, _ = VJPS["sdpa"](cot, **x, **{k: a[k] for k in ("scale", "num_kv_heads", "softcap")})
                for name in ("k", "v"):
                    n += _same(grads["inputs"][name], gi[name], f"{vid} d{name}")
            else:
                n += _sdpa_kv_columns(vid, x, a, cot, grads, rng)
        return n
    if fn == "mha":
        from .mhacheck import mha_check

        return mha_check(vid, x, p, a, cot, outputs, grads, rng)
    if fn == "softmax":
        from ..oracle.softmax import softmax as mp_softmax

        for r in _rows(rng, x["x"].shape[0]):
            sub = {"x": x["x"][r:r + 1]}
            if "mask" in x:
                sub["mask"] = x["mask"][r:r + 1]
            n += _same(outputs["y"][r:r + 1], mp_softmax(**sub)["y"], f"{vid} y[{r}]")
            if grads:
                gi, _ = VJPS["softmax"]({"y": cot["y"][r:r + 1]}, **sub)
                n += _same(grads["inputs"]["x"][r:r + 1], gi["x"], f"{vid} dx[{r}]")
        return n
    if fn in ("layer_norm", "rms_norm"):
        mod = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.oracle.{fn}")
        attrs = {k: v for k, v in a.items() if k in ("eps", "variant")}
        for r in _rows(rng, x["x"].shape[0]):
            want = getattr(mod, fn)(x["x"][r:r + 1], params=p, **attrs)["y"]
            n += _same(outputs["y"][r:r + 1], want, f"{vid} y[{r}]")
        if grads:
            gi, gp = VJPS[fn](cot, x=x["x"], params=p, **attrs)
            n += _same(grads["inputs"]["x"], gi["x"], f"{vid} dx")
            for k in gp:
                n += _same(grads["params"][k], gp[k], f"{vid} d{k}")
        return n
    if fn == "cross_entropy":  # the same sampled rows through both oracles
        from ..oracle.losses import cross_entropy as mp_ce

        rows = _rows(rng, x["logits"].shape[0], 3)
        z, t = x["logits"][rows], x["targets"][rows]
        if np.all(t == a["ignore_index"]):
            t = t.copy()
            t[-1] = 0
        got = _f(fo.cross_entropy(z, t, a["ignore_index"])["loss"])
        n += _same(got, mp_ce(z, t, **a)["loss"], f"{vid} loss of rows {rows}")
        if grads:
            got = _f(fo.cross_entropy_vjp(float(cot["loss"]), z, t, a["ignore_index"])["logits"])
            gi, _ = VJPS["cross_entropy"](cot, logits=z, targets=t, **a)
            n += _same(got, gi["logits"], f"{vid} dlogits of rows {rows}")
        return n
    if fn in INTERFACES:
        n = _interface_check(vid, fn, x, a, outputs, rng)
        if grads:  # sdpa_lse: the whole VJP in mpmath (the case is kept small enough)
            kw = {k: a.get(k) for k in ("scale", "num_kv_heads", "softcap")}
            gi, _ = VJPS["sdpa_lse"](cot, **x, **kw)
            for name in ("q", "k", "v"):
                n += _same(grads["inputs"][name], gi[name], f"{vid} d{name}")
        return n
    return 0  # masks, rope, mla: computed by the mpmath oracle itself


def _interface_check(vid, fn, x, a, outputs, rng) -> int:
    """Sampled query rows against mpmath: sdpa_lse and sdpa_sinks through their own
    oracles; a packed or paged row through the sdpa oracle on its sequence's keys."""
    from ..oracle.sdpa import sdpa as mp_sdpa

    n = 0
    if fn in ("sdpa_lse", "sdpa_sinks"):
        from ..oracle.attention_sinks import sdpa_sinks as mp_sinks
        from ..oracle.sdpa_lse import sdpa_lse as mp_lse

        q, attention = x["q"], {k: a.get(k) for k in ("scale", "num_kv_heads", "softcap")}
        full = q.shape[:-2]
        for b in _rows(rng, full[0], 0):
            for t in _rows(rng, q.shape[-2], 2):
                sub = _sdpa_row(x, b, t, full)
                if fn == "sdpa_lse":
                    want = mp_lse(**sub, **attention)
                    n += _same(outputs["lse"][b:b + 1, ..., t:t + 1], want["lse"], f"{vid} lse[{b},..,{t}]")
                else:
                    want = mp_sinks(**sub, sinks=x["sinks"], **attention)
                    n += _same(outputs["weights"][b:b + 1, ..., t:t + 1, :], want["weights"],
                               f"{vid} weights[{b},..,{t}]")
                n += _same(outputs["output"][b:b + 1, ..., t:t + 1, :], want["output"],
                           f"{vid} output[{b},..,{t}]")
        return n
    for q, k, v, keep, where in _sequences(fn, x, a):
        for t in (_rows(rng, q.shape[0], 1) if q.shape[0] else []):
            h_kv = k.shape[1]
            want = mp_sdpa(np.swapaxes(q[t:t + 1], 0, 1)[None], np.swapaxes(k, 0, 1)[None],
                           np.swapaxes(v, 0, 1)[None], keep[t:t + 1], scale=a.get("scale"),
                           num_kv_heads=None if h_kv == q.shape[1] else h_kv)["output"]
            got = outputs["output"][where][t:t + 1]  # (1, H, V)
            n += _same(got, np.swapaxes(np.asarray(want)[0], 0, 1), f"{vid} output row {t} of {where}")
    return n


def _sequences(fn, x, a):
    """(q (T, H, K), k, v (S, H_kv, .), keep (T, S), where in the output) per sequence."""
    if fn == "sdpa_varlen":
        cq, ck = x["cu_seqlens_q"], x["cu_seqlens_k"]
        for b in range(len(cq) - 1):
            rq, rk = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
            keep = fo.local_keep(rq.stop - rq.start, rk.stop - rk.start, a.get("causal", False),
                                 a.get("window"), a.get("window_left"), a.get("window_right"))
            yield x["q"][rq], x["k"][rk], x["v"][rk], keep, (rq,)
        return
    page = x["k_cache"].shape[1]
    for b, n in enumerate(int(s) for s in x["seq_lens"]):
        blocks = x["block_table"][b][: -(-n // page)]
        keep = fo.local_keep(x["q"].shape[1], n, a.get("causal", False))
        yield (x["q"][b], fo.gather_pages(x["k_cache"], blocks, n),
               fo.gather_pages(x["v_cache"], blocks, n), keep, (b,))


def _sdpa_row(x: dict, b: int, t: int, full) -> dict:
    q = x["q"]
    sub = {"q": q[b:b + 1, ..., t:t + 1, :], "k": x["k"][b:b + 1], "v": x["v"][b:b + 1]}
    keep_shape = full + (q.shape[-2], x["k"].shape[-2])
    for name in ("mask", "bias"):
        if x.get(name) is not None:
            m = np.broadcast_to(x[name], np.broadcast_shapes(x[name].shape, keep_shape))
            sub[name] = m[b:b + 1, ..., t:t + 1, :]
    return sub


def _sdpa_kv_columns(vid, x, a, cot, grads, rng) -> int:
    """dk and dv on sampled keys, in mpmath, from the exact integer scores: dv[s] = sum_t
    w[t, s] dO[t], dk[s] = c sum_t dS[t, s] q[t], each weight and dS in mpmath."""
    import mpmath

    from ..oracle.core import tofloat

    if a["softcap"] is not None or x.get("bias") is not None or a["num_kv_heads"] is not None:
        raise StressError(f"{vid}: the column check covers plain sdpa only (make it smaller)")
    q, k, v = x["q"], x["k"], x["v"]
    width = q.shape[-1]
    c = 1 / mpmath.sqrt(width) if a["scale"] is None else mpmath.mpf(a["scale"])
    keep = np.broadcast_to(x["mask"] if x.get("mask") is not None else True,
                           q.shape[:-1] + (k.shape[-2],))
    raw = fo.exact_matmul(q, np.swapaxes(k, -1, -2))
    if np.any(raw[1] != 0):
        raise StressError(f"{vid}: scores not exact in float64")
    do = cot["output"]
    dp = fo.exact_matmul(do, np.swapaxes(v, -1, -2))[0] + cot.get("weights", 0.0)
    n = 0
    for idx in np.ndindex(q.shape[:-2]):
        w = np.empty(raw[0][idx].shape, dtype=object)
        for t in range(w.shape[0]):
            kept = [j for j in range(w.shape[1]) if keep[idx + (t, j)]]
            if not kept:
                w[t, :] = mpmath.mpf(0)
                continue
            s = {j: mpmath.mpf(raw[0][idx + (t, j)]) * c for j in kept}
            m = max(s.values())
            e = {j: mpmath.exp(s[j] - m) for j in kept}
            tot = mpmath.fsum(e.values())
            w[t, :] = mpmath.mpf(0)
            for j in kept:
                w[t, j] = e[j] / tot
        deltas = [mpmath.fsum(w[t, s] * dp[idx + (t, s)] for s in range(w.shape[1]) if w[t, s])
                  for t in range(w.shape[0])]
        for j in _rows(rng, w.shape[1], 2):
            dv = [mpmath.fsum(w[t, j] * do[idx + (t, i)] for t in range(w.shape[0]))
                  for i in range(v.shape[-1])]
            n += _same(grads["inputs"]["v"][idx + (j,)], tofloat(np.array(dv, dtype=object)),
                       f"{vid} dv[{idx}, {j}]")
            ds = []
            for t in range(w.shape[0]):
                ds.append(w[t, j] * (dp[idx + (t, j)] - deltas[t]) * c)
            dk = [mpmath.fsum(ds[t] * q[idx + (t, i)] for t in range(w.shape[0])) for i in range(width)]
            n += _same(grads["inputs"]["k"][idx + (j,)], tofloat(np.array(dk, dtype=object)),
                       f"{vid} dk[{idx}, {j}]")
    return n


# -- writing ---------------------------------------------------------------------------------

# Attributes added to a function after its stress vectors were released: a stress vector
# states one only where its case sets it (without it, the default), so the released
# vectors keep their bytes, as Fn(added=...) does for the ordinary vectors.
ADDED_AFTER_STRESS = {"rms_norm": ("unit_offset",), "rope": ("rotary_dim", "scaling")}


def build_vector(c: dict, derived: dict, check_mp: bool = True) -> tuple[dict, bytes, int]:
    """One vector, at the mpmath oracle's working precision (it sets none at import)."""
    from ..oracle.core import precision

    with precision():
        return _build_vector(c, derived, check_mp)


def _build_vector(c: dict, derived: dict, check_mp: bool = True) -> tuple[dict, bytes, int]:
    from ..generate import _tolerances

    vid = c["id"]
    component = vid.split("/")[0]
    comp, fn = _function(component, c["function"])
    attrs = {**fn.attributes, **fn.added, **c["attributes"]}
    late = ADDED_AFTER_STRESS.get(c["function"], ())
    stated = {k: v for k, v in attrs.items() if k not in late or k in c["attributes"]}
    x = build_inputs(c["inputs"], vid)
    p = build_inputs(c["params"], vid)
    cot = build_inputs(c.get("cotangents", {}), vid) or None
    _check_exact(vid, c["dtypes"], x, p, cot or {})
    outputs, grads = expected(c["function"], x, p, attrs, cot)
    checked = mp_check(vid, c["function"], x, p, attrs, cot, outputs, grads) if check_mp else 0
    arrays = [(f"outputs.{k}", outputs[k]) for k in fn.returns]
    if grads:
        arrays += [(f"gradients.inputs.{k}", g) for k, g in grads["inputs"].items()]
        arrays += [(f"gradients.params.{k}", g) for k, g in grads["params"].items()]
    raw = b"".join(_bytes(a) for _, a in arrays)
    blob = zlib.compress(raw, 9)
    default = _tolerances(derived.get("_default", {}).get(component), comp.tolerances)
    entry = {"id": vid, "function": c["function"], "description": c["description"],
             "flags": c["flags"], "dtypes": c["dtypes"]}
    if "dtype_note" in c:
        entry["dtype_note"] = c["dtype_note"]
    entry.update({
        "expect": c["expect"], "attributes": stated,
        "tolerances": _tolerances(derived.get(vid), default),
        "recipes": {g: c[g] for g in ("inputs", "params", "cotangents") if c.get(g)},
        "digests": _digests(x, p, cot or {}),
        "data": {"file": f"{component}/{vid.split('/')[1]}.f64.z", "bytes": len(blob),
                 "raw_bytes": len(raw), "sha256": hashlib.sha256(blob).hexdigest(),
                 "arrays": [{"name": k, "dtype": _kind(a), "shape": list(a.shape)}
                            for k, a in arrays]},
    })
    entry = {"id": vid, "sha256": canonical_hash(entry), **{k: v for k, v in entry.items() if k != "id"}}
    return entry, blob, checked


def _digests(x: dict, p: dict, cot: dict) -> dict:
    return {f"{g}.{k}": digest(a) for g, d in (("inputs", x), ("params", p), ("cotangents", cot))
            for k, a in d.items()}


def _kind(a: np.ndarray) -> str:
    return "bool" if a.dtype == np.bool_ else "int64" if a.dtype.kind in "iu" else "float64"


def _bytes(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.astype({"bool": np.uint8, "int64": "<i8", "float64": "<f8"}[_kind(a)]).tobytes()


def _check_exact(vid: str, dtypes: list, *groups) -> None:
    from ..tensor import representable

    for g in groups:
        for name, a in g.items():
            if np.asarray(a).dtype.kind == "f":
                for d in dtypes:
                    if not representable(a, d):
                        raise StressError(f"{vid}: {name} is not exact in {d}")


def generate(check: bool = False, derived: dict | None = None, jobs: int = 1,
             log=None) -> tuple[list[str], list[dict], str]:
    """Build every stress vector; returns the files (relative to spec/) that changed or would,
    the release-record entries of the vectors and the SHA-256 of the index."""
    cases = stress_cases()
    if jobs > 1:  # the pool of `attnspec generate` (spec/workers.py)
        from ..workers import run_tasks

        built = run_tasks([(build_vector, (c, derived or {})) for c in cases], jobs,
                          list(range(len(cases))))
    else:
        built = [build_vector(c, derived or {}) for c in cases]
    return finish(built, check, log)


def stress_cases() -> list[dict]:
    """Every stress case, in the index's order (ids checked unique)."""
    cases = list(every())
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise StressError("duplicate stress ids")
    return cases


def finish(built: list, check: bool = False, log=None) -> tuple[list[str], list[dict], str]:
    """Write (or, with ``check``, compare) the index and data of the built vectors (the
    results of :func:`build_vector` in the order of :func:`stress_cases`); returns what
    :func:`generate` returns."""
    files = {INDEX: _index_bytes([e for e, _, _ in built])}
    for e, blob, checked in built:
        files[f"data/{e['data']['file']}"] = blob
        if log:
            log(f"{e['id']}: {e['data']['bytes']} bytes, {checked} elements checked against mpmath")
    changed = []
    for name, data in files.items():
        path = STRESS_DIR / name
        if not path.exists() or path.read_bytes() != data:
            changed.append(f"stress/{name}")
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    wanted = {STRESS_DIR / n for n in files}
    stale = [p for p in DATA_DIR.rglob("*.z") if p not in wanted] if DATA_DIR.exists() else []
    for p in stale:
        changed.append(f"stress/{p.relative_to(STRESS_DIR)} (no stress case)")
        if not check:
            p.unlink()
    entries = [{"id": e["id"], "file": f"stress/{INDEX}", "sha256": e["sha256"],
                "tolerances": e["tolerances"], "deprecated": False} for e, _, _ in built]
    return changed, entries, hashlib.sha256(files[INDEX]).hexdigest()


def retolerance(derived: dict) -> list[str]:
    """Give the index entries the tolerances ``derived`` (and the components' defaults) now
    say, without rebuilding the data (what ``generate`` would write, in seconds); returns
    the ids whose tolerances changed."""
    from ..generate import _tolerances
    from . import read_index

    doc = read_index()
    changed = []
    for i, e in enumerate(doc["vectors"]):
        component = e["id"].split("/")[0]
        comp, _ = _function(component, e["function"])
        default = _tolerances(derived.get("_default", {}).get(component), comp.tolerances)
        tol = _tolerances(derived.get(e["id"]), default)
        if tol != e["tolerances"]:
            changed.append(e["id"])
            e = {**e, "tolerances": tol}
            e["sha256"] = canonical_hash(e)
            doc["vectors"][i] = e
    (STRESS_DIR / INDEX).write_bytes(_index_bytes(doc["vectors"]))
    return changed


def _index_bytes(entries: list[dict]) -> bytes:
    return (json.dumps({"spec_version": SPEC_VERSION, "vectors": entries}, indent=1, ensure_ascii=False,
                       allow_nan=False) + "\n").encode()


def rebuild(ids: list[str], derived: dict) -> None:
    """Rebuild only the vectors ``ids`` (the others' entries and files kept as they are)."""
    from . import read_index

    doc = read_index()
    cases = {c["id"]: c for c in every()}
    unknown = sorted(set(ids) - set(cases))
    if unknown:
        raise StressError(f"no stress case {unknown}")
    at = {e["id"]: i for i, e in enumerate(doc["vectors"])}
    for vid in ids:
        entry, blob, _ = build_vector(cases[vid], derived)
        path = DATA_DIR / entry["data"]["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
        if vid in at:
            doc["vectors"][at[vid]] = entry
        else:
            doc["vectors"].append(entry)
    order = list(cases)
    doc["vectors"].sort(key=lambda e: order.index(e["id"]))
    (STRESS_DIR / INDEX).write_bytes(_index_bytes(doc["vectors"]))


def stress_ids() -> list[str]:
    return [c["id"] for c in every()]


def main(argv=None) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(description="generate the stress family")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", nargs="+", metavar="ID", help="rebuild these vectors only")
    ap.add_argument("--retolerance", action="store_true",
                    help="only give every entry the tolerances cases/tolerances.json says")
    args = ap.parse_args(argv)
    from ..generate import read_derived

    if args.only:
        rebuild(args.only, read_derived())
        return 0
    if args.retolerance:
        print("new tolerances:", retolerance(read_derived()))
        return 0
    t0 = time.perf_counter()
    changed, _, _ = generate(args.check, read_derived(), args.jobs, log=print)
    print(f"{len(changed)} file(s) {'would change' if args.check else 'written'} in "
          f"{time.perf_counter() - t0:.1f} s: {changed[:5]}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
