"""The stress family: its fast oracle agrees with mpmath bit for bit, its number source is the
spec's, its loader refuses tampering, and its vectors catch the bugs they target."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from attnspec.spec import fastoracle as fo
from attnspec.spec.cases._build import Rng
from attnspec.spec.errors import VectorFileError
from attnspec.spec.oracle import vjps
from attnspec.spec.oracle.core import precision, tofloat

VJPS = vjps()


@pytest.fixture(autouse=True)
def _oracle_precision():
    with precision():
        yield


def _exact(fast, slow):
    a = fo.to_float(fast) if isinstance(fast, tuple) else np.asarray(fast)
    b = np.asarray(slow)
    b = tofloat(b) if b.dtype == object else b
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    assert a.shape == b.shape and same.all(), f"{int((~same).sum())} elements differ"


def test_splitmix_is_the_spec_number_source():
    from attnspec.spec.stress.recipes import integers, uniform

    r = Rng("stress/test")
    want = r.uniform((6, 7), -3, 3, 2.0 ** -4)
    assert np.array_equal(want, uniform("stress/test", (6, 7), -3, 3, 2.0 ** -4))
    r = Rng("other")
    assert np.array_equal(r.integers(-5, 1000, (40,)), integers("other", -5, 1000, (40,)))


@pytest.mark.parametrize("extra", [{}, {"softcap": 5.0}, {"scale": 0.3}])
def test_fast_sdpa_and_vjp_equal_mpmath(extra):
    from attnspec.spec.oracle.sdpa import sdpa

    r = Rng(f"stress/sdpa/{sorted(extra)}")
    q, k, v = r.uniform((2, 4, 5, 8), -4, 4), r.uniform((2, 2, 7, 8), -4, 4), r.uniform((2, 2, 7, 3))
    mask = r.bools((5, 7))
    mask[2] = False  # a fully masked row
    kw = {"mask": mask, "num_kv_heads": 2, **extra}
    fast, slow = fo.sdpa(q, k, v, **kw), sdpa(q, k, v, **kw)
    _exact(fast["output"], slow["output"])
    _exact(fast["weights"], slow["weights"])
    cot = {"output": r.uniform((2, 4, 5, 3))}
    g = fo.sdpa_vjp(cot, q, k, v, **kw)
    want, _ = VJPS["sdpa"](cot, q=q, k=k, v=v, **{"scale": None, "softcap": None, **kw})
    for name in "qkv":
        _exact(g[name], want[name])


def test_fast_softmax_norms_cross_entropy_equal_mpmath():
    from attnspec.spec.oracle.layer_norm import layer_norm
    from attnspec.spec.oracle.losses import cross_entropy
    from attnspec.spec.oracle.rms_norm import rms_norm
    from attnspec.spec.oracle.softmax import softmax

    r = Rng("stress/rest")
    x, m, dy = r.uniform((3, 4, 9), -8, 8), r.bools((3, 4, 9)), r.uniform((3, 4, 9))
    _exact(fo.softmax(x, m)["y"], softmax(x, m)["y"])
    _exact(fo.softmax_vjp(x, dy, m)["x"], VJPS["softmax"]({"y": dy}, x=x, mask=m)[0]["x"])
    gamma, beta = 1 + r.weights((9,), 0.5), r.weights((9,))
    want = layer_norm(x, 1e-5, params={"gamma": gamma, "beta": beta})["y"]
    _exact(fo.layer_norm(x, gamma, beta, 1e-5)["y"], want)
    gi, gp = VJPS["layer_norm"]({"y": dy}, x=x, eps=1e-5, params={"gamma": gamma, "beta": beta})
    g = fo.layer_norm_vjp(dy, x, gamma, beta, 1e-5)
    for name, want in (("x", gi["x"]), ("gamma", gp["gamma"]), ("beta", gp["beta"])):
        _exact(g[name], want)
    _exact(fo.rms_norm(x, gamma, 1e-6)["y"], rms_norm(x, 1e-6, params={"gamma": gamma})["y"])
    gi, gp = VJPS["rms_norm"]({"y": dy}, x=x, eps=1e-6, params={"gamma": gamma})
    g = fo.rms_norm_vjp(dy, x, gamma, 1e-6)
    _exact(g["x"], gi["x"])
    _exact(g["gamma"], gp["gamma"])
    z, t = r.uniform((7, 11), -8, 8), r.integers(0, 11, (7,))
    t[3] = -100
    _exact(fo.cross_entropy(z, t)["loss"], cross_entropy(z, t)["loss"])
    gi, _ = VJPS["cross_entropy"]({"loss": np.array(0.75)}, logits=z, targets=t)
    _exact(fo.cross_entropy_vjp(0.75, z, t)["logits"], gi["logits"])


def test_exp_extremes():
    x = np.array([-np.inf, -800.0, -745.5, 0.0, 1e-20, 709.0, 711.0, np.nan])
    got = fo.to_float(fo.exp(fo.dd(x)))
    assert got[0] == 0 and got[1] == 0 and got[3] == 1.0 and got[4] == 1.0
    assert got[6] == np.inf and np.isnan(got[7]) and np.isfinite(got[5])


def test_inexact_inputs_are_refused():
    with pytest.raises(fo.InexactInput):
        fo.int_matmul(np.full((2, 4), 2.0 ** 26), np.full((4, 2), 2.0 ** 26))


def test_stress_vectors_reach_the_loader():
    from attnspec.spec.vectors import default_spec

    spec = default_spec()
    stress = [v for v in spec.vectors if "stress" in v.flags]
    assert {v.component for v in stress} >= {"sdpa", "softmax", "masks", "layer_norm", "rms_norm",
                                              "cross_entropy", "rope", "mha"}
    for v in stress:
        assert re.fullmatch(r"[a-z0-9_]+/stress-[a-z0-9-]+-\d{3}", v.id), v.id
        assert spec.vector(v.id) is v and v.citation().startswith(f"attnspec {spec.version} · {v.id}")
        assert v.outputs and all(d in v.tolerances for d in v.dtypes)
        if v.expect == "gradient":
            assert v.cotangents and v.gradients["inputs"]
    assert any(v.expect == "gradient" for v in stress if v.component == "sdpa")
    mha = [v for v in stress if v.component == "mha"]
    assert len(mha) >= 4 and sum(v.expect == "gradient" for v in mha) >= 2
    assert all(set(v.gradients["params"]) == set(v.params) for v in mha if v.expect == "gradient")
    assert max(v.inputs["query"].shape[1] for v in mha) >= 129
    assert max(v.inputs["k"].shape[-2] for v in stress if v.function == "sdpa") >= 1025


@pytest.fixture
def stress_copy(tmp_path):
    from attnspec.spec.stress import STRESS_DIR

    shutil.copytree(STRESS_DIR, tmp_path / "stress", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return tmp_path / "stress"


def _functions():
    from attnspec.spec.vectors import default_spec

    return default_spec().functions


def test_loader_refuses_a_changed_data_file(stress_copy):
    from attnspec.spec.stress import load_vectors, read_index

    entry = read_index(stress_copy)["vectors"][0]
    path = stress_copy / "data" / entry["data"]["file"]
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(VectorFileError, match=re.escape(entry["id"])):
        load_vectors(_functions(), stress_copy)


def test_loader_refuses_a_changed_entry(stress_copy):
    import json

    from attnspec.spec.stress import INDEX, load_vectors

    doc = json.loads((stress_copy / INDEX).read_text())
    doc["vectors"][1]["attributes"]["scale"] = 0.5
    (stress_copy / INDEX).write_text(json.dumps(doc))
    with pytest.raises(VectorFileError, match="does not match its own sha256"):
        load_vectors(_functions(), stress_copy)


def test_finite_sentinel_and_finite_mask_fill_are_caught():
    """A kernel with a finite running-maximum sentinel, or a finite mask fill, fails the
    vectors built for it at float32; the same kernel with -inf passes."""
    from attnspec.spec.compare import compare
    from attnspec.spec.vectors import default_spec

    def kernel(q, k, v, mask, sentinel, fill):
        s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(np.float32(q.shape[-1]))
        s = np.where(mask, s, np.float32(fill))
        m = np.maximum(np.max(s, axis=-1, keepdims=True), np.float32(sentinel))
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(s - m)
            return (e / e.sum(-1, keepdims=True)) @ v

    spec = default_spec()
    for vid, bug in (("sdpa/stress-far-below-001", {"sentinel": -1e4, "fill": -np.inf}),
                     ("sdpa/stress-mask-above-001", {"sentinel": -np.inf, "fill": -1e4})):
        vec = spec.vector(vid)
        x = {k: a.astype(np.float32) for k, a in vec.inputs.items() if k != "mask"}
        mask = np.broadcast_to(vec.inputs["mask"], vec.outputs["weights"].shape)
        want, tol = vec.outputs["output"], vec.tolerances["float32"]
        ok = kernel(x["q"], x["k"], x["v"], mask, -np.inf, -np.inf)
        assert compare(ok, want, "float32", tol).ok, vid
        wrong = kernel(x["q"], x["k"], x["v"], mask, **bug)
        assert not compare(wrong, want, "float32", tol).ok, vid


def test_a_stress_hash_is_of_its_entry_without_the_editorial_fields():
    """Recomputed here from the raw entry, independently of the loader."""
    import hashlib
    import json

    from attnspec.spec.vectors import default_spec

    fields = ("id", "function", "dtypes", "expect", "attributes", "tolerances", "recipes", "digests", "data")
    for v in default_spec().vectors:
        if "stress" in v.flags:
            content = {k: v.raw[k] for k in fields if k in v.raw}
            text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            assert hashlib.sha256(text.encode()).hexdigest() == v.sha256, v.id
            assert v.raw["data"]["sha256"] in json.dumps(v.raw)  # the data file is pinned


def test_the_one_pass_variance_is_caught_at_float32():
    """E[x^2] - E[x]^2 in float32 fails layer_norm/stress-large-mean-001 under its derived
    tolerance; the two-pass variance in float32 passes."""
    from attnspec.spec.compare import compare
    from attnspec.spec.vectors import default_spec

    vec = default_spec().vector("layer_norm/stress-large-mean-001")
    x = vec.inputs["x"].astype(np.float32)
    gamma, beta = (vec.params[k].astype(np.float32) for k in ("gamma", "beta"))
    eps, tol = np.float32(vec.attributes["eps"]), vec.tolerances["float32"]
    mean = x.mean(-1, keepdims=True)
    two_pass = ((x - mean) ** 2).mean(-1, keepdims=True)
    one_pass = (x * x).mean(-1, keepdims=True) - mean * mean
    for var, ok in ((two_pass, True), (one_pass, False)):
        y = (x - mean) / np.sqrt(var + eps) * gamma + beta
        assert compare(y, vec.outputs["y"], "float32", tol).ok is ok


def _mha_problem(r, kv_heads=None, bias=True):
    """Cross-attention B = 2, T = 3, S = 5, H = 4, K = 3, V = 2, a fully masked row."""
    from attnspec.spec.cases.mha import mha_params

    q, k, v = r.uniform((2, 3, 6)), r.uniform((2, 5, 4)), r.uniform((2, 5, 5))
    mask = r.bools((2, 1, 3, 5))
    mask[0, 0, 1] = False
    kw = {"mask": mask, "num_heads": 4, "num_kv_heads": kv_heads,
          "params": mha_params(r, 6, 4, 5, 4, 3, 2, 5, bias=bias, kv_heads=kv_heads)}
    cot = {"output": r.uniform((2, 3, 5)), "weights": r.uniform((2, 4, 3, 5))}
    return q, k, v, kw, cot


@pytest.mark.parametrize("kv_heads, bias", [(None, True), (2, True), (1, False)])
def test_fast_mha_and_vjp_equal_mpmath(kv_heads, bias):
    """Every element of the fast mha and of every gradient equals spec/oracle/mha.py's."""
    from attnspec.spec.oracle.mha import mha

    q, k, v, kw, cot = _mha_problem(Rng(f"stress/mha/{kv_heads}/{bias}"), kv_heads, bias)
    fast, slow = fo.mha(q, k, v, **kw), mha(q, k, v, **kw)
    _exact(fast["output"], slow["output"])
    _exact(fast["weights"], slow["weights"])
    gi, gp = fo.mha_vjp(cot, q, k, v, **kw)
    wi, wp = VJPS["mha"](cot, query=q, key=k, value=v, **kw)
    assert set(gi) == set(wi) and set(gp) == set(wp) == set(kw["params"])
    for name in wi:
        _exact(gi[name], wi[name])
    for name in wp:
        if name == "b_k":  # exactly 0 (softmax cancels q . b_k); mpmath leaves a residue
            assert np.all(fo.to_float(gp[name]) == 0)
            assert np.all(np.abs(tofloat(np.asarray(wp[name]))) < 2.0 ** -130)
        else:
            _exact(gp[name], wp[name])


