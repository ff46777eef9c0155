"""The mpmath check of the mha stress vectors, on a sample (the whole mpmath oracle would take
minutes at these sizes).

The projections Q, K, V of inputs on short power-of-two grids are integers times a power of
two: they are computed here exactly in int64 (no float rounding, bounds checked), as mpmath
would. Then, in mpmath:

- sampled query rows through spec/oracle's own pieces: ``sdpa`` per head on the row, the
  output projection by oracle.mha's ``project``; with gradients, dquery of the row from the
  oracle's ``sdpa_vjp`` per head times W_q^T;
- with gradients, every weight W and dS = W * (dW' - rowsum(dW' W)) * c of every head in
  mpmath from the exact integer scores, then dkey and dvalue on sampled keys, and sampled
  columns of every parameter gradient (a row of dW_o), each from its full sum over batch and
  positions, and db_o whole.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..oracle.core import mpa
from .build import StressError, _rows, _same

INT_LIMIT = 2 ** 62


class _Grid:
    """An array on a power-of-two grid as int64 m with a = m * 2**-e."""

    def __init__(self, a):
        a = np.asarray(a, dtype=np.float64)
        for e in range(0, 64):
            m = np.ldexp(a, e)
            if np.all(m == np.rint(m)) and np.max(np.abs(m), initial=0) < 2 ** 52:
                self.m, self.e = m.astype(np.int64), e
                return
        raise StressError("mha check: an input on no power-of-two grid below 2**52")


def _int_matmul(a: _Grid, b: _Grid) -> _Grid:
    bound = int(np.max(np.abs(a.m), initial=0)) * int(np.max(np.abs(b.m), initial=0)) * a.m.shape[-1]
    if bound >= INT_LIMIT:
        raise StressError(f"mha check: an int64 matmul of {a.m.shape} by {b.m.shape} could overflow")
    g = _Grid.__new__(_Grid)
    g.m, g.e = np.matmul(a.m, b.m), a.e + b.e
    return g


def _plus(a: _Grid, b) -> np.ndarray:
    """a + b (b a float array or None) exactly, as float64 (checked)."""
    if b is None:
        m, e = a.m, a.e
    else:
        gb = _Grid(b)
        e = max(a.e, gb.e)
        tops = (int(np.max(np.abs(g.m), initial=0)) << (e - g.e) for g in (a, gb))
        if max(tops) >= 2 ** 52:  # each term, so that the sum stays below 2**53 in int64
            raise StressError("mha check: a projection plus its bias is not exact in float64")
        m = a.m * 2 ** (e - a.e) + gb.m * 2 ** (e - gb.e)
    if np.max(np.abs(m), initial=0) >= 2 ** 53:
        raise StressError("mha check: a projection is not exact in float64")
    return np.ldexp(m.astype(np.float64), -e)


def _linear(x, w, b=None) -> np.ndarray:
    return _plus(_int_matmul(_Grid(x), _Grid(w)), b)


def _mp(x) -> np.ndarray:
    return mpa(np.asarray(x, dtype=np.float64))


class _Heads:
    """The exact projections and the head layout of one vector."""

    def __init__(self, x, p, a):
        self.h = int(a["num_heads"])
        self.h_kv = self.h if a["num_kv_heads"] is None else int(a["num_kv_heads"])
        self.Q = _linear(x["query"], p["w_q"], p.get("b_q"))  # (B, T, H*K)
        self.K = _linear(x["key"], p["w_k"], p.get("b_k"))  # (B, S, H_kv*K)
        self.V = _linear(x["value"], p["w_v"], p.get("b_v"))  # (B, S, H_kv*V)
        self.k = self.Q.shape[-1] // self.h
        self.v = self.V.shape[-1] // self.h_kv
        b, t, s = self.Q.shape[0], self.Q.shape[1], self.K.shape[1]
        m = x.get("mask")
        self.keep = np.broadcast_to(True if m is None else np.asarray(m, bool), (b, self.h, t, s))

    def g(self, h):
        return h // (self.h // self.h_kv)

    def q(self, h):
        return slice(h * self.k, (h + 1) * self.k)

    def kcols(self, h):
        return slice(self.g(h) * self.k, (self.g(h) + 1) * self.k)

    def vcols(self, h):
        return slice(self.g(h) * self.v, (self.g(h) + 1) * self.v)


def mha_check(vid, x, p, a, cot, outputs, grads, rng) -> int:
    hd = _Heads(x, p, a)
    b_count, t_count = hd.Q.shape[:2]
    n = 0
    dconcat = None
    if grads:
        dconcat = _linear(cot["output"], p["w_o"].T)  # (B, T, H*V), exact
    mp_p = {k: _mp(p[k]) for k in ("w_o", "b_o") if k in p}
    if grads:
        mp_p["w_q^T"] = _mp(p["w_q"].T)
    for b in range(b_count):
        for t in sorted({0} | set(_rows(rng, t_count, 1))):
            n += _check_row(vid, hd, mp_p, cot, outputs, grads, dconcat, b, t)
    if grads:
        n += _check_sums(vid, hd, x, p, cot, grads, dconcat, rng)
    return n


def _check_row(vid, hd, mp_p, cot, outputs, grads, dconcat, b, t) -> int:
    from ..oracle import vjps
    from ..oracle.mha import project
    from ..oracle.sdpa import sdpa

    n, concat, dq = 0, [], []
    for h in range(hd.h):
        sub = {"q": hd.Q[b:b + 1, t:t + 1, hd.q(h)], "k": hd.K[b:b + 1, :, hd.kcols(h)],
               "v": hd.V[b:b + 1, :, hd.vcols(h)], "mask": hd.keep[b:b + 1, h, t:t + 1]}
        r = sdpa(**sub)
        n += _same(outputs["weights"][b, h, t:t + 1], r["weights"][0], f"{vid} weights[{b},{h},{t}]")
        concat.append(r["output"][0])
        if grads:
            c = {"output": dconcat[b:b + 1, t:t + 1, h * hd.v:(h + 1) * hd.v]}
            if "weights" in cot:
                c["weights"] = cot["weights"][b:b + 1, h, t:t + 1]
            gi, _ = vjps()["sdpa"](c, **sub)
            dq.append(mpa(gi["q"])[0])
    out = project(np.concatenate(concat, axis=-1), mp_p, "w_o", "b_o")
    n += _same(outputs["output"][b, t:t + 1], out, f"{vid} output[{b},{t}]")
    if grads:
        from ..oracle.core import matmul

        want = matmul(np.concatenate(dq, axis=-1), mp_p["w_q^T"])
        n += _same(grads["inputs"]["query"][b, t:t + 1], want, f"{vid} dquery[{b},{t}]")
    return n


def _head_terms(hd, cot, dconcat, b, h):
    """W and dS (T, S) of head h of batch b in mpmath, from the exact integer scores."""
    raw = _int_matmul(_Grid(hd.Q[b, :, hd.q(h)]), _Grid(hd.K[b, :, hd.kcols(h)].T))
    c = 1 / mpmath.sqrt(hd.k)
    dp = _int_matmul(_Grid(dconcat[b, :, h * hd.v:(h + 1) * hd.v]), _Grid(hd.V[b, :, hd.vcols(h)].T))
    cw = cot["weights"][b, h] if "weights" in cot else None
    t_count, s_count = raw.m.shape
    w = np.full((t_count, s_count), mpmath.mpf(0), dtype=object)
    ds = np.full((t_count, s_count), mpmath.mpf(0), dtype=object)
    for t in range(t_count):
        kept = [s for s in range(s_count) if hd.keep[b, h, t, s]]
        if not kept:
            continue
        sc = {s: mpmath.ldexp(int(raw.m[t, s]), -raw.e) * c for s in kept}
        top = max(sc.values())
        e = {s: mpmath.exp(sc[s] - top) for s in kept}
        total = mpmath.fsum(e.values())
        g = {s: mpmath.ldexp(int(dp.m[t, s]), -dp.e) + (0 if cw is None else mpmath.mpf(float(cw[t, s])))
             for s in kept}
        for s in kept:
            w[t, s] = e[s] / total
        delta = mpmath.fsum(w[t, s] * g[s] for s in kept)
        for s in kept:
            ds[t, s] = w[t, s] * (g[s] - delta) * c
    return w, ds


def _check_sums(vid, hd, x, p, cot, grads, dconcat, rng) -> int:
    """dkey, dvalue on sampled keys and sampled columns of every parameter gradient."""
    b_count = hd.Q.shape[0]
    terms = {(b, h): _head_terms(hd, cot, dconcat, b, h) for b in range(b_count) for h in range(hd.h)}
    fsum = mpmath.fsum

    def d_k(b, s, j):  # dK[b, s, j] (kv column j), summed over the group's heads
        g, i = divmod(j, hd.k)
        return fsum(terms[b, h][1][t, s] * hd.Q[b, t, h * hd.k + i] for h in range(hd.h)
                    if hd.g(h) == g for t in range(hd.Q.shape[1]))

    def d_v(b, s, j):
        g, i = divmod(j, hd.v)
        return fsum(terms[b, h][0][t, s] * dconcat[b, t, h * hd.v + i] for h in range(hd.h)
                    if hd.g(h) == g for t in range(hd.Q.shape[1]))

    def d_q(b, t, j):
        h, i = divmod(j, hd.k)
        ks = hd.K[b, :, hd.kcols(h)]
        return fsum(terms[b, h][1][t, s] * ks[s, i] for s in range(ks.shape[0]))

    def concat(b, t, j):
        h, i = divmod(j, hd.v)
        vs = hd.V[b, :, hd.vcols(h)]
        return fsum(terms[b, h][0][t, s] * vs[s, i] for s in range(vs.shape[0]))

    n = 0
    for b in range(b_count):
        for s in _rows(rng, hd.K.shape[1], 1):
            for name, fn, w in (("key", d_k, "w_k"), ("value", d_v, "w_v")):
                row = [fn(b, s, j) for j in range(p[w].shape[1])]
                want = [fsum(row[j] * p[w][i, j] for j in range(len(row))) for i in range(p[w].shape[0])]
                n += _same(grads["inputs"][name][b, s], np.array(want, dtype=object),
                           f"{vid} d{name}[{b},{s}]")
    for w, bias, fn, src, length in (("w_q", "b_q", d_q, "query", hd.Q.shape[1]),
                                     ("w_k", "b_k", d_k, "key", hd.K.shape[1]),
                                     ("w_v", "b_v", d_v, "value", hd.K.shape[1])):
        for j in _rows(rng, p[w].shape[1], 1):
            col = {(b, r): fn(b, r, j) for b in range(b_count) for r in range(length)}
            want = [fsum(col[key] * x[src][key][i] for key in col) for i in range(p[w].shape[0])]
            n += _same(grads["params"][w][:, j], np.array(want, dtype=object), f"{vid} d{w}[:, {j}]")
            if bias in p:
                n += _same(grads["params"][bias][j:j + 1], np.array([fsum(col.values())], dtype=object),
                           f"{vid} d{bias}[{j}]")
    d_o = cot["output"]
    for i in _rows(rng, p["w_o"].shape[0], 1):
        col = {(b, t): concat(b, t, i) for b in range(b_count) for t in range(hd.Q.shape[1])}
        want = [fsum(col[key] * d_o[key][j] for key in col) for j in range(p["w_o"].shape[1])]
        n += _same(grads["params"]["w_o"][i], np.array(want, dtype=object), f"{vid} dw_o[{i}]")
    if "b_o" in p:
        want = np.array([fsum(mpmath.mpf(float(v)) for v in col) for col in d_o.reshape(-1, d_o.shape[-1]).T],
                        dtype=object)
        n += _same(grads["params"]["b_o"], want, f"{vid} db_o")
    return n
