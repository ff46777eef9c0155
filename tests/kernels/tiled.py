"""A tiled online-softmax attention kernel in NumPy, written the way flash-attention is
(Dao et al. 2022, Algorithm 1; Milakov & Gimelshein 2018): blocks of ``block_q`` queries
against blocks of ``block_k`` keys, a running maximum ``m``, a running sum ``l`` and an
accumulator rescaled by ``exp(m_old - m_new)`` whenever a tile raises the maximum, and the
log-sum-exp ``lse = m + log l`` as a by-product. The weights sdpa returns are recomputed in
a second pass from ``m`` and ``l``, as flash-attention's backward recomputes them.

Semantics are sdpa's (spec/components/sdpa.md): ``causal`` is the bottom-right causal mask
and ``window`` the sliding window of ``masks``, both built per tile from indices (and tiles
entirely outside them are not visited), ANDed with ``mask``; the bias is added after the
scale and the soft-cap; GQA indexes kv head ``h // (H / H_kv)``; a row with nothing to
attend to has zero weights, a zero output and ``lse = -inf``; a key of weight 0 never
reaches the output (its value is left out, not multiplied by 0); kept ``+inf`` scores share
the row; a kept NaN score makes the row NaN.

Precision is a kernel's: float64 and float32 compute in their own dtype; float16 and
bfloat16 accumulate ``q k^T``, the softmax statistics and ``P v`` in float32, round ``P``
to the input dtype before ``P v`` (as flash-attention does) and round the output once.
The scale is folded into ``q`` before the product, so ``q k^T`` cannot overflow when
``c q k^T`` does not.

Query blocks run side by side (as thread blocks do): the state is kept for every row, and
a key tile updates only the rows of the query blocks that visit it.

``bug`` plants one of :data:`BUGS` (tests/kernels/test_planted_kernels.py).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from attnspec.backends import _checks as check
from attnspec.backends.numpy import _core

BUGS = {
    "sentinel-max": "the running maximum starts at -1e4 instead of -inf",
    "mask-fill-1e4": "masked scores filled with -1e4 instead of being left out",
    "mask-fill-65504": "masked scores filled with -65504 (float16's lowest) instead of being left out",
    "scale-after-product": "q k^T stored in the input dtype, then scaled (overflows float16)",
    "last-tile-dropped": "the last partial key tile is never visited",
    "last-tile-read-past-end": "the last partial key tile reads zero keys past S, unmasked",
    "causal-skip-top-left": "causal tiles skipped by a top-left diagonal when T != S",
    "rescale-skipped": "the accumulator is not rescaled when a tile raises the maximum",
    "masked-tile-resets-max": "a fully masked tile sets the running maximum to -inf",
}

DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
          "bfloat16": ml_dtypes.bfloat16}


def as_dtype(a, dtype: str) -> np.ndarray:
    """A float64 array rounded to ``dtype`` (bfloat16 through ml_dtypes)."""
    return np.asarray(a, dtype=np.float64).astype(DTYPES[dtype])


def _wide(dt) -> type:
    return np.float32 if dt in (np.float16, ml_dtypes.bfloat16) else dt


def _exp_sub(a, b):
    """exp(a - b) with exp(inf - inf) = 1 (equal +inf scores share the row)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(np.where(a == b, 0, a - b))


def _pv(p, v):
    """p @ v over the keys of weight != 0 only: 0 * NaN never reaches the output."""
    if np.all(np.isfinite(v)):
        return p @ v  # (..., T, V)
    with np.errstate(invalid="ignore"):
        terms = p[..., :, :, None] * v[..., None, :, :]  # (..., T, BK, V)
    return np.sum(np.where((p != 0)[..., None], terms, 0), axis=-2)


def _checked(q, k, v, mask, bias, scale, num_kv_heads, softcap):
    """The NumPy backend's input checks (on float32 copies of float16 and bfloat16, which
    it does not take), and the scale, cap and kv-head map."""
    def f(x):
        return x.astype(np.float32) if x is not None and _wide(x.dtype.type) != x.dtype.type else x
    if num_kv_heads is not None:
        check.kv_heads(num_kv_heads, q.shape, k.shape, v.shape)
    kv = k.shape[-3] if num_kv_heads is not None else None
    g = q.shape[-3] // kv if kv else 1
    kr = np.repeat(f(k), g, axis=-3) if kv else f(k)
    vr = np.repeat(f(v), g, axis=-3) if kv else f(v)
    _, _, _, mask, _, full = check.attention_inputs(_core, f(q), kr, vr, mask, f(bias))
    return full, check.scale(scale, q.shape[-1]), check.softcap(softcap), g