def test_the_mha_check_rejects_a_one_ulp_change():
    """The generator's mpmath check of mha (spec/stress/mhacheck.py) fails on one output, one
    input gradient or one parameter gradient moved by one ULP."""
    from attnspec.spec.stress.build import StressError, _f
    from attnspec.spec.stress.mhacheck import mha_check

    q, k, v, kw, cot = _mha_problem(Rng("stress/mha/check"), 2)
    x, p = {"query": q, "key": k, "value": v, "mask": kw["mask"]}, kw["params"]
    a = {"num_heads": 4, "num_kv_heads": 2}
    out = {n: _f(t) for n, t in fo.mha(q, k, v, **kw).items()}
    gi, gp = fo.mha_vjp(cot, q, k, v, **kw)
    grads = {"inputs": {n: _f(t) for n, t in gi.items()}, "params": {n: _f(t) for n, t in gp.items()}}
    assert mha_check("ok", x, p, a, cot, out, grads, np.random.default_rng(0)) > 0
    for group, name, index in (("outputs", "output", (1, 2, 0)), ("inputs", "key", (0, 4, 1)),
                               ("params", "w_v", (2, 0)), ("params", "b_o", (3,))):
        arrays = out if group == "outputs" else grads[group]
        arrays[name][index] = np.nextafter(arrays[name][index], np.inf)
        with pytest.raises(StressError, match=name):
            mha_check("bad", x, p, a, cot, out, grads, np.random.default_rng(0))
        arrays[name][index] = np.nextafter(arrays[name][index], -np.inf)


