"""A fast exact oracle for kernel sizes: exact integer dot products and vectorised
double-double (DD) arithmetic, each result rounded once to float64.

It is independent of every backend (it imports NumPy only) and no backend imports it.
The inputs of the spec's vectors are dyadic rationals with few significant bits
(cases/_build.Rng), so every dot product of two inputs is an integer times a power of two:
it is computed exactly by a float64 matmul of the scaled integers whose partial sums stay
below 2**53 (checked). A product of a DD array (about 106 bits) with an input is computed
exactly by cutting the DD values into 24-bit fixed-point digits (``digits``): each digit
matmul is again an exact integer matmul. Everything else (scale, exp, tanh, division,
square roots, sums of DD terms) is DD arithmetic with error-free TwoSum/TwoProd, whose
relative error (about 2**-100) is far below half a float64 ULP except next to a rounding
boundary; the generator checks a random sample of every output against the mpmath oracle
(spec/stress/check.py) and fails on any element whose correctly rounded value differs.

A DD value is a pair ``(hi, lo)`` of float64 arrays with ``hi = fl(hi + lo)``.
"""

from __future__ import annotations

import numpy as np

_SPLITTER = 134217729.0  # 2**27 + 1
LN2 = (0.6931471805599453, 2.3190468138462996e-17)
EXACT_LIMIT = 2.0 ** 53


class InexactInput(ValueError):
    """An input the exact integer paths cannot hold (too many bits, or too large)."""


# -- error-free transformations and DD arithmetic ------------------------------------

def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


def _split(a):
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def dd(x):
    x = np.asarray(x, dtype=np.float64)
    return x, np.zeros_like(x)


def add(x, y):
    s, e = two_sum(x[0], y[0])
    t, f = two_sum(x[1], y[1])
    s, e = fast_two_sum(s, e + t)
    return _finite_renorm(s, e + f, x, y)


def _finite_renorm(s, e, x, y):
    hi, lo = fast_two_sum(s, e)
    bad = ~np.isfinite(hi)
    if np.any(bad):  # an infinite or NaN operand: plain float arithmetic decides
        hi = np.where(bad, x[0] + y[0], hi)
        lo = np.where(bad, 0.0, lo)
    return hi, lo


def neg(x):
    return -x[0], -x[1]


def sub(x, y):
    return add(x, neg(y))


def mul(x, y):
    p, e = two_prod(x[0], y[0])
    e = e + (x[0] * y[1] + x[1] * y[0])
    hi, lo = fast_two_sum(p, e)
    bad = ~np.isfinite(hi)
    if np.any(bad):
        hi, lo = np.where(bad, x[0] * y[0], hi), np.where(bad, 0.0, lo)
    return hi, np.where(hi == 0, 0.0, lo)


def scale2(x, k):
    """x * 2**k, exact (k an integer array or int)."""
    return np.ldexp(x[0], k), np.ldexp(x[1], k)


def div(x, y):
    q1 = x[0] / y[0]
    r = sub(x, mul(dd(q1), y))
    q2 = r[0] / y[0]
    r = sub(r, mul(dd(q2), y))
    q3 = r[0] / y[0]
    hi, lo = fast_two_sum(q1, q2)
    return add((hi, lo), dd(q3))


