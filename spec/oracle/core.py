"""Arbitrary-precision building blocks: arrays of mpf and plain loops over them.

Arrays are NumPy object arrays whose elements are ``mpmath.mpf``; NumPy is used
only as a container (indexing, shapes), never for arithmetic shortcuts with
rounding of its own. Every sum is ``mp.fsum`` and every dot product ``mp.fdot`` (exact,
then rounded once to the working precision); a matrix product of finite entries is the
same sums on Python integers (each entry an integer times one power of two of its matrix),
rounded once: ``mp.fdot``'s result, element for element (tests/test_oracle_core.py), at a
tenth of its cost.

The working precision is 50 digits, set for the span of a computation by
:func:`precision` (``mp.workdps``), never globally: the generator and the oracle's
tests run the oracle inside ``with precision():``, and leave mpmath as they found it.

Backward passes (vector-Jacobian products) sit beside each forward function: for
y = f(x, params) and a cotangent dy per output, ``<name>_vjp(cot, **inputs, **attributes
[, params=])`` returns ``({input: dx}, {param path: dtheta})``, what reverse-mode autodiff
returns for ``sum(y * dy)``, from the analytic backward formula in its docstring. Each
module lists its VJPs in ``VJPS`` ({spec function name: vjp}); :func:`attnspec.spec.oracle.vjps`
collects them. They are analytic rather than a tape over mpf because the forward oracle
calls ``mpmath.exp``, ``mpmath.sqrt``... directly, and tests/test_grad_oracle.py checks each
against 50-digit central differences of the forward oracle. Conventions shared with the
backends: relu'(0) = 0 (torch, TensorFlow, JAX); a masked or -inf softmax entry has weight 0
and gradient 0; the gradient of an input that broadcast is summed back to its shape.
"""

from __future__ import annotations

import itertools

import mpmath
import numpy as np
from mpmath.libmp import from_float, from_man_exp

mp = mpmath.mp
DPS = 50  # working precision; results are rounded once to float64 at the end


def precision():
    """The oracle's working precision for a ``with`` block: ``with precision(): ...``."""
    return mp.workdps(DPS)


def mpa(x) -> np.ndarray:
    """float64 / int / bool array -> object array of exact mpf values.

    An object array of mpf (a composite passing on an intermediate) is kept as it is,
    never rounded.
    """
    a = np.asarray(x)
    out = np.empty(a.size, dtype=object)
    if a.dtype == object:
        out[:] = [e if isinstance(e, mpmath.mpf) else mpmath.mpf(float(e)) for e in a.flat]
    else:
        return _exact_floats(a.astype(np.float64)).copy()
    return out.reshape(a.shape)


_FLOATS: dict = {}  # the parameters are converted at every call of every layer: kept


def _exact_floats(a: np.ndarray) -> np.ndarray:
    """float64 array -> object array of mpf (exact: a float64 needs 53 bits); one conversion
    per distinct array (shape and bytes), the cache cleared past 4096 arrays."""
    key = (a.shape, a.tobytes())
    if key not in _FLOATS:
        if len(_FLOATS) >= 4096:
            _FLOATS.clear()
        make = mp.make_mpf
        out = np.empty(a.size, dtype=object)
        out[:] = [make(from_float(e)) for e in a.ravel().tolist()]
        _FLOATS[key] = out.reshape(a.shape)
    return _FLOATS[key]


def sub(params: dict, prefix: str) -> dict:
    """The parameters under ``prefix.``, with the prefix removed: sub(p, "layers.1")."""
    head = prefix + "."
    return {k[len(head):]: v for k, v in params.items() if k.startswith(head)}


