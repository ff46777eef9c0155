"""sampling: the sampling filters (temperature, top-k, top-p, min-p, in transformers' order,
each renormalising) as a deterministic function of the logits, and the draw with an explicit
uniform u per row (inverse CDF in id order)."""

import mpmath
import numpy as np

from ..oracle.core import mpa, softmax_row
from ..oracle.sampling import draw, filtered_row
from ..oracle.sampling import sample as sample_oracle
from ..oracle.sampling import sampling_filter as filter_oracle
from ._build import Component, Fn, error, value

FILTERS = {"temperature": 1.0, "top_k": None, "top_p": 1.0, "min_p": 0.0, "min_tokens_to_keep": 1}

COMPONENT = Component("sampling", {
    "sampling_filter": Fn(module="sampling", inputs=["logits"], attributes=dict(FILTERS),
                          returns=["probs"], oracle=filter_oracle),
    "sample": Fn(module="sampling", inputs=["logits", "u"], attributes=dict(FILTERS),
                 returns=["ids"], oracle=sample_oracle),
})

# So that no correct float16/bfloat16 evaluation moves a token across a filter's boundary
# or a draw across a CDF step, every vector keeps these margins (exact ones excepted):
TOP_P_MARGIN = 0.05   # |mass above a token - top_p|
MIN_P_MARGIN = 0.1    # |q_j / max q - min_p| relative to min_p
CDF_MARGIN = 0.05     # |F_j - u|
DENSE_MARGIN = 0.002  # |F_j - u| at float32 only (V = 64)
# generation-config defaults a backend could take for the filters' (off) defaults
GENERATION_DEFAULTS = [{"top_k": 50}, {"top_p": 0.9}, {"min_p": 0.05}, {"temperature": 0.7}]


def _margins(logits, attrs, u=None, exact=False, cdf_margin=CDF_MARGIN):
    """Refuse (at generation) a vector whose filter or draw sits near a boundary."""
    a = {**FILTERS, **attrs}
    for n, row in enumerate(mpa(logits)):
        z = [v / mpmath.mpf(a["temperature"]) for v in row]
        keep = [True] * len(z)
        if a["top_k"] is not None and a["top_k"] < len(z):
            t = sorted(z, reverse=True)[max(a["top_k"], a["min_tokens_to_keep"]) - 1]
            keep = [zj >= t for zj in z]
        if a["top_p"] < 1:
            q = sorted(softmax_row(z, keep), reverse=True)
            above = [mpmath.fsum(q[:r]) for r in range(len(q)) if q[r] > 0]
            gap = min(abs(m - a["top_p"]) for m in above)
            if gap < TOP_P_MARGIN and not exact:
                raise ValueError(f"row {n}: mass {gap} from top_p")
            keep = filtered_row(list(row), a["temperature"], a["top_k"], a["top_p"], 0.0,
                                a["min_tokens_to_keep"])[1]
        if a["min_p"] > 0:
            q = softmax_row(z, keep)
            ratio = [qj / max(q) for qj, k in zip(q, keep) if k]
            if min(abs(r - a["min_p"]) for r in ratio) < MIN_P_MARGIN * a["min_p"]:
                raise ValueError(f"row {n}: a probability near min_p * max")
    if u is not None and not exact:
        probs = filter_oracle(logits, **attrs)["probs"]
        for n, (q, un) in enumerate(zip(probs, u)):
            cdf = np.cumsum(np.array(q, dtype=object))
            if min(abs(f - un) for f in cdf) < cdf_margin:
                raise ValueError(f"row {n}: u = {un} near a CDF step")


def _safe_u(logits, attrs, wants, margin=CDF_MARGIN):
    """Per row, the multiple of 1/64 nearest the wanted u that keeps CDF_MARGIN from every
    CDF step (exact in float16 and bfloat16)."""
    probs = filter_oracle(logits, **attrs)["probs"]
    out = []
    for q, want in zip(probs, wants):
        cdf = np.cumsum(np.array(q, dtype=object))
        grid = sorted((k / 64 for k in range(64)), key=lambda u: (abs(u - want), u))
        out.append(next(u for u in grid if min(abs(f - u) for f in cdf) >= margin))
    return out


def _telling_u(logits, wants, rivals, margin):
    """Per row n, the u of _safe_u's grid nearest wants[n] whose draw differs when the
    attributes rivals[n] (a wrong default) replace the defaults."""
    out = []
    for row, want, rival in zip(logits, wants, rivals):
        q = filter_oracle(row[None], **{})["probs"][0]
        wrong = filter_oracle(row[None], **rival)["probs"][0]
        cdf = np.cumsum(np.array(q, dtype=object))
        grid = sorted((k / 64 for k in range(64)), key=lambda u: (abs(u - want), u))
        out.append(next(u for u in grid if min(abs(f - u) for f in cdf) >= margin
                        and draw(list(q), u) != draw(list(wrong), u)))
    return out


def _filter(id, desc, logits, attrs, flags, omit_defaults=False):
    _margins(logits, attrs)
    return value(f"sampling/{id}", "sampling_filter", desc, inputs={"logits": logits},
                 attributes=attrs, flags=flags, omit_defaults=omit_defaults)