def sqrt(x):
    s = np.sqrt(x[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        r = sub(x, mul(dd(s), dd(s)))
        corr = r[0] / (2 * s)
    out = add(dd(s), dd(np.where(s > 0, corr, 0.0)))
    return out


def expm1_small(r):
    """exp(r) - 1 for |r| <= ln(2)/2 + tiny: Taylor on r / 2**10, then 10 doublings
    p -> 2p + p**2 (exact in the DD sense: no cancellation against 1)."""
    t = scale2(r, -10)
    term, p = t, t
    for n in range(2, 12):
        term = div(mul(term, t), dd(np.full_like(t[0], float(n))))
        p = add(p, term)
    for _ in range(10):
        p = add(scale2(p, 1), mul(p, p))
    return p


def exp(x):
    """exp of a DD array; -inf and anything below -746 -> 0, above 710 -> inf."""
    with np.errstate(all="ignore"):
        return _exp(x)


def _exp(x):
    hi = x[0]
    ok = np.isfinite(hi) & (hi > -746.0) & (hi < 710.0)
    k = np.where(ok, np.rint(np.where(ok, hi, 0.0) / LN2[0]), 0.0)
    r = sub((np.where(ok, hi, 0.0), np.where(ok, x[1], 0.0)), mul(dd(k), LN2))
    p = expm1_small(r)
    one_p = add(dd(np.ones_like(hi)), p)
    ki = k.astype(np.int64)
    # two steps so that 2**k itself never overflows or underflows before the product
    half = ki // 2
    out = scale2(scale2(one_p, half), ki - half)
    big = np.where(np.isnan(hi), np.nan, np.where(hi > 0, np.inf, 0.0))
    out_hi = np.where(ok, out[0], big)
    out_lo = np.where(ok & np.isfinite(out[0]), out[1], 0.0)
    return out_hi, out_lo


def expm1(x):
    small = np.abs(x[0]) < 0.34
    xs = (np.where(small, x[0], 0.0), np.where(small, x[1], 0.0))
    a = expm1_small(xs)
    b = add(exp(x), dd(np.full_like(x[0], -1.0)))
    return np.where(small, a[0], b[0]), np.where(small, a[1], b[1])


def log(x):
    """Natural log of positive DD values: one Newton step from float64's log."""
    y = np.log(x[0])
    e = exp(dd(-y))
    corr = add(mul(x, e), dd(np.full_like(y, -1.0)))  # x e^-y - 1
    return add(dd(y), corr)


def tanh(x):
    """tanh via expm1(-2|x|): -e / (2 + e), sign restored."""
    a = (np.abs(x[0]), np.where(x[0] < 0, -x[1], x[1]))
    e = expm1(scale2(neg(a), 1))
    t = div(neg(e), add(dd(np.full_like(a[0], 2.0)), e))
    sign = np.where(x[0] < 0, -1.0, 1.0)
    return t[0] * sign, t[1] * sign


def to_float(x):
    """Round a DD array once to float64 (hi + lo is the nearest double of the DD value,
    since hi = fl(hi + lo))."""
    return x[0] + x[1]


def tree_sum(x, axis=-1):
    """Sum of a DD array along ``axis`` by pairwise DD additions."""
    hi, lo = np.moveaxis(x[0], axis, -1), np.moveaxis(x[1], axis, -1)
    if hi.shape[-1] == 0:
        return np.zeros(hi.shape[:-1]), np.zeros(hi.shape[:-1])
    while hi.shape[-1] > 1:
        n = hi.shape[-1]
        if n % 2:
            hi = np.concatenate([hi, np.zeros(hi.shape[:-1] + (1,))], -1)
            lo = np.concatenate([lo, np.zeros(lo.shape[:-1] + (1,))], -1)
        hi, lo = add((hi[..., 0::2], lo[..., 0::2]), (hi[..., 1::2], lo[..., 1::2]))
    return hi[..., 0], lo[..., 0]


# -- exact integer paths ---------------------------------------------------------------

def grid(a) -> tuple[np.ndarray, int]:
    """(m, e) with a = m * 2**-e, m integer-valued float64 (the smallest such e >= 0)."""
    a = np.asarray(a, dtype=np.float64)
    finite = a[np.isfinite(a)]
    for e in range(0, 1075):
        m = np.ldexp(finite, e)
        if np.all(m == np.rint(m)):
            return np.where(np.isfinite(a), np.ldexp(a, e), 0.0), e
    raise InexactInput("no power-of-two grid holds the input")


def int_matmul(a, b) -> np.ndarray:
    """a @ b for integer-valued float64 arrays, exactly (fails if a partial sum could round)."""
    bound = np.max(np.abs(a), initial=0.0) * np.max(np.abs(b), initial=0.0) * max(a.shape[-1], 1)
    if bound >= EXACT_LIMIT:
        raise InexactInput(f"an exact matmul needs {np.log2(bound):.1f} bits (limit 53)")
    return np.matmul(a, b)


def exact_matmul(a, b):
    """a @ b for inputs on power-of-two grids, as DD (exact unless a digit split is needed)."""
    (ma, ea), (mb, eb) = grid(a), grid(b)
    parts_a, parts_b = _int_digits(ma), _int_digits(mb)
    acc = None
    for sa, da in parts_a:
        for sb, db in parts_b:
            term = dd(np.ldexp(int_matmul(da, db), sa + sb - ea - eb))
            acc = term if acc is None else add(acc, term)
    return acc


def _int_digits(m, bits: int = 16):
    """Integer-valued m as [(shift, digit)] with m = sum digit * 2**shift, |digit| < 2**bits."""
    top = np.max(np.abs(m), initial=0.0)
    if top < 2.0 ** bits:
        return [(0, m)]
    out, rest, shift = [], m.copy(), 0
    while np.any(rest != 0):
        d = np.fmod(rest, 2.0 ** bits)
        out.append((shift, d))
        rest = (rest - d) / 2.0 ** bits
        shift += bits
    return out


def digits(x, ref_exp, n: int = 6, bits: int = 24):
    """A DD array as integer digits: x ~= sum_j d_j * 2**(ref_exp - bits*j), j = 1..n,
    |d_j| <= 2**bits, truncation error below 2**(ref_exp - bits*n) (ref_exp: an integer array
    broadcasting to x with |x| <= 2**ref_exp)."""
    r = scale2(x, -ref_exp)
    out = []
    for _ in range(n):
        r = scale2(r, bits)
        d = np.floor(r[0])
        r = fast_two_sum(r[0] - d, r[1])
        out.append(d)
    return out


def dd_matmul(x, y, n: int = 6, bits: int = 24, axis_max: int = -1):
    """x @ y for a DD array x and an input y on a power-of-two grid: digit matmuls, each exact.
    ``axis_max``: the axis of x over which the digit scale is shared (-1: per row; -2: per
    column, for x^T products computed by the caller)."""
    my, ey = grid(y)
    ref = _ref_exp(x, axis=-1)
    acc = None
    for shift, dy in _int_digits(my, 53 - bits - int(np.ceil(np.log2(max(x[0].shape[-1], 2)))) - 1):
        for j, d in enumerate(digits(x, ref, n, bits), start=1):
            p = int_matmul(d, dy)  # (..., T, V)
            term = dd(np.ldexp(p, ref - bits * j + shift - ey))
            acc = term if acc is None else add(acc, term)
    return acc


def _ref_exp(x, axis=-1):
    """Per-slice exponent e (keepdims) with |x| <= 2**e along ``axis``."""
    top = np.max(np.abs(x[0]), axis=axis, keepdims=True) * (1 + 2.0 ** -50)
    with np.errstate(divide="ignore"):
        e = np.where(top > 0, np.ceil(np.log2(np.where(top > 0, top, 1.0))), 0.0)
    return e.astype(np.int64)


def dd_dot_rows(x, y):
    """sum_s x[..., s] * y[..., s] for DD x and input y (same shape), exact digits in int64."""
    my, ey = grid(y)
    ref = _ref_exp(x, axis=-1)
    acc = None
    n = max(my.shape[-1], 2)
    bits = 30 if np.max(np.abs(my), initial=0) < 2.0 ** 30 else 62 - 24 - int(np.ceil(np.log2(n)))
    parts = _int_digits(my, bits)  # y below 2**30 on its grid: one part, y itself
    if np.max(np.abs(my), initial=0) >= 2.0 ** 30 and bits < 8:
        raise InexactInput("dd_dot_rows: rows too long for int64 digit sums")
    xd = digits(x, ref, 6, 24)
    for shift, yd in parts:
        yi = yd.astype(np.int64)
        for j, d in enumerate(xd, start=1):
            s = np.sum(d.astype(np.int64) * yi, axis=-1)  # |.| < 2**24 * 2**bits * n: int64
            hi = s.astype(np.float64)
            lo = (s - hi.astype(np.int64)).astype(np.float64)
            term = scale2((hi, lo), ref[..., 0] - 24 * j - ey + shift)
            acc = term if acc is None else add(acc, term)
    return acc


# -- components ------------------------------------------------------------------------

def _dd_scalar_like(value, like):
    return dd(np.full(np.shape(like), float(value)))


def default_scale(width: int):
    """1 / sqrt(width) as DD."""
    one = dd(np.array(1.0))
    return div(one, sqrt(dd(np.array(float(width)))))


def softmax_rows(s, keep):
    """Masked softmax of DD scores along the last axis; a row with nothing kept -> 0.
    Returns (weights DD, kept mask)."""
    if keep is None:
        keep = np.ones(s[0].shape, dtype=bool)
    keep = keep & ~(np.isneginf(s[0]))
    if np.any(keep & ~np.isfinite(s[0])):
        raise InexactInput("a kept score is +inf or NaN (not a stress case)")
    hi = np.where(keep, s[0], -np.inf)
    m = np.max(hi, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    x = sub((np.where(keep, s[0], 0.0), np.where(keep, s[1], 0.0)), dd(np.broadcast_to(m, s[0].shape)))
    e = exp(x)
    e = (np.where(keep, e[0], 0.0), np.where(keep, e[1], 0.0))
    total = tree_sum(e, -1)
    safe = (np.where(total[0] > 0, total[0], 1.0), total[1])
    w = div(e, (safe[0][..., None], safe[1][..., None]))
    return (np.where(keep, w[0], 0.0), np.where(keep, w[1], 0.0)), keep


def softmax(x, mask=None):
    w, _ = softmax_rows(dd(x), None if mask is None else np.broadcast_to(mask, np.shape(x)))
    return {"y": w}


def softmax_vjp(x, dy, mask=None):
    w, _ = softmax(x, mask)["y"], None
    return {"x": _softmax_back(w, dy)}


def _softmax_back(w, g):
    """w * (g - sum(w g)) for DD w and an input-grid g."""
    delta = dd_dot_rows(w, g)  # (...,)
    diff = sub(dd(np.asarray(g, dtype=np.float64)), (delta[0][..., None], delta[1][..., None]))
    return mul(w, diff)


def _scores(q, k, scale, softcap):
    raw = exact_matmul(q, np.swapaxes(k, -1, -2))  # (..., T, S)
    c = default_scale(q.shape[-1]) if scale is None else dd(np.array(float(scale)))
    s = mul(raw, (np.broadcast_to(c[0], raw[0].shape), np.broadcast_to(c[1], raw[0].shape)))
    t = None
    if softcap is not None:
        cap = dd(np.full(s[0].shape, float(softcap)))
        t = tanh(div(s, cap))
        s = mul(cap, t)
    return s, c, t


def _repeat(x, h, h_kv):
    return np.repeat(x, h // h_kv, axis=-3)


def sdpa(q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """Scaled dot-product attention (spec/components/sdpa.md) as DD: {output, weights}."""
    if num_kv_heads is not None:
        k, v = _repeat(k, q.shape[-3], num_kv_heads), _repeat(v, q.shape[-3], num_kv_heads)
    keep = _keep(q, k, v, mask)
    k_safe = np.where(_key_used(keep, k), k, 0.0)
    s, _, _ = _scores(q, k_safe, scale, softcap)
    full = keep.shape
    s = (np.broadcast_to(s[0], full), np.broadcast_to(s[1], full))
    if bias is not None:
        b = np.broadcast_to(np.asarray(bias, dtype=np.float64), full)
        s = add(s, dd(np.where(keep, b, 0.0)))
        keep = keep & ~np.isneginf(np.where(keep, b, 0.0))
    w, keep = softmax_rows(s, keep)
    v_safe = np.where(_key_used(keep, v), v, 0.0)
    out = dd_matmul(w, v_safe)
    return {"output": out, "weights": w}


def _keep(q, k, v, mask):
    full = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (q.shape[-2], k.shape[-2])
    return np.broadcast_to(np.ones((), bool) if mask is None else np.asarray(mask, bool), full).copy()


def _key_used(keep, x):
    """(..., S, 1): the keys some query keeps (a key no query keeps is never multiplied in)."""
    used = np.any(keep, axis=-2)[..., None]
    return np.broadcast_to(used, np.broadcast_shapes(used.shape, x.shape))


def sdpa_vjp(cot, q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """dq, dk, dv (DD) for cotangents on output (and optionally weights, or sdpa_lse's lse);
    no bias gradient."""
    if bias is not None:
        raise InexactInput("sdpa_vjp: the stress family has no bias gradient")
    h, h_kv = q.shape[-3] if q.ndim >= 3 else 1, num_kv_heads
    if h_kv is not None:
        k_full, v_full = _repeat(k, h, h_kv), _repeat(v, h, h_kv)
    else:
        k_full, v_full = k, v
    keep = _keep(q, k_full, v_full, mask)
    s, c, t = _scores(q, k_full, scale, softcap)
    w, keep = softmax_rows((np.broadcast_to(s[0], keep.shape), np.broadcast_to(s[1], keep.shape)), keep)
    do = np.asarray(cot["output"], dtype=np.float64)
    dp = exact_matmul(do, np.swapaxes(v_full, -1, -2))  # (..., T, S)
    if np.any(dp[1] != 0):
        raise InexactInput("dO V^T is not exact in float64")
    dp = dp[0]
    if "weights" in cot:
        dp = dp + np.asarray(cot["weights"], dtype=np.float64)  # exact: both on fine grids
    dp = np.where(keep, dp, 0.0)
    ds = _softmax_back(w, dp)  # (..., T, S)
    if "lse" in cot:  # sdpa_lse: d lse / dS = W, so dS += W dlse
        g = np.broadcast_to(np.asarray(cot["lse"], dtype=np.float64)[..., None], w[0].shape)
        ds = add(ds, mul(w, dd(np.where(keep, g, 0.0))))
    if softcap is not None:  # d(c tanh(u/c))/du = 1 - tanh^2
        one = dd(np.ones(t[0].shape))
        ds = mul(ds, sub(one, mul(t, t)))
    ds = mul(ds, (np.broadcast_to(c[0], ds[0].shape), np.broadcast_to(c[1], ds[0].shape)))
    dq = dd_matmul(ds, k_full)
    dk = dd_matmul(_t(ds), q)
    dv = dd_matmul(_t(w), do)
    if h_kv is not None:
        dk, dv = _group_sum(dk, h, h_kv), _group_sum(dv, h, h_kv)
    return {"q": dq, "k": dk, "v": dv}


def _t(x):
    return np.swapaxes(x[0], -1, -2), np.swapaxes(x[1], -1, -2)


def _group_sum(x, h, h_kv):
    g = h // h_kv
    hi = x[0].reshape(x[0].shape[:-3] + (h_kv, g) + x[0].shape[-2:])
    lo = x[1].reshape(hi.shape)
    return tree_sum((hi, lo), axis=-3)


def layer_norm(x, gamma, beta, eps):
    """{y, xhat, rstd} as DD; x (..., D) on an input grid, exact mean and variance."""
    mx, ex = grid(x)
    d = x.shape[-1]
    total = np.sum(mx, axis=-1, keepdims=True)
    centred = mx * d - total  # d * (x - mean) * 2**ex, exact integers
    var_num = np.sum(centred * centred, axis=-1, keepdims=True)  # d**3 var 2**(2ex)
    if np.max(np.abs(var_num), initial=0.0) >= EXACT_LIMIT:
        raise InexactInput("layer_norm: the variance numerator passes 2**53")
    var = scale2(div(dd(var_num), dd(np.full(var_num.shape, float(d) ** 3))), -2 * ex)
    rstd = div(dd(np.ones(var[0].shape)), sqrt(add(var, dd(np.full(var[0].shape, float(eps))))))
    xhat = mul(scale2(div(dd(centred), dd(np.full(centred.shape, float(d)))), -ex),
               (np.broadcast_to(rstd[0], centred.shape), np.broadcast_to(rstd[1], centred.shape)))
    y = add(mul(xhat, dd(np.broadcast_to(gamma, x.shape))), dd(np.broadcast_to(beta, x.shape)))
    return {"y": y, "xhat": xhat, "rstd": rstd, "centred": (centred, ex)}


def layer_norm_vjp(dy, x, gamma, beta, eps):
    """dx, dgamma, dbeta: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma."""
    f = layer_norm(x, gamma, beta, eps)
    xhat, rstd = f["xhat"], f["rstd"]
    d = x.shape[-1]
    g = np.asarray(dy, dtype=np.float64) * gamma  # exact: two short grids
    mg, eg = grid(g)
    centred, ex = f["centred"]
    sum_g = np.sum(mg, axis=-1, keepdims=True)
    sum_gc = int_matmul(mg[..., None, :], centred[..., :, None])[..., 0]  # sum g * d (x - mean)
    # mean(g xhat) = rstd * sum_gc * 2**-(eg+ex) / d**2 ; mean(g) = sum_g 2**-eg / d
    dd_d = dd(np.full(sum_g.shape, float(d)))
    mean_g = scale2(div(dd(sum_g), dd_d), -eg)
    mean_gx = mul(scale2(div(dd(sum_gc), mul(dd_d, dd_d)), -eg - ex), rstd)
    inner = sub(sub(dd(g), _bc(mean_g, g.shape)), mul(xhat, _bc(mean_gx, g.shape)))
    dx = mul(inner, _bc(rstd, g.shape))
    lead = tuple(range(x.ndim - 1))
    dgamma = _sum_axes(mul(xhat, dd(np.broadcast_to(dy, x.shape))), lead)
    dbeta = _sum_axes(dd(np.asarray(dy, dtype=np.float64)), lead)
    return {"x": dx, "gamma": dgamma, "beta": dbeta}


def _bc(x, shape):
    return np.broadcast_to(x[0], shape), np.broadcast_to(x[1], shape)


def _sum_axes(x, axes):
    hi, lo = x
    n = len(axes)
    hi = hi.reshape((-1,) + hi.shape[n:]) if n else hi[None]
    lo = lo.reshape(hi.shape)
    return tree_sum((hi, lo), axis=0)


def rms_norm(x, gamma, eps):
    """{y, rstd} as DD: y = x / sqrt(mean(x^2) + eps) * gamma."""
    mx, ex = grid(x)
    d = x.shape[-1]
    sq = np.sum(mx * mx, axis=-1, keepdims=True)
    if np.max(sq, initial=0.0) >= EXACT_LIMIT:
        raise InexactInput("rms_norm: the sum of squares passes 2**53")
    ms = scale2(div(dd(sq), dd(np.full(sq.shape, float(d)))), -2 * ex)
    rstd = div(dd(np.ones(sq.shape)), sqrt(add(ms, dd(np.full(sq.shape, float(eps))))))
    xhat = mul(dd(x), _bc(rstd, x.shape))
    return {"y": mul(xhat, dd(np.broadcast_to(gamma, x.shape))), "xhat": xhat, "rstd": rstd,
            "sq": (mx, ex)}


def rms_norm_vjp(dy, x, gamma, eps):
    """dx = rstd (g - xhat mean(g xhat)), g = dy gamma; dgamma = sum dy xhat."""
    f = rms_norm(x, gamma, eps)
    xhat, rstd = f["xhat"], f["rstd"]
    mx, ex = f["sq"]
    d = x.shape[-1]
    g = np.asarray(dy, dtype=np.float64) * gamma
    mg, eg = grid(g)
    sum_gx = int_matmul(mg[..., None, :], mx[..., :, None])[..., 0]
    mean_gx = mul(scale2(div(dd(sum_gx), dd(np.full(sum_gx.shape, float(d)))), -eg - ex), rstd)
    dx = mul(sub(dd(g), mul(xhat, _bc(mean_gx, g.shape))), _bc(rstd, g.shape))
    lead = tuple(range(x.ndim - 1))
    dgamma = _sum_axes(mul(xhat, dd(np.broadcast_to(dy, x.shape))), lead)
    return {"x": dx, "gamma": dgamma}


def cross_entropy(logits, targets, ignore_index=-100):
    """Mean cross entropy (no smoothing): {loss} and the per-row softmax, as DD."""
    z = np.asarray(logits, dtype=np.float64)
    t = np.asarray(targets)
    valid = t != ignore_index
    w, _ = softmax_rows(dd(z), None)
    m = np.max(z, axis=-1, keepdims=True)
    lse = add(log(tree_sum(exp(sub(dd(z), dd(np.broadcast_to(m, z.shape)))), -1)), dd(m[..., 0]))
    picked = np.take_along_axis(z, np.where(valid, t, 0)[..., None], -1)[..., 0]
    row = sub(lse, dd(picked))
    row = (np.where(valid, row[0], 0.0), np.where(valid, row[1], 0.0))
    n = int(np.sum(valid))
    total = tree_sum((row[0].ravel(), row[1].ravel()), -1)
    loss = div(total, dd(np.array(float(n)))) if n else dd(np.array(np.nan))
    return {"loss": loss, "softmax": w, "valid": valid, "n": n}


def cross_entropy_vjp(dloss, logits, targets, ignore_index=-100):
    f = cross_entropy(logits, targets, ignore_index)
    w, valid, n = f["softmax"], f["valid"], f["n"]
    t = np.asarray(targets)
    onehot = (np.arange(w[0].shape[-1]) == np.where(valid, t, -1)[..., None]).astype(np.float64)
    g = sub(w, dd(onehot))
    coeff = div(dd(np.array(float(dloss))), dd(np.array(float(n))))
    g = mul(g, _bc(coeff, g[0].shape))
    return {"logits": (np.where(valid[..., None], g[0], 0.0), np.where(valid[..., None], g[1], 0.0))}


# -- multi-head attention ---------------------------------------------------------------

def _exact_linear(x, w, b=None):
    """x W + b for inputs on power-of-two grids, exact in float64 (or InexactInput)."""
    y = exact_matmul(x, w)
    if np.any(y[1] != 0):
        raise InexactInput("a projection x W is not exact in float64")
    if b is None:
        return y[0]
    s, e = two_sum(y[0], np.broadcast_to(np.asarray(b, dtype=np.float64), y[0].shape))
    if np.any(e != 0):
        raise InexactInput("a projection x W + b is not exact in float64")
    return s


def _heads(x, n):
    """(B, L, n*W) -> (B, n, L, W): head h owns columns h*W:(h+1)*W."""
    b, length, width = x.shape
    return np.swapaxes(x.reshape(b, length, n, width // n), 1, 2)


def _unheads(x):
    """DD (B, n, L, W) -> (B, L, n*W), the inverse of ``_heads``."""
    return tuple(np.swapaxes(a, 1, 2).reshape(a.shape[0], a.shape[2], -1) for a in x)


def _mha_projections(query, key, value, p, h, h_kv):
    q = _heads(_exact_linear(query, p["w_q"], p.get("b_q")), h)  # (B, H, T, K)
    k = _heads(_exact_linear(key, p["w_k"], p.get("b_k")), h_kv)  # (B, H_kv, S, K)
    v = _heads(_exact_linear(value, p["w_v"], p.get("b_v")), h_kv)  # (B, H_kv, S, V)
    return q, k, v


def _linear_dd(x, w, b=None):
    """DD x (..., N) times an input W (N, M), plus an input bias, as DD."""
    y = dd_matmul(x, np.asarray(w, dtype=np.float64))
    return y if b is None else add(y, dd(np.broadcast_to(np.asarray(b, dtype=np.float64), y[0].shape)))


def mha(query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
    """Multi-head attention (spec/oracle/mha.py) as DD: {output, weights}. The projections
    of inputs on short grids are exact in float64 (checked); the heads are the fast sdpa."""
    p, h = params or {}, int(num_heads)
    h_kv = h if num_kv_heads is None else int(num_kv_heads)
    q, k, v = _mha_projections(query, key, value, p, h, h_kv)
    r = sdpa(q, k, v, mask=mask, num_kv_heads=None if h_kv == h else h_kv)
    output = _linear_dd(_unheads(r["output"]), p["w_o"], p.get("b_o"))  # (B, T, Do)
    return {"output": output, "weights": r["weights"]}


def _sum_rows(x):
    """DD (B, L, N) summed over B and L: (N,)."""
    return tree_sum(tuple(a.reshape(-1, a.shape[-1]) for a in x), axis=0)


def _weight_grad(x, dy):
    """x^T dy summed over (B, L), x (B, L, N) and dy (B, L, M): exactly one of them DD.
    Returns DD (N, M)."""
    if isinstance(x, tuple):  # DD x, input dy: rows of x^T (N, BL) against dy (BL, M)
        xt = tuple(a.reshape(-1, a.shape[-1]).T for a in x)
        return dd_matmul(xt, np.asarray(dy, dtype=np.float64).reshape(-1, dy.shape[-1]))
    yt = tuple(a.reshape(-1, a.shape[-1]).T for a in dy)  # (M, BL) @ (BL, N), transposed
    g = dd_matmul(yt, np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1]))
    return g[0].T, g[1].T


def mha_vjp(cot, query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
    """Gradients of query, key, value and every parameter (DD), as spec/oracle/mha.py's
    mha_vjp: dconcat = dO W_o^T (exact), the heads' sdpa backward, then each projection's."""
    p, h = params or {}, int(num_heads)
    h_kv = h if num_kv_heads is None else int(num_kv_heads)
    kv = None if h_kv == h else h_kv
    q, k, v = _mha_projections(query, key, value, p, h, h_kv)
    concat = _unheads(sdpa(q, k, v, mask=mask, num_kv_heads=kv)["output"])  # (B, T, H*V)
    d_o = np.asarray(cot["output"], dtype=np.float64)  # (B, T, Do)
    grads = {"w_o": _weight_grad(concat, d_o)}
    if "b_o" in p:
        grads["b_o"] = _sum_rows(dd(d_o))
    dconcat = exact_matmul(d_o, np.asarray(p["w_o"], dtype=np.float64).T)
    if np.any(dconcat[1] != 0):
        raise InexactInput("dO W_o^T is not exact in float64")
    c = {"output": _heads(dconcat[0], h)}
    if "weights" in cot:
        c["weights"] = np.asarray(cot["weights"], dtype=np.float64)
    g = sdpa_vjp(c, q, k, v, mask=mask, num_kv_heads=kv)  # (B, H, T, K), (B, H_kv, S, K), ...
    dx = {}
    for name, x, w, b, d in (("query", query, "w_q", "b_q", g["q"]), ("key", key, "w_k", "b_k", g["k"]),
                             ("value", value, "w_v", "b_v", g["v"])):
        d = _unheads(d)  # (B, L, n*W)
        dx[name] = _linear_dd(d, np.asarray(p[w], dtype=np.float64).T)
        grads[w] = _weight_grad(np.asarray(x, dtype=np.float64), d)
        if b in p:
            grads[b] = _sum_rows(d)
    if "b_k" in p:  # every score of a row moves by q . b_k: softmax cancels it, db_k = 0 exactly
        grads["b_k"] = dd(np.zeros(np.shape(p["b_k"])))
    return dx, grads


# -- the kernel interfaces: log-sum-exp, sinks, packed and paged batches ---------------------

def _row_lse(s, keep):
    """m + log(sum exp(s - m)) over the kept scores of each row (DD); -inf for a row with
    none kept."""
    hi = np.where(keep, s[0], -np.inf)
    m = np.max(hi, axis=-1, initial=-np.inf)
    m0 = np.where(np.isfinite(m), m, 0.0)
    x = sub((np.where(keep, s[0], 0.0), np.where(keep, s[1], 0.0)),
            dd(np.broadcast_to(m0[..., None], s[0].shape)))
    e = exp(x)
    total = tree_sum((np.where(keep, e[0], 0.0), np.where(keep, e[1], 0.0)), -1)
    empty = total[0] <= 0
    lse = add(dd(m0), log((np.where(empty, 1.0, total[0]), np.where(empty, 0.0, total[1]))))
    return np.where(empty, -np.inf, lse[0]), np.where(empty, 0.0, lse[1])


def _attend(q, k, v, mask, scale, num_kv_heads, softcap, sinks=None, bias=None):
    """(output, weights, lse) as DD, the scores masked, capped, biased and (optionally)
    joined by a sink column per query head, the sink's weight dropped from the output."""
    if num_kv_heads is not None:
        k, v = _repeat(k, q.shape[-3], num_kv_heads), _repeat(v, q.shape[-3], num_kv_heads)
    keep = _keep(q, k, v, mask)
    s, _, _ = _scores(q, np.where(_key_used(keep, k), k, 0.0), scale, softcap)
    s = (np.broadcast_to(s[0], keep.shape), np.broadcast_to(s[1], keep.shape))
    if bias is not None:
        b = np.where(keep, np.broadcast_to(np.asarray(bias, dtype=np.float64), keep.shape), 0.0)
        s, keep = add(s, dd(b)), keep & ~np.isneginf(b)
    keep = keep & ~np.isneginf(s[0])
    if sinks is not None:  # (H,) against the scores' axis -3
        col = np.broadcast_to(np.asarray(sinks, np.float64)[:, None, None], keep.shape[:-1] + (1,))
        s = (np.concatenate([s[0], col], -1), np.concatenate([s[1], np.zeros(col.shape)], -1))
        keep = np.concatenate([keep, np.ones(col.shape, bool)], -1)
    lse = _row_lse(s, keep)
    w, keep = softmax_rows(s, keep)
    if sinks is not None:
        w, keep = (w[0][..., :-1], w[1][..., :-1]), keep[..., :-1]
    out = dd_matmul(w, np.where(_key_used(keep, v), v, 0.0))
    return out, w, lse


def sdpa_lse(q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """sdpa's output and the log-sum-exp of each query row's kept scores (sdpa_lse.md)."""
    out, _, lse = _attend(q, k, v, mask, scale, num_kv_heads, softcap, bias=bias)
    return {"output": out, "lse": lse}


def sdpa_sinks(q, k, v, sinks, mask=None, bias=None, scale=None, num_kv_heads=None,
               softcap=None):
    """Attention with a learned sink logit per query head in the softmax's denominator
    (attention_sinks.md): {output, weights}, the sink's column dropped."""
    out, w, _ = _attend(q, k, v, mask, scale, num_kv_heads, softcap, sinks, bias)
    return {"output": out, "weights": w}


def local_keep(t, s, causal=False, window=None, left=None, right=None):
    """(T, S) bottom-right mask of sdpa_varlen's attributes: query i at p = i + S - T."""
    p = np.arange(t)[:, None] + (s - t)
    j = np.arange(s)[None, :]
    keep = np.ones((t, s), bool)
    if causal:
        keep &= j <= p
    if window is not None:
        keep &= (j <= p) & (j > p - window)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep


def _one_sequence(q, k, v, keep, scale):
    """q (T, H, K), k and v (S, H_kv, .) in the packed layout: sdpa's output (T, H, V)."""
    t, h = q.shape[:2]
    if t == 0 or k.shape[0] == 0 or not keep.any():
        return np.zeros((t, h, v.shape[-1])), np.zeros((t, h, v.shape[-1]))
    h_kv = k.shape[1]
    out = sdpa(np.swapaxes(q, 0, 1)[None], np.swapaxes(k, 0, 1)[None], np.swapaxes(v, 0, 1)[None],
               keep, None, scale, None if h_kv == h else h_kv, None)["output"]
    return np.swapaxes(out[0][0], 0, 1), np.swapaxes(out[1][0], 0, 1)


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=None, causal=False, window=None,
                window_left=None, window_right=None):
    """sdpa run on each packed sequence (sdpa_varlen.md): output (total_q, H, V) as DD."""
    hi, lo = np.zeros(q.shape[:2] + v.shape[-1:]), np.zeros(q.shape[:2] + v.shape[-1:])
    for b in range(len(cu_seqlens_q) - 1):
        rq = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        rk = slice(int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1]))
        keep = local_keep(rq.stop - rq.start, rk.stop - rk.start, causal, window, window_left,
                          window_right)
        hi[rq], lo[rq] = _one_sequence(q[rq], k[rk], v[rk], keep, scale)
    return {"output": (hi, lo)}


def gather_pages(cache, blocks, length):
    """The first ``length`` slots of the pages ``blocks`` of a (num_blocks, P, H_kv, .) cache."""
    return cache[np.asarray(blocks, np.int64)].reshape((-1,) + cache.shape[2:])[:length]


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=None, causal=False):
    """sdpa of each sequence's new queries over its gathered keys (paged_attention.md):
    output (B, T, H, V) as DD."""
    page = k_cache.shape[1]
    hi, lo = np.zeros(q.shape[:3] + v_cache.shape[-1:]), np.zeros(q.shape[:3] + v_cache.shape[-1:])
    for b, n in enumerate(int(x) for x in seq_lens):
        blocks = block_table[b][: -(-n // page)]
        k, v = gather_pages(k_cache, blocks, n), gather_pages(v_cache, blocks, n)
        keep = local_keep(q.shape[1], n, causal)
        hi[b], lo[b] = _one_sequence(q[b], k, v, keep, scale)
    return {"output": (hi, lo)}