def tiled_sdpa(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None,
               causal=False, window=None, block_q=64, block_k=64, bug=None):
    """Returns (output (..., T, V), weights (..., T, S), lse (..., T)) in q's dtype
    (lse in the accumulation dtype)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, got {bug!r}")
    full, c, cap, g = _checked(q, k, v, mask, bias, scale, num_kv_heads, softcap)
    dt = q.dtype.type
    acc = _wide(dt)
    *batch, t, s = full
    if g > 1 or num_kv_heads is not None:  # query head h reads kv head h // g, by index
        heads = np.arange(q.shape[-3]) // g
        k, v = k[..., heads, :, :], v[..., heads, :, :]
    qw = np.broadcast_to(q, (*batch, t, q.shape[-1])).astype(acc)
    kw = np.broadcast_to(k, (*batch, s, k.shape[-1])).astype(acc)
    vw = np.broadcast_to(v, (*batch, s, v.shape[-1])).astype(acc)
    keep = None if mask is None else np.broadcast_to(mask, full)
    bw = None if bias is None else np.broadcast_to(bias, full).astype(acc)
    state = _State(batch, t, v.shape[-1], acc, bug)
    qs = qw if bug == "scale-after-product" else qw * acc(c)  # (..., T, K)
    for j0 in _key_tiles(s, block_k, bug):
        visit = _visits(t, s, j0, block_q, block_k, causal, window, bug)  # (T,)
        if not visit.any():
            continue
        sc, live, nan, kept = _tile_scores(qs, kw, bw, keep, j0, block_k, s, t, c, cap, causal,
                                           window, acc, dt, bug)
        state.update(sc, live, nan, kept, visit, _tile(vw, j0, block_k, s, bug), dt)
    out, lse = state.finish(dt)
    weights = _weights(qs, kw, bw, keep, state, block_k, s, t, c, cap, causal, window,
                       acc, dt, bug)
    return out, weights, lse


def _key_tiles(s, bk, bug):
    end = (s // bk) * bk if bug == "last-tile-dropped" else s
    return range(0, end, bk)


def _visits(t, s, j0, bq, bk, causal, window, bug):
    """Per query row: does its query block visit the key tile at j0? A block skips tiles
    wholly above its causal diagonal or wholly left of its window."""
    i0 = np.arange(t) // bq * bq  # (T,) first query of each row's block
    i1 = np.minimum(i0 + bq, t) - 1  # (T,) last query of the block
    off = 0 if bug == "causal-skip-top-left" else s - t
    visit = np.ones(t, dtype=bool)
    if causal or window is not None:
        visit &= j0 <= i1 + off
    if window is not None:
        visit &= j0 + bk - 1 > i0 + (s - t) - window
    return visit


def _tile(x, j0, bk, s, bug):
    """Rows j0:j0+bk of x along axis -2; past S they read zeros (unmasked under the bug)."""
    part = x[..., j0:j0 + bk, :]
    if bug != "last-tile-read-past-end" or part.shape[-2] == bk:
        return part
    pad = np.zeros((*part.shape[:-2], bk - part.shape[-2], part.shape[-1]), part.dtype)
    return np.concatenate([part, pad], axis=-2)


def _tile_scores(qs, kw, bw, keep, j0, bk, s, t, c, cap, causal, window, acc, dt, bug):
    """Scores of one key tile (..., T, BK) in the accumulation dtype; which are live
    (kept and not -inf or NaN; under a fill bug, every finite score); which are kept NaN;
    which are truly kept."""
    kt = _tile(kw, j0, bk, s, bug)
    n = kt.shape[-2]
    with np.errstate(over="ignore", invalid="ignore"):
        sc = qs @ np.swapaxes(kt, -1, -2)  # (..., T, BK)
        if bug == "scale-after-product":
            sc = sc.astype(dt).astype(acc) * acc(c)
        if cap is not None:
            sc = acc(cap) * np.tanh(sc / acc(cap))
    j = j0 + np.arange(n)  # key indices of the tile
    inside = j < s  # False only for the rows read past S
    kept = np.broadcast_to(inside, sc.shape).copy()
    if bug == "last-tile-read-past-end":
        kept[...] = True
    sl = slice(j0, min(j0 + bk, s))
    width = sl.stop - sl.start
    if bw is not None:
        sc[..., :width] = sc[..., :width] + bw[..., sl]
    if keep is not None:
        kept[..., :width] &= keep[..., sl]
    p = np.arange(t)[:, None] + (s - t)  # (T, 1) absolute query positions
    if causal or window is not None:
        kept &= j <= p
    if window is not None:
        kept &= j > p - window
    nan = kept & np.isnan(sc)
    live = kept & ~np.isnan(sc) & (sc != -np.inf)
    if bug in ("mask-fill-1e4", "mask-fill-65504"):  # rows with no kept key still give 0
        fill = -1e4 if bug == "mask-fill-1e4" else -65504.0
        sc = np.where(kept, sc, acc(fill))
        return sc, ~np.isnan(sc) & (sc != -np.inf), nan, live
    return sc, live, nan, live


class _State:
    """m, l, the accumulator and the NaN flag of every query row."""

    def __init__(self, batch, t, vdim, acc, bug):
        m0 = -1e4 if bug == "sentinel-max" else -np.inf
        self.m = np.full((*batch, t, 1), m0, acc)  # (..., T, 1)
        self.l = np.zeros((*batch, t, 1), acc)  # (..., T, 1)
        self.o = np.zeros((*batch, t, vdim), acc)  # (..., T, V)
        self.nan = np.zeros((*batch, t, 1), bool)
        self.any = np.zeros((*batch, t, 1), bool)  # a kept key seen (for the fill bugs)
        self.bug = bug

    def update(self, sc, live, nan, kept, visit, vt, dt):
        vis = visit[:, None]  # (T, 1)
        m_tile = np.max(np.where(live, sc, -np.inf), axis=-1, keepdims=True, initial=-np.inf)
        m_new = np.maximum(self.m, m_tile)
        if self.bug == "masked-tile-resets-max":
            m_new = np.where(live.any(-1, keepdims=True), m_new, -np.inf)
        alpha = _exp_sub(self.m, m_new)  # (..., T, 1); 1 while nothing was live
        p = np.where(live, _exp_sub(sc, m_new), 0).astype(sc.dtype)  # (..., T, BK)
        pv = _pv(p.astype(dt).astype(sc.dtype), vt)
        rescaled = self.o if self.bug == "rescale-skipped" else np.where(alpha != 0, alpha * self.o, 0)
        self.o = np.where(vis, rescaled + pv, self.o)
        self.l = np.where(vis, alpha * self.l + p.sum(-1, keepdims=True), self.l)
        self.m = np.where(vis, m_new, self.m)
        self.nan |= vis & nan.any(-1, keepdims=True)
        self.any |= vis & kept.any(-1, keepdims=True)

    @property
    def empty(self):
        """Rows with nothing to attend to (under a fill bug: no kept key, as such
        kernels check)."""
        if self.bug in ("mask-fill-1e4", "mask-fill-65504"):
            return (self.l == 0) | ~self.any
        return self.l == 0

    def finish(self, dt):
        empty = self.empty
        out = np.where(empty, 0, self.o / np.where(empty, 1, self.l))
        out = np.where(self.nan, np.nan, out)
        with np.errstate(divide="ignore"):
            lse = np.where(empty, -np.inf, self.m + np.log(np.where(empty, 1, self.l)))
        lse = np.where(self.nan, np.nan, lse)
        return out.astype(dt), lse[..., 0]


def _weights(qs, kw, bw, keep, state, bk, s, t, c, cap, causal, window, acc, dt, bug):
    """Second pass: w = exp(s - m) / l tile by tile; zero in rows with nothing kept."""
    tiles = []
    empty = state.empty
    for j0 in range(0, s, bk):
        sc, live, nan, _ = _tile_scores(qs, kw, bw, keep, j0, bk, s, t, c, cap, causal, window,
                                        acc, dt, None if bug == "last-tile-read-past-end" else bug)
        w = np.where(live & ~empty, _exp_sub(sc, state.m) / np.where(empty, 1, state.l), 0)
        kept = live | nan
        tiles.append(np.where(state.nan & kept, np.nan, w)[..., :min(bk, s - j0)])
    shape = (*state.l.shape[:-1], 0)
    return (np.concatenate(tiles, axis=-1) if tiles else np.zeros(shape, acc)).astype(dt)


def lse_reference(scores_kept):
    """float64 log-sum-exp of each row of kept scores (-inf entries left out)."""
    m = np.max(scores_kept, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        return (m + np.log(np.sum(np.exp(scores_kept - m), axis=-1, keepdims=True)))[..., 0]