def zeros(shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = mpmath.mpf(0)
    return out


def tofloat(a) -> np.ndarray:
    """Round each mpf once to the nearest float64 (``float(mpf)`` rounds correctly)."""
    a = np.asarray(a, dtype=object)
    out = np.empty(a.shape, dtype=np.float64)
    for idx in np.ndindex(a.shape):
        out[idx] = float(a[idx])
    return out


def emap(f, a) -> np.ndarray:
    """Apply a scalar function to every element."""
    a = np.asarray(a, dtype=object)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        out[idx] = f(a[idx])
    return out


def matmul(a, b) -> np.ndarray:
    """(..., n, m) @ (..., m, p) with broadcast batch dimensions, exact sums."""
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    if b.ndim == 1:
        return matmul(a, b[:, None])[..., 0]
    if a.ndim == 1:
        return matmul(a[None, :], b)[..., 0, :]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    n, p = a.shape[-2], b.shape[-1]
    out = np.empty(batch + (n, p), dtype=object)
    for bi in np.ndindex(batch):
        out[bi] = _exact_matmul(a[bi], b[bi])
    return out


def _fixed_point(a: np.ndarray) -> tuple[np.ndarray, int] | None:
    """A 2-D array of finite reals as integers times one power of two: (ints, exp) with
    a[i, j] == ints[i, j] * 2**exp exactly; None when an element is inf or NaN."""
    parts = [mp.mpf(x)._mpf_ if not isinstance(x, mpmath.mpf) else x._mpf_ for x in a.flat]
    if any(not man and e for _, man, e, _ in parts):  # inf, -inf, NaN
        return None
    low = min((e for _, man, e, _ in parts if man), default=0)
    ints = np.empty(len(parts), dtype=object)
    ints[:] = [(-man if sign else man) << (e - low) if man else 0 for sign, man, e, _ in parts]
    return ints.reshape(a.shape), low


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) @ (m, p): each sum exact (integer products and sums), then rounded once to
    the working precision; what ``mp.fdot`` gives, without its per-element overhead. Inputs
    with inf or NaN take ``mp.fdot`` itself."""
    fa, fb = _fixed_point(a), _fixed_point(b)
    n, m, p = a.shape[0], a.shape[1], b.shape[1]
    if fa is None or fb is None or m == 0:
        out = np.empty((n, p), dtype=object)
        for i, j in itertools.product(range(n), range(p)):
            out[i, j] = mp.fdot((a[i, k], b[k, j]) for k in range(m))
        return out
    (ia, ea), (ib, eb) = fa, fb
    sums = ia @ ib  # Python integers: exact
    prec, rnd = mp._prec_rounding
    out = np.empty((n, p), dtype=object)
    for idx in np.ndindex(n, p):
        out[idx] = mp.make_mpf(from_man_exp(int(sums[idx]), ea + eb, prec, rnd))
    return out


def weighted_sum(weights, v) -> np.ndarray:
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :].

    A key of weight exactly 0 (masked, -inf, outside the top k) is left out of the
    sum, not multiplied by 0: its value, even NaN or inf, never reaches the output.
    """
    w, v = np.asarray(weights, dtype=object), np.asarray(v, dtype=object)
    batch = np.broadcast_shapes(w.shape[:-2], v.shape[:-2])
    w = np.broadcast_to(w, batch + w.shape[-2:])
    v = np.broadcast_to(v, batch + v.shape[-2:])
    t, s, width = w.shape[-2], w.shape[-1], v.shape[-1]
    out = np.empty(batch + (t, width), dtype=object)
    for bi in np.ndindex(batch):
        if _fixed_point(w[bi]) is not None and _fixed_point(v[bi]) is not None:
            out[bi] = _exact_matmul(w[bi], v[bi])  # all finite: a 0 weight adds exactly 0
            continue
        for i, c in itertools.product(range(t), range(width)):
            out[bi + (i, c)] = mp.fdot((w[bi + (i, j)], v[bi + (j, c)]) for j in range(s)
                                       if w[bi + (i, j)] != 0)
    return out


def add(a, b) -> np.ndarray:
    """Elementwise sum with broadcasting (object arrays add their mpf elements)."""
    return np.asarray(a, dtype=object) + np.asarray(b, dtype=object)


