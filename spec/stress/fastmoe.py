"""The fast exact oracle of the router and the MoE layer (spec/oracle/moe_router.py,
spec/oracle/moe_layer.py) at kernel sizes, in the arithmetic of spec/fastoracle.py.

Exactness, as for the rest of the fast oracle (spec/STRESS.md): the inputs are dyadic
rationals with few significant bits, so the router logits x W_router and every expert's
x W_gate, x W_up are exact integer matmuls (``fo.exact_matmul``). The scores (softmax: the
fast oracle's ``softmax_rows``; sigmoid: 1 / (1 + exp(-z)) for z >= 0, e / (1 + e) with
e = exp(z) below, so no exp overflows), silu(h) = h / (1 + exp(-h)), the renormalisation
w / (sum w + eps), the routed scaling factor and the weighted sum of the experts are
double-double (about 2^-100 relative); an expert's (silu(h) u) W_down is a digit matmul
(``fo.dd_matmul``: 24-bit digits of the DD side against the input W_down, each digit matmul
exact). Every result is rounded once to float64.

Two quantities are sums that cancel, where a DD sum of terms near 1 would leave a residue
near 2^-100 far above the value's own ULP; they are computed in closed form instead, from
identities of the exact values: in the renormalised router's backward,
sum_j p_j dp_j = (g . p_I) / t - (g . p_I) S / t^2 = (g . p_I) eps / t^2 (t = S + eps), and
1 - sigmoid(z) = sigmoid(-z) (the sigmoid and silu derivatives).

The selection compares DD scores: a DD value is its pair (hi, lo) with hi = fl(hi + lo),
so (hi, lo) ordered lexicographically is the order of the values; two scores computed from
the same exact inputs by the same operations are the same pair (an exact tie stays a tie and
the lowest id wins), and two different exact scores closer than the DD error (2^-100
relative) are not built (the generator's mpmath check compares the chosen indices). A
sigmoid logit in [-760, -650] is refused: its score is subnormal in float64 and its DD
error is no longer relative.
"""

from __future__ import annotations

import numpy as np

from .. import fastoracle as fo

GLU = ("w_gate", "w_up", "w_down")


def _full(value, like):
    return fo.dd(np.full(np.shape(like), float(value)))


def _take(x, idx):
    return tuple(np.take_along_axis(a, idx, axis=-1) for a in x)


def sigmoid(z):
    """1 / (1 + exp(-z)) of a DD array, as DD."""
    hi = z[0]
    if np.any((hi > -760.0) & (hi < -650.0)):
        raise fo.InexactInput("a sigmoid logit in [-760, -650] (a subnormal score)")
    pos = hi >= 0
    zp = (np.where(pos, hi, 0.0), np.where(pos, z[1], 0.0))
    zn = (np.where(pos, 0.0, hi), np.where(pos, 0.0, z[1]))
    one = _full(1.0, hi)
    a = fo.div(one, fo.add(one, fo.exp(fo.neg(zp))))
    e = fo.exp(zn)
    b = fo.div(e, fo.add(one, e))
    return np.where(pos, a[0], b[0]), np.where(pos, a[1], b[1])


def scores(z, scoring):
    if scoring == "softmax":
        return fo.softmax_rows(z, None)[0]
    return sigmoid(z)


def _rank(s, allowed=None):
    """Per row, the column ids by value descending, ties by the lowest id (DD values)."""
    hi, lo = s
    if allowed is not None:
        hi = np.where(allowed, hi, -np.inf)
        lo = np.where(allowed, lo, 0.0)
    n, e = hi.shape
    rows = np.repeat(np.arange(n), e)
    ids = np.tile(np.arange(e), n)
    order = np.lexsort((ids, -lo.ravel(), -hi.ravel(), rows))
    return ids[order].reshape(n, e)


def select(s, top_k, n_group, topk_group):
    """The oracle's ``select`` on every row of DD selection scores (N, E): (N, top_k) ids."""
    n, e = s[0].shape
    allowed = None
    if n_group > 1:
        size = e // n_group
        g_hi, g_lo = (a.reshape(n * n_group, size) for a in s)
        top2 = _rank((g_hi, g_lo))[:, :2]
        pair = _take((g_hi, g_lo), top2)
        g = fo.add((pair[0][:, 0], pair[1][:, 0]), (pair[0][:, 1], pair[1][:, 1]))
        best = _rank((g[0].reshape(n, n_group), g[1].reshape(n, n_group)))[:, :topk_group]
        keep = np.zeros((n, n_group), dtype=bool)
        np.put_along_axis(keep, best, True, axis=-1)
        allowed = np.repeat(keep, size, axis=-1)
    return _rank(s, allowed)[:, :top_k]