def _sample(id, desc, logits, u, attrs, flags, exact=False, omit_defaults=False, **dtypes):
    _margins(logits, attrs, u, exact, dtypes.pop("margin", CDF_MARGIN))
    return value(f"sampling/{id}", "sample", desc, inputs={"logits": logits, "u": np.asarray(u)},
                 attributes=attrs, flags=flags, omit_defaults=omit_defaults, **dtypes)


def _grid(rng, shape, lo=-3.0, hi=3.0):
    """Logits on a 0.25 grid: distinct values stay distinct after / T at bfloat16."""
    return rng.uniform(shape, lo, hi, step=0.25)


def _peaked(rng, n):
    """(n, 64) logits: one token of probability about 0.5, 30 of about 0.015 (ratio to it
    below 0.05) and 33 smaller ones, all distinct, permuted per row."""
    levels = np.array([4.0] + [0.5 + i / 64 for i in range(30)] + [0.5 - (i + 1) / 64 for i in range(33)])
    return np.stack([levels[np.argsort(rng.integers(0, 2**30, (64,)), kind="stable")]
                     for _ in range(n)])


def _distinct(rng, n, v, spread=6.0):
    """(n, v) logits, a permutation of v levels `spread / v` apart per row."""
    levels = np.arange(v, dtype=np.float64) * (spread / v) - spread / 2
    return np.stack([levels[np.argsort(rng.integers(0, 2**30, (v,)), kind="stable")]
                     for _ in range(n)])


def cases(rng):
    yield from _filter_cases(rng)
    yield from _sample_cases(rng)


def _filter_cases(rng):
    yield _filter("temperature-001",
                  "temperature = 0.5 alone: probs = softmax(x / 0.5), nothing removed; "
                  "multiplying by T instead of dividing flattens them.",
                  _grid(rng, (2, 8)), {"temperature": 0.5}, ["basic"])
    yield _filter("top-k-001",
                  "top_k = 3 of 8 distinct logits: the 3 largest renormalised, the rest 0.",
                  _distinct(rng, 3, 8), {"top_k": 3}, ["basic"])
    yield _filter("top-k-ties-001",
                  "top_k = 2 with the 2nd largest logit tied three times (row 0: 2, 1, 1, 1): "
                  "every token equal to the k-th value is kept (4 tokens, as transformers' "
                  "`scores < topk(...)[-1]`); row 1: ties above the k-th value change nothing.",
                  np.array([[1.0, -1.0, 2.0, 1.0, 0.0, 1.0, -2.0, 0.5],
                            [1.5, 1.5, 0.5, -0.5, 0.0, -1.0, 0.25, -2.0]]),
                  {"top_k": 2}, ["ties-keep-all", "edge"])
    yield _filter("top-p-001",
                  "top_p = 0.7: the smallest set of most probable tokens whose mass reaches "
                  "0.7, the token that crosses 0.7 included (2 tokens: 0.53 + 0.25); "
                  "renormalised.",
                  _distinct(rng, 3, 8), {"top_p": 0.7}, ["basic", "boundary"])
    yield _filter("top-p-ties-001",
                  "top_p = 0.5 where the crossing token has equal-probability twins "
                  "(logits 1, 0, 0, 0): all tokens of the boundary probability are kept, so "
                  "the set does not depend on an order among ties.",
                  np.array([[0.0, -2.0, 1.0, 0.0, -1.0, 0.0, -3.0, -2.5],
                            [-1.0, 2.0, -1.0, 2.0, -1.0, 0.5, -3.0, -1.0]]),
                  {"top_p": 0.5}, ["ties-keep-all", "edge"])
    yield _filter("min-p-001",
                  "min_p = 0.25: tokens with probability >= 0.25 x the largest probability "
                  "(not >= 0.25 itself) are kept; renormalised.",
                  _distinct(rng, 3, 8, 5.0), {"min_p": 0.25}, ["basic"])
    yield _filter("combined-001",
                  "temperature 0.5, top_k 6, top_p 0.8, min_p 0.1 in transformers' order "
                  "(temperature, top-k, top-p, min-p, each on the previous survivors "
                  "renormalised): 2 tokens; top-p on softmax(x) before the temperature "
                  "(llama.cpp's default chain) keeps 4, of which min-p keeps 3.",
                  _distinct(rng, 3, 8, 4.0),
                  {"temperature": 0.5, "top_k": 6, "top_p": 0.8, "min_p": 0.1}, ["combined"])
    yield _filter("min-tokens-001",
                  "min_tokens_to_keep = 3 with top_k 1, top_p 0.25 and min_p 0.9: each filter "
                  "keeps at least the 3 most probable tokens.",
                  _distinct(rng, 2, 8), {"top_k": 1, "top_p": 0.25, "min_p": 0.9,
                                         "min_tokens_to_keep": 3}, ["edge"])
    yield _filter("top-k-all-001",
                  "top_k = 10 > V = 8: nothing removed (k clipped to V), temperature 2.",
                  _grid(rng, (2, 8)), {"top_k": 10, "temperature": 2.0}, ["top-all"])
    yield _filter("defaults-001",
                  "Every attribute left out (temperature 1, no top-k, top_p 1, min_p 0): "
                  "softmax over V = 64 logits, one token of probability 0.5 and 30 of about "
                  "0.015; a default top_k of 50, top_p 0.9, min_p 0.05 or temperature 0.7 "
                  "(generation-config defaults) changes it.",
                  _peaked(rng, 2), {}, ["defaults"], omit_defaults=True)

    x = _grid(rng, (2, 6))
    for id, attrs, mention in (("temperature-002", {"temperature": 0.0}, "temperature"),
                               ("top-k-zero-001", {"top_k": 0}, "top_k"),
                               ("top-p-range-001", {"top_p": 1.5}, "top_p"),
                               ("min-p-range-001", {"min_p": -0.25}, "min_p"),
                               ("min-tokens-002", {"min_tokens_to_keep": 0}, "min_tokens_to_keep")):
        yield error(f"sampling/{id}", "sampling_filter", f"{mention} = {attrs[mention]} is "
                    "refused.", inputs={"logits": x}, attributes=attrs, error="ConfigError",
                    mentions=[mention])
    yield error("sampling/rank-001", "sampling_filter", "Rank-1 logits (the filter takes (N, V)).",
                inputs={"logits": x[0]}, error="ShapeError", mentions=["logits", "(6,)"])


