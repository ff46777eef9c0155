"""The stress vectors of the router, the MoE layer and MLA (issue 26): the fast oracle of
spec/stress/fastmoe.py agrees with mpmath bit for bit on small problems, the generator's
check rejects a one-ULP change, and each stress vector fails a planted bug at float32 that
the component's small vectors let through."""

from __future__ import annotations

import numpy as np
import pytest
from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.runner import run_vector
from attnspec.spec import fastoracle as fo
from attnspec.spec.cases._build import Rng
from attnspec.spec.vectors import default_spec

from .mutants import composite_mutant, mutant
from .test_stress import _exact, _oracle_precision  # noqa: F401 (the autouse fixture)

ROUTER = {"scoring": "softmax", "renormalize": False, "eps": 1e-20, "n_group": 1, "topk_group": 1,
          "routed_scaling_factor": 1.0}


def _logits(r, n, e, lo=-8.0, hi=8.0, step=2.0 ** -4):
    return np.round(r.uniform((n, e), lo, hi) / step) * step


@pytest.mark.parametrize("kw", [
    {"top_k": 2, "renormalize": True},
    {"top_k": 3},
    {"top_k": 4, "scoring": "sigmoid", "renormalize": True, "n_group": 4, "topk_group": 2,
     "routed_scaling_factor": 2.5, "bias": True},
    {"top_k": 2, "scoring": "sigmoid", "renormalize": True, "saturated": True},
    {"top_k": 2, "scoring": "sigmoid", "renormalize": True, "tiny": True},
    {"top_k": 3, "large": True},
])
def test_fast_router_and_vjp_equal_mpmath(kw):
    from attnspec.spec.oracle.moe_router import moe_router, moe_router_vjp
    from attnspec.spec.stress import fastmoe as fm

    kw = dict(kw)
    r = Rng(f"stress/moe_router/{sorted(kw)}")
    z = _logits(r, 6, 16)
    z[0] = 1.0  # a row of ties
    z[1, 3:7] = 7.0
    saturated = kw.pop("saturated", False)
    if saturated:
        z = np.where(z > 0, z + 40.0, z - 40.0) * 2  # beyond float64's saturation and exp's range
    if kw.pop("tiny", False):
        z = z / 4 - 46.0  # scores near eps
    if kw.pop("large", False):
        z = z + 10240.0
    bias = np.round(r.uniform((16,), -1, 1) * 16) / 16 if kw.pop("bias", False) else None
    a = {**ROUTER, **kw}
    fast = fm.router(fo.dd(z), bias, **a)
    slow = moe_router(z, bias, **kw)
    _exact(fast["weights"], slow["weights"])
    assert np.array_equal(fast["indices"], slow["indices"])
    if saturated:  # the mpmath oracle's p (1 - p) keeps 50 - 42 digits of 1 - p near z = 96
        return
    dw = np.round(r.uniform((6, a["top_k"])) * 64) / 64
    got = fm.router_vjp(fo.dd(dw), fo.dd(z), bias, **a)
    want, _ = moe_router_vjp({"weights": dw}, z, bias, **kw)
    _exact(got, want["logits"])


@pytest.mark.parametrize("shared", [False, True])
def test_fast_moe_and_vjp_equal_mpmath(shared):
    """A starved expert (its logit 20 below), large gates on one feature, a shared expert."""
    from attnspec.spec.oracle import moe_layer
    from attnspec.spec.stress import fastmoe as fm

    r = Rng(f"stress/moe/{shared}")
    n, d, f, e = 7, 6, 5, 4
    x = np.round(r.uniform((n, d), -1, 1) * 32) / 32
    x[:, -1] = 1.0
    p = {"router.w": np.round(r.uniform((d, e), -2, 2) * 64) / 64,
         "experts.w_gate": np.round(r.uniform((e, d, f), -1, 1) * 128) / 128,
         "experts.w_up": np.round(r.uniform((e, d, f), -1, 1) * 128) / 128,
         "experts.w_down": np.round(r.uniform((e, f, d), -1, 1) * 128) / 128}
    p["router.w"][-1, 3] = -20.0
    p["experts.w_gate"][:, -1, :2] = [96.0, -96.0]
    a = {**ROUTER, "top_k": 2, "renormalize": True}
    if shared:
        p.update({"shared.w_gate": p["experts.w_gate"][0], "shared.w_up": p["experts.w_up"][1],
                  "shared.w_down": p["experts.w_down"][2], "shared_gate.w": p["router.w"][:, :1]})
    fast, slow = fm.moe(x, p, a), moe_layer.moe(x, params=p, **a)
    _exact(fast["y"], slow["y"])
    _exact(fast["router_logits"], slow["router_logits"])
    if shared:
        return
    cot = {"y": np.round(r.uniform((n, d)) * 64) / 64, "router_logits": np.round(r.uniform((n, e)) * 64) / 64}
    gi, gp = fm.moe_vjp(cot, x, p, a)
    wi, wp = moe_layer.moe_vjp(cot, x, params=p, **a)
    _exact(gi["x"], wi["x"])
    assert set(gp) == set(wp)
    for k in wp:
        _exact(gp[k], wp[k])
    assert not np.any(fo.to_float(gp["experts.w_down"])[3])  # the starved expert