def test_finite_sentinel_and_finite_mask_fill_inside_mha_are_caught():
    """An mha whose softmax starts its row maximum at a finite sentinel, or fills masked
    scores with a finite value, fails mha/stress-far-below-001 at float32; with -inf it passes."""
    from attnspec.spec.compare import compare
    from attnspec.spec.vectors import default_spec

    vec = default_spec().vector("mha/stress-far-below-001")
    x = {n: a.astype(np.float32) for n, a in vec.inputs.items() if n != "mask"}
    p = {n: a.astype(np.float32) for n, a in vec.params.items()}
    h = vec.attributes["num_heads"]

    def heads(y):  # (B, L, H*W) -> (B, H, L, W)
        return np.swapaxes(y.reshape(y.shape[0], y.shape[1], h, -1), 1, 2)

    def mha(sentinel, fill):
        q, k, v = (heads(x[n] @ p[f"w_{n[0]}"] + p[f"b_{n[0]}"]) for n in ("query", "key", "value"))
        s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(np.float32(q.shape[-1]))  # (B, H, T, S)
        s = np.where(vec.inputs["mask"], s, np.float32(fill))
        m = np.maximum(np.max(s, axis=-1, keepdims=True), np.float32(sentinel))
        e = np.exp(s - np.where(np.isfinite(m), m, np.float32(0)))  # a fully masked row: all 0
        w = e / np.maximum(e.sum(-1, keepdims=True), np.float32(1e-30))
        o = np.swapaxes(w @ v, 1, 2).reshape(q.shape[0], q.shape[2], -1)  # (B, T, H*V)
        return o @ p["w_o"] + p["b_o"]

    want, tol = vec.outputs["output"], vec.tolerances["float32"]
    assert compare(mha(-np.inf, -np.inf), want, "float32", tol).ok
    assert not compare(mha(-1e4, -np.inf), want, "float32", tol).ok
    assert not compare(mha(-np.inf, -1e4), want, "float32", tol).ok