def route(z, bias, top_k, scoring="softmax", n_group=1, topk_group=1, **_):
    """(p DD (N, E), idx (N, k)) for DD logits z."""
    p = scores(z, scoring)
    s = p if bias is None else fo.add(p, fo.dd(np.broadcast_to(np.asarray(bias, np.float64), p[0].shape)))
    return p, select(s, top_k, n_group, topk_group)


def router(z, bias=None, *, top_k, scoring="softmax", renormalize=False, eps=1e-20, n_group=1,
           topk_group=1, routed_scaling_factor=1.0):
    """{"weights": DD (N, k), "indices": (N, k)} for DD logits z."""
    p, idx = route(z, bias, top_k, scoring, n_group, topk_group)
    w = _take(p, idx)
    if renormalize:
        t = fo.add(fo.tree_sum(w, -1), _full(eps, w[0][:, 0]))
        w = fo.div(w, (t[0][:, None], t[1][:, None]))
    w = fo.mul(w, _full(routed_scaling_factor, w[0]))
    return {"weights": w, "indices": idx}


def router_vjp(dw, z, bias=None, *, top_k, scoring="softmax", renormalize=False, eps=1e-20,
               n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """dz (DD, (N, E)) for a DD cotangent dw (N, k) of the weights (the oracle's
    moe_router_vjp: through the kept scores only)."""
    p, idx = route(z, bias, top_k, scoring, n_group, topk_group)
    g = fo.mul(dw, _full(routed_scaling_factor, dw[0]))
    delta = None
    if renormalize:
        kept = _take(p, idx)
        t = fo.add(fo.tree_sum(kept, -1), _full(eps, kept[0][:, 0]))
        t2 = fo.mul(t, t)
        gk = fo.tree_sum(fo.mul(g, kept), -1)
        inner = fo.div(gk, t2)
        g = fo.sub(fo.div(g, (t[0][:, None], t[1][:, None])), (inner[0][:, None], inner[1][:, None]))
        # sum_j p_j dp_j = (g.k) / t - inner S = (g.k) eps / t^2 exactly: computed so, not as
        # a DD sum of terms near 1 that cancel down to about eps (its residue near 2^-100
        # would be far above the value's own ULP)
        delta = fo.div(fo.mul(gk, _full(eps, gk[0])), t2)
    dp = [np.zeros_like(p[0]), np.zeros_like(p[0])]
    for a, b in zip(dp, g):
        np.put_along_axis(a, idx, b, axis=-1)
    dp = tuple(dp)
    if scoring == "softmax":
        if delta is None:
            delta = fo.tree_sum(fo.mul(p, dp), -1)
        return fo.mul(p, fo.sub(dp, (delta[0][:, None], delta[1][:, None])))
    return fo.mul(fo.mul(dp, p), sigmoid(fo.neg(z)))  # 1 - p as sigmoid(-z): no cancellation


# -- the MoE layer ------------------------------------------------------------------------

def _exact(x, w):
    y = fo.exact_matmul(x, w)
    if np.any(y[1] != 0):
        raise fo.InexactInput("x W is not exact in float64")
    return fo.dd(y[0])


def silu(h):
    return fo.div(h, fo.add(_full(1.0, h[0]), fo.exp(fo.neg(h))))


def glu_parts(x, wg, wu):
    """(h, u, silu(h) u) of one SwiGLU expert on the rows x."""
    h, u = _exact(x, wg), _exact(x, wu)
    return h, u, fo.mul(silu(h), u)


def glu(x, wg, wu, wd):
    return fo.dd_matmul(glu_parts(x, wg, wu)[2], np.asarray(wd, np.float64))


def _router_kw(a):
    return {k: a[k] for k in ("top_k", "scoring", "renormalize", "eps", "n_group", "topk_group",
                              "routed_scaling_factor")}


def _expert_rows(idx, e):
    """(tokens, slots) where expert e is chosen."""
    return np.nonzero(idx == e)


def moe(x, params, attrs):
    """{"y": DD (N, D), "router_logits": DD (N, E)}."""
    x = np.asarray(x, np.float64)
    z = _exact(x, params["router.w"])
    r = router(z, params.get("router.correction_bias"), **_router_kw(attrs))
    w, idx = r["weights"], r["indices"]
    y = [np.zeros(x.shape), np.zeros(x.shape)]
    for e in range(z[0].shape[1]):
        n, j = _expert_rows(idx, e)
        if n.size == 0:
            continue
        out = glu(x[n], *(params[f"experts.{g}"][e] for g in GLU))
        term = fo.mul(out, (w[0][n, j][:, None], w[1][n, j][:, None]))
        y[0][n], y[1][n] = fo.add((y[0][n], y[1][n]), term)
    y = tuple(y)
    if "shared.w_gate" in params:
        s = glu(x, *(params[f"shared.{g}"] for g in GLU))
        if "shared_gate.w" in params:
            s = fo.mul(s, sigmoid(_exact(x, params["shared_gate.w"])))
        y = fo.add(y, s)
    return {"y": y, "router_logits": z}


def moe_vjp(cot, x, params, attrs):
    """The oracle's moe_vjp, routed experts (no shared expert): ({"x": DD}, {name: DD})."""
    if "shared.w_gate" in params:
        raise fo.InexactInput("moe_vjp: the stress gradient covers routed experts only")
    x = np.asarray(x, np.float64)
    dy = np.asarray(cot["y"], np.float64)
    z = _exact(x, params["router.w"])
    kw = _router_kw(attrs)
    bias = params.get("router.correction_bias")
    r = router(z, bias, **kw)
    w, idx = r["weights"], r["indices"]
    dx = fo.dd(np.zeros(x.shape))
    dw = [np.zeros(w[0].shape), np.zeros(w[0].shape)]
    grads = {f"experts.{g}": [np.zeros(np.shape(params[f"experts.{g}"])) for _ in range(2)] for g in GLU}
    for e in range(z[0].shape[1]):
        n, j = _expert_rows(idx, e)
        if n.size == 0:
            continue
        wg, wu, wd = (np.asarray(params[f"experts.{g}"][e], np.float64) for g in GLU)
        xe = x[n]
        h, u, a = glu_parts(xe, wg, wu)
        out = fo.dd_matmul(a, wd)                                   # (n, D)
        dw[0][n, j], dw[1][n, j] = fo.dd_dot_rows(out, dy[n])       # <dy_n, FFN_e(x_n)>
        we = (w[0][n, j][:, None], w[1][n, j][:, None])
        dye = fo.mul(we, fo.dd(dy[n]))                              # (n, D): w dy
        # dW_down = a^T dy_e; dh = dy_e W_down^T (DD times inputs: digit matmuls)
        g_down = fo.dd_matmul(_t(fo.mul(a, we)), dy[n])             # (F, D): (w a)^T dy
        dh = fo.dd_matmul(dye, wd.T)                                # (n, F)
        sg = sigmoid(h)
        act = silu(h)
        # silu'(h) = s (1 + h (1 - s)), 1 - s as sigmoid(-h) (no cancellation at large h)
        dact = fo.mul(sg, fo.add(_full(1.0, sg[0]), fo.mul(h, sigmoid(fo.neg(h)))))
        dg = fo.mul(fo.mul(dh, u), dact)
        du = fo.mul(dh, act)
        dxe = fo.add(fo.dd_matmul(dg, wg.T), fo.dd_matmul(du, wu.T))
        dx[0][n], dx[1][n] = fo.add((dx[0][n], dx[1][n]), dxe)
        for name, val in (("w_down", g_down), ("w_gate", _xt_dd(xe, dg)), ("w_up", _xt_dd(xe, du))):
            grads[f"experts.{name}"][0][e], grads[f"experts.{name}"][1][e] = val
    dz = router_vjp(tuple(dw), z, bias, **kw)
    if "router_logits" in cot:
        dz = fo.add(dz, fo.dd(np.asarray(cot["router_logits"], np.float64)))
    wr = np.asarray(params["router.w"], np.float64)
    dx = fo.add(dx, fo.dd_matmul(dz, wr.T))
    out = {k: tuple(v) for k, v in grads.items()}
    out["router.w"] = _xt_dd(x, dz)
    if bias is not None:
        out["router.correction_bias"] = fo.dd(np.zeros(np.shape(bias)))
    return {"x": dx}, out


def _t(x):
    return tuple(np.swapaxes(a, -1, -2) for a in x)


def _xt_dd(x, d):
    """x^T d for an input x (n, D) and DD d (n, F): (D, F), digits of d per column."""
    return _t(fo.dd_matmul(_t(d), np.asarray(x, np.float64)))