def test_the_moe_check_rejects_a_one_ulp_change():
    """The generator's mpmath check (spec/stress/moecheck.py) fails on a weight or an output
    moved by one ULP and on a changed expert index."""
    from attnspec.spec.stress.build import StressError
    from attnspec.spec.stress.moecheck import moe_check, moe_expected

    r = Rng("stress/moe/check")
    z = _logits(r, 9, 8)
    a = {**ROUTER, "top_k": 2, "renormalize": True}
    out, _ = moe_expected("moe_router", {"logits": z}, {}, a, None)
    rng = np.random.default_rng(0)
    assert moe_check("t", "moe_router", {"logits": z}, {}, a, None, out, None, rng) > 0
    for name, change in (("weights", lambda w: np.nextafter(w, np.inf)),
                         ("indices", lambda i: i[:, ::-1])):
        bad = {**out, name: change(out[name].copy())}
        with pytest.raises(StressError):
            moe_check("t", "moe_router", {"logits": z}, {}, a, None, bad, None,
                      np.random.default_rng(0))
    x = np.round(r.uniform((9, 4), -1, 1) * 32) / 32
    p = {"router.w": np.round(r.uniform((4, 3), -2, 2) * 64) / 64,
         "experts.w_gate": np.round(r.uniform((3, 4, 5)) * 128) / 128,
         "experts.w_up": np.round(r.uniform((3, 4, 5)) * 128) / 128,
         "experts.w_down": np.round(r.uniform((3, 5, 4)) * 128) / 128}
    out, _ = moe_expected("moe", {"x": x}, p, a, None)
    bad = {**out, "y": np.nextafter(out["y"], np.inf)}
    with pytest.raises(StressError):
        moe_check("t", "moe", {"x": x}, p, a, None, bad, None, np.random.default_rng(0))


# -- planted bugs: each stress vector fails one at float32 that the small vectors miss -----

def _fails(backend, vid, dtype="float32") -> bool:
    spec = default_spec()
    res = run_vector(backend, spec, spec.vector(vid), dtype, "cpu")
    assert res.status in ("pass", "fail"), res.messages  # a wrong value, not a crash
    return res.status == "fail"


def _small_pass(backend, component, function) -> bool:
    """Every small (non-stress) value and gradient vector of ``function`` passes at float32."""
    spec = default_spec()
    return all(run_vector(backend, spec, v, "float32", "cpu").status == "pass"
               for v in spec.vectors if v.component == component and v.function == function
               and v.expect in ("value", "gradient") and "stress" not in v.flags
               and not v.deprecated)


def _router(**bug):
    """The NumPy router with one part replaced: ``scores(x, scoring)``, ``select(s, ...)``,
    ``tile`` (rows past it left 0) or ``no_eps``."""
    import attnspec.backends.numpy.moe as M

    def router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
        x = np.asarray(logits)
        with np.errstate(all="ignore"):
            p = bug.get("scores", M._scores)(x, scoring)
            s = p if correction_bias is None else p + np.asarray(correction_bias, x.dtype)
            idx = bug.get("select", M._select)(s, top_k, n_group, topk_group, group_score)
            w = np.take_along_axis(p, idx, axis=-1)
            if renormalize:
                w = w / (w.sum(-1, keepdims=True) + x.dtype.type(0.0 if bug.get("no_eps") else eps))
        w = w * x.dtype.type(routed_scaling_factor)
        if "tile" in bug:
            w[bug["tile"]:], idx[bug["tile"]:] = 0, 0
        return w, idx.astype(np.int64)

    return router


def _naive_softmax(x, scoring):  # no row maximum subtracted
    if scoring == "softmax":
        e = np.exp(x)
        return e / e.sum(-1, keepdims=True)
    return 1 / (1 + np.exp(-x))


def _naive_sigmoid(x, scoring):  # exp(z) / (1 + exp(z)): inf / inf past 88.7 in float32
    if scoring == "softmax":
        return _naive_softmax(x - x.max(-1, keepdims=True), scoring)
    e = np.exp(x)
    return e / (1 + e)