def softmax_row(scores, keep=None) -> list:
    """softmax over one row; entries with keep False get weight 0; all masked -> zeros.

    exp(s_j - max) / sum_k exp(s_k - max) over the kept entries. With 50 digits
    the subtraction of the max is not needed for accuracy, only for range.
    Non-finite scores take their limits: -inf is weight 0 (as if masked); kept +inf
    entries share the row equally and every finite entry gets 0; a kept NaN makes
    every kept weight of the row NaN (masked entries stay 0).
    """
    n = len(scores)
    keep = [True] * n if keep is None else [bool(k) for k in keep]
    keep = [keep[j] and scores[j] != -mpmath.inf for j in range(n)]
    if any(keep[j] and mpmath.isnan(scores[j]) for j in range(n)):
        return [mpmath.mpf("nan") if keep[j] else mpmath.mpf(0) for j in range(n)]
    top = [keep[j] and scores[j] == mpmath.inf for j in range(n)]
    if any(top):  # the limit as those scores grow without bound
        return [mpmath.mpf(1) / sum(top) if top[j] else mpmath.mpf(0) for j in range(n)]
    kept = [scores[j] for j in range(n) if keep[j]]
    if not kept:
        return [mpmath.mpf(0)] * n
    m = max(kept)
    e = [mpmath.exp(scores[j] - m) if keep[j] else mpmath.mpf(0) for j in range(n)]
    total = mp.fsum(e)
    return [ej / total for ej in e]


def softmax(x, axis=-1, keep=None) -> np.ndarray:
    """Softmax of an object array along ``axis`` with an optional boolean keep mask."""
    x = np.asarray(x, dtype=object)
    keep = np.ones(x.shape, dtype=bool) if keep is None else np.broadcast_to(keep, x.shape)
    xm = np.moveaxis(x, axis, -1)
    km = np.moveaxis(keep, axis, -1)
    out = np.empty(xm.shape, dtype=object)
    for idx in np.ndindex(xm.shape[:-1]):
        out[idx] = softmax_row(list(xm[idx]), list(km[idx]))
    return np.moveaxis(out, -1, axis)


def transpose_last(a) -> np.ndarray:
    return np.swapaxes(np.asarray(a, dtype=object), -1, -2)


def fsum_axes(a, axes) -> np.ndarray:
    """Exact sums of an object array over ``axes`` (a tuple), keeping the others."""
    a = np.asarray(a, dtype=object)
    axes = tuple(sorted(ax % a.ndim for ax in axes))
    if not axes:
        return a
    moved = np.moveaxis(a, axes, tuple(range(-len(axes), 0)))
    keep = moved.shape[:moved.ndim - len(axes)]
    out = np.empty(keep, dtype=object)
    for idx in np.ndindex(keep):
        out[idx] = mp.fsum(moved[idx].ravel())
    return out


def unbroadcast(g, shape) -> np.ndarray:
    """The gradient of an input of ``shape`` that broadcast to ``g.shape``: sum over the
    leading axes it lacked and the axes where it had size 1."""
    g = np.asarray(g, dtype=object)
    lead = g.ndim - len(shape)
    g = fsum_axes(g, tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if ones:
        g = fsum_axes(g, ones)
        g = g.reshape(shape)
    return g.reshape(shape)


def rows(a):
    """(..., D) -> iterator of (index, list of the row)."""
    for idx in np.ndindex(a.shape[:-1]):
        yield idx, list(a[idx])


def softmax_backward_row(y, dy) -> list:
    """dx_i = y_i (dy_i - sum_j dy_j y_j)."""
    s = mp.fdot(y, dy)
    return [yi * (di - s) for yi, di in zip(y, dy)]


def prefixed(prefix: str, grads: dict) -> dict:
    return {f"{prefix}.{k}": g for k, g in grads.items()}


def merge(*grads: dict) -> dict:
    out: dict = {}
    for g in grads:
        for k, a in g.items():
            out[k] = a if k not in out else out[k] + a
    return out


def cotangent(cot, name, shape):
    return mpa(cot[name]) if name in cot else zeros(shape)


def linear_vjp(x, w, dy):
    """y = x W + b over the last axis: dx = dy W^T, dW = x^T dy, db = sum dy (sums over
    every leading axis)."""
    x, dy = mpa(x), mpa(dy)
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # (N, D), (N, F)
    return (matmul(dy, transpose_last(mpa(w))), matmul(transpose_last(x2), dy2),
            fsum_axes(dy2, (0,)))