def test_dd_dot_rows_cuts_a_long_input_into_digits():
    """rowsum(x y) for DD x and an input y above 2**30 on its grid (the mha backward's
    dO W_o^T V^T) equals the exact rational sum, correctly rounded."""
    from fractions import Fraction

    r = np.random.default_rng(7)
    hi = r.uniform(-1, 1, (3, 65))
    x = fo.two_sum(hi, r.uniform(-1, 1, (3, 65)) * 2.0 ** -60)
    y = np.ldexp(r.integers(-2 ** 40, 2 ** 40, (3, 65)).astype(np.float64), -25)
    got = fo.to_float(fo.dd_dot_rows(x, y))
    for i in range(3):
        want = sum((Fraction(a) + Fraction(b)) * Fraction(c) for a, b, c in zip(x[0][i], x[1][i], y[i]))
        assert got[i] == float(want), i


@pytest.mark.parametrize("recipe", [
    {"op": "ints", "shape": [3], "values": [0, 1]},  # too few
    {"op": "ints", "shape": [2], "values": [0, 1.5]},  # not an integer
    {"op": "ints", "shape": [2], "values": [0, True]},  # a bool is not an index
    {"op": "ints", "shape": [1 << 25], "values": []},  # over the bound, refused before reading
], ids=["count", "float", "bool", "bound"])
def test_an_ints_recipe_that_does_not_spell_its_shape_is_refused(recipe):
    from attnspec.spec.stress.recipes import build

    with pytest.raises(VectorFileError, match="stress recipe"):
        build(recipe, "x.cu_seqlens")


def test_an_ints_recipe_is_its_values_in_row_major_order():
    from attnspec.spec.stress.recipes import build

    a = build({"op": "ints", "shape": [2, 3], "values": [5, 4, 3, 2, 1, 0]})
    assert a.dtype == np.int64 and a.tolist() == [[5, 4, 3], [2, 1, 0]]