def _fill_zero_select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    """transformers' DeepseekV3 form: experts of the dropped groups set to 0 (not -inf)."""
    from attnspec.backends._routing import ranked

    n, e = s.shape
    if n_group > 1:
        grouped = np.sort(s.reshape(n, n_group, e // n_group), axis=-1)
        g = grouped[..., -1] + (grouped[..., -2] if group_score == "sum_top2" else 0)
        chosen = ranked(g)[:, :topk_group]
        allowed = np.zeros((n, n_group), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        s = np.where(np.repeat(allowed, e // n_group, axis=-1), s, 0.0)
    return ranked(s)[:, :top_k]


ROUTER_BUGS = {
    "moe_router/stress-softmax-64-001": {"tile": 2048},
    "moe_router/stress-large-logits-001": {"scores": _naive_softmax},
    "moe_router/stress-sigmoid-saturation-001": {"scores": _naive_sigmoid},
    "moe_router/stress-eps-001": {"no_eps": True},
    "moe_router/stress-deepseek-v3-001": {"select": _fill_zero_select},
}


@pytest.mark.parametrize("vid", sorted(ROUTER_BUGS))
def test_a_router_bug_only_the_stress_vector_catches(vid):
    bugged = mutant(moe_router=_router(**ROUTER_BUGS[vid]))
    assert not _fails(mutant(moe_router=_router()), vid)  # the sketch itself is right
    assert _fails(bugged, vid)
    assert _small_pass(bugged, "moe_router", "moe_router")


@pytest.mark.parametrize("vid,bug", [("moe_router/stress-grad-001", "tile"),
                                     ("moe_router/stress-grad-002", "fill-zero")])
def test_a_router_gradient_bug_only_the_stress_vector_catches(vid, bug, monkeypatch):
    import attnspec.backends.numpy.moe as M

    if bug == "fill-zero":
        monkeypatch.setattr(M, "_select", _fill_zero_select)
    else:
        real = M.moe_router_vjp

        def tiled(*args, **kwargs):  # a backward launched for 1024 tokens
            g, gp = real(*args, **kwargs)
            g = dict(g)
            g["logits"] = g["logits"].copy()
            g["logits"][1024:] = 0
            return g, gp

        monkeypatch.setattr(M, "moe_router_vjp", tiled)
    backend = NumpyBackend()
    assert _fails(backend, vid)
    assert _small_pass(backend, "moe_router", "moe_router")


def _moe_kernels(**kernels):
    from attnspec.backends.composite.moe import MoE

    return composite_mutant(MoE, kernels=kernels)


def _capacity(cap):
    """The MoE layer with a buffer of ``cap`` rows per expert: an expert keeps its first
    ``cap`` tokens, the rest of its assignments are dropped (a kernel sized for 2048 tokens
    per expert, or a capacity factor)."""
    from attnspec.backends.numpy import feedforward as F
    from attnspec.backends.numpy import moe as B

    def moe(x, *, top_k, params, **router):
        y, z = B.moe(x, top_k=top_k, params=params, **router)
        w, idx = B.moe_router(z, params.get("router.correction_bias"), top_k=top_k, **router)
        out = y.copy()  # minus every dropped assignment (the shared expert stays)
        for j in range(top_k):
            for ex in range(z.shape[1]):
                rows = np.nonzero(idx[:, j] == ex)[0]
                seen = int(np.sum(idx[:, :j] == ex))
                rows = rows[max(0, cap - seen):]
                if rows.size:
                    ffn = F.gated_feedforward(x[rows], params={g: params[f"experts.{g}"][ex]
                                                               for g in ("w_gate", "w_up", "w_down")})
                    out[rows] -= w[rows, j:j + 1] * ffn
        return out, z

    return moe


def _tiled_moe(x, *, params, **kw):
    from attnspec.backends.numpy import moe as B

    y, z = B.moe(x, params=params, **kw)
    y = y.copy()
    y[2048:] = 0
    return y, z


def _naive_silu(h):
    with np.errstate(all="ignore"):
        e = np.exp(h)
        return h * e / (1 + e)


def _no_renorm_when_all(logits, correction_bias=None, *, top_k, renormalize=False, **kw):
    """top_k = E taken as 'every expert: the scores already sum to 1', renormalisation skipped."""
    from attnspec.backends.numpy import moe as B

    e = np.shape(logits)[-1]
    return B.moe_router(logits, correction_bias, top_k=top_k,
                        renormalize=renormalize and top_k < e, **kw)


def test_moe_bugs_only_the_stress_vectors_catch(monkeypatch):
    import attnspec.backends.numpy.feedforward as F

    for vid, backend in (("moe/stress-tokens-001", mutant(moe=_tiled_moe)),
                         ("moe/stress-tokens-001", mutant(moe=_capacity(2048))),
                         ("moe/stress-top-all-001", _moe_kernels(moe_router=_no_renorm_when_all))):
        assert _fails(backend, vid), vid
        assert _small_pass(backend, "moe", "moe"), vid
    assert not _fails(mutant(moe=_capacity(2049)), "moe/stress-tokens-001")  # the sketch is right
    monkeypatch.setitem(F.GATES, "silu", _naive_silu)
    assert _fails(NumpyBackend(), "moe/stress-top-all-001")
    assert _small_pass(NumpyBackend(), "moe", "moe")


def test_an_idle_experts_unwritten_gradient_is_caught(monkeypatch):
    """A grouped backward that skips an expert with no token and leaves its weight gradients
    unwritten (NaN here): moe/stress-grad-001's expert 7 receives none (small vectors with an
    idle expert catch it too)."""
    import attnspec.backends.numpy.moe as M

    real = M.moe_vjp

    def skipping(cotangents, x, *, params, **kw):
        gi, gp = real(cotangents, x, params=params, **kw)
        z = np.asarray(x) @ np.asarray(params["router.w"])
        _, idx = M.moe_router(z, params.get("router.correction_bias"),
                              **{k: kw[k] for k in ROUTER if k in kw}, top_k=kw["top_k"])
        idle = np.setdiff1d(np.arange(z.shape[1]), idx)
        gp = {k: v.copy() for k, v in gp.items()}
        for k in ("experts.w_gate", "experts.w_up", "experts.w_down"):
            gp[k][idle] = np.nan
        return gi, gp

    monkeypatch.setattr(M, "moe_vjp", skipping)
    assert _fails(NumpyBackend(), "moe/stress-grad-001")


def test_a_backward_tiled_short_of_the_tokens_is_caught(monkeypatch):
    """A backward launched for 512 tokens (dx of token 512 left 0) fails moe/stress-grad-001
    (513 tokens) and passes every small vector."""
    import attnspec.backends.numpy.moe as M

    real = M.moe_vjp

    def tiled(*args, **kwargs):
        gi, gp = real(*args, **kwargs)
        dx = gi["x"].copy()
        dx[512:] = 0
        return {**gi, "x": dx}, gp

    monkeypatch.setattr(M, "moe_vjp", tiled)
    assert _fails(NumpyBackend(), "moe/stress-grad-001")
    assert _small_pass(NumpyBackend(), "moe", "moe")


def test_a_finite_sentinel_inside_mla_is_caught():
    """MLA's attention with its row maximum started at -1e4 fails mla/stress-tile-001 at
    float32 and passes every small mla vector."""
    from attnspec.backends.composite.mla import Mla

    def sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None,
             sentinel=-1e4):
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        c = q.dtype.type(1 / np.sqrt(q.shape[-1]) if scale is None else scale)
        s = (q @ np.swapaxes(k, -1, -2)) * c
        keep = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask, s.shape)
        s = np.where(keep, s, -np.inf)
        m = np.maximum(s.max(-1, keepdims=True), q.dtype.type(sentinel))
        with np.errstate(all="ignore"):
            e = np.where(keep, np.exp(s - m), 0)
            t = e.sum(-1, keepdims=True)
            w = e / np.where(t > 0, t, 1)  # a row with no key: zero weights
        return w @ v, w

    right = composite_mutant(Mla, kernels={"sdpa": lambda *a, **k: sdpa(*a, **k, sentinel=-np.inf)})
    wrong = composite_mutant(Mla, kernels={"sdpa": sdpa})
    assert not _fails(right, "mla/stress-tile-001")
    assert _small_pass(right, "mla", "mla")
    assert _fails(wrong, "mla/stress-tile-001")
    assert _small_pass(wrong, "mla", "mla")


def test_the_new_stress_vectors_reach_the_loader():
    stress = {v.id: v for v in default_spec().vectors if "stress" in v.flags}
    for component in ("moe_router", "moe", "mla"):
        mine = [v for v in stress.values() if v.component == component]
        assert any(v.expect == "gradient" for v in mine), component
        assert all(v.description and len(v.flags) > 2 for v in mine), component
    assert stress["moe_router/stress-deepseek-v3-001"].inputs["logits"].shape == (2049, 256)
    assert stress["moe_router/stress-softmax-64-001"].outputs["indices"].dtype == np.int64
    assert max(v.inputs["x"].shape[0] for v in stress.values() if v.component == "moe") >= 2049