def _sample_cases(rng):
    x = _distinct(rng, 4, 8)
    yield _sample("draw-001", "Plain softmax, 4 rows, u away from every CDF step: the id is the "
                  "first j with F_j > u, F the CDF in id order.", x,
                  _safe_u(x, {}, [0.125, 0.4, 0.7, 0.9]), {}, ["basic"])
    x = _distinct(rng, 3, 8)
    yield _sample("draw-top-k-001", "top_k 3: removed tokens have no mass and are never drawn; "
                  "u near 1 draws the kept token of the highest id (id order, not probability "
                  "order).", x, _safe_u(x, {"top_k": 3}, [0.97, 0.5, 0.03]), {"top_k": 3},
                  ["basic"])
    z = np.array([[-1.0, 0.0, -1.0, 0.0, 0.0, -1.0, 0.0, -1.0]] * 5)
    yield _sample("draw-boundary-001",
                  "u on the CDF steps: kept ids 1, 3, 4, 6 (top_k 4, ties), each exactly 0.25, "
                  "F = 0, .25, .25, .5, .75, .75, 1, 1; u = 0, .25, .5, .75, .9375 draw 1, 3, 4, "
                  "6, 6 (F_j > u strictly: u = F_j draws the next kept token).",
                  z, [0.0, 0.25, 0.5, 0.75, 0.9375], {"top_k": 4}, ["boundary", "ties"], exact=True)
    x, attrs = _distinct(rng, 3, 8, 4.0), {"temperature": 0.75, "top_p": 0.8, "min_p": 0.1}
    yield _sample("draw-combined-001", "temperature 0.75, top_p 0.8, min_p 0.1, then the draw.",
                  x, _safe_u(x, attrs, [0.25, 0.5, 0.875]), attrs, ["combined"])
    yield _sample("draw-u-high-001", "u = 0.99609375 (the largest u below 1 at bfloat16): the last "
                  "kept token; a sum that rounds below u must still return it, never an id "
                  "past the vocabulary or a removed one.",
                  _distinct(rng, 2, 8), [0.99609375, 0.99609375], {"top_k": 5},
                  ["edge"], exact=True)
    x = _peaked(rng, 4)
    yield _sample("draw-defaults-001", "Every attribute left out: the draw from softmax(x) over "
                  "V = 64 (as defaults-001); u chosen per row so that a default top_k 50 "
                  "(row 0), top_p 0.9 (row 1), min_p 0.05 (row 2) or temperature 0.7 (row 3) "
                  "draws another id.",
                  x, _telling_u(x, [0.2, 0.45, 0.7, 0.95], GENERATION_DEFAULTS, DENSE_MARGIN),
                  {}, ["defaults"],
                  omit_defaults=True, margin=DENSE_MARGIN, dtypes=["float64", "float32"],
                  dtype_note="64 CDF steps about 0.016 apart: a float16 or bfloat16 running "
                  "sum moves them by more than the gaps.")
    x = _grid(rng, (2, 6))
    yield error("sampling/draw-u-range-001", "sample", "u = 1 is outside [0, 1).",
                inputs={"logits": x, "u": np.array([0.5, 1.0])}, error="DomainError",
                mentions=["u"])
    yield error("sampling/draw-u-shape-001", "sample", "u of shape (3,) for 2 rows.",
                inputs={"logits": x, "u": np.array([0.5, 0.25, 0.75])}, error="ShapeError",
                mentions=["u", "(3,)"])
    yield error("sampling/draw-temperature-003", "sample", "temperature = -1 is refused.",
                inputs={"logits": x, "u": np.array([0.5, 0.25])},
                attributes={"temperature": -1.0}, error="ConfigError", mentions=["temperature"])
