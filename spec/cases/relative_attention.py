"""relative_attention: one head with Shaw et al. (2018) relative position representations."""

import numpy as np

from ..oracle.relative_attention import relative_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("relative_attention", {
    "relative_attention": Fn(required=["max_distance"], module="positional", inputs=["q", "k", "v",
                             "mask"], optional=["mask"], attributes={"scale": None}, params=True,
                             returns=["output", "weights"], oracle=oracle),
})


def _qkv(rng, b, t, s, kw, vw):
    return {"q": rng.uniform((b, t, kw)), "k": rng.uniform((b, s, kw)),
            "v": rng.uniform((b, s, vw))}


def _tables(rng, m, kw, vw):
    return {"rel_k": rng.weights((2 * m + 1, kw)), "rel_v": rng.weights((2 * m + 1, vw))}


def _causal(t, s):
    return np.arange(s)[None, :] <= np.arange(t)[:, None]


def cases(rng):
    yield value("relative_attention/basic-001", "relative_attention",
                "T = S = 6, K = V = 8, max_distance 2: distances up to 5 are clipped to 2; "
                "unclipped distances, clipping at m - 1, i - j instead of j - i, and a "
                "missing a^V all fail.",
                inputs=_qkv(rng, 1, 6, 6, 8, 8), attributes={"max_distance": 2},
                params=_tables(rng, 2, 8, 8),
                flags=["basic", "clipping", "direction", "value-term"])
    yield value("relative_attention/batch-001", "relative_attention",
                "B = 2, T = S = 5, K = 8, V = 6, max_distance 3.",
                inputs=_qkv(rng, 2, 5, 5, 8, 6), attributes={"max_distance": 3},
                params=_tables(rng, 3, 8, 6), flags=["batch", "clipping", "direction"])
    yield value("relative_attention/cross-001", "relative_attention",
                "T = 3 queries, S = 7 keys, max_distance 3: query i at position i, key j at "
                "position j (so j - i runs from -2 to 6).",
                inputs=_qkv(rng, 1, 3, 7, 8, 8), attributes={"max_distance": 3},
                params=_tables(rng, 3, 8, 8), flags=["cross", "t-ne-s", "clipping"])
    yield value("relative_attention/cross-002", "relative_attention",
                "T = 7 queries, S = 4 keys, max_distance 2 (j - i from -6 to 3).",
                inputs=_qkv(rng, 1, 7, 4, 8, 8), attributes={"max_distance": 2},
                params=_tables(rng, 2, 8, 8), flags=["cross", "t-ne-s", "clipping"])
    yield value("relative_attention/mask-001", "relative_attention",
                "A (2, 5, 5) boolean mask; the last row of the second batch is fully masked: "
                "its weights are 0 and its output is 0 (a^V is weighted by alpha too).",
                inputs={**_qkv(rng, 2, 5, 5, 8, 8),
                        "mask": np.array([[[1, 1, 0, 1, 1]] * 5,
                                          [[1, 0, 1, 1, 0]] * 4 + [[0, 0, 0, 0, 0]]],
                                         dtype=bool)},
                attributes={"max_distance": 2}, params=_tables(rng, 2, 8, 8),
                flags=["mask", "fully-masked", "mask-polarity"])
    yield value("relative_attention/causal-001", "relative_attention",
                "A (5, 5) causal mask broadcast over B = 2, max_distance 2.",
                inputs={**_qkv(rng, 2, 5, 5, 8, 8), "mask": _causal(5, 5)},
                attributes={"max_distance": 2}, params=_tables(rng, 2, 8, 8),
                flags=["mask", "causal", "broadcast"])
    yield value("relative_attention/zero-distance-001", "relative_attention",
                "max_distance 0: every distance clips to 0, a^K adds q_i . rel_k[0] to a whole "
                "row (no effect on the weights) and a^V adds rel_v[0] to every output.",
                inputs=_qkv(rng, 1, 4, 4, 8, 8), attributes={"max_distance": 0},
                params=_tables(rng, 0, 8, 8), flags=["edge", "max-distance-0"])
    yield value("relative_attention/no-clip-001", "relative_attention",
                "max_distance 6 with T = S = 5: no distance reaches the clip; tables of 13 rows.",
                inputs=_qkv(rng, 1, 5, 5, 8, 8), attributes={"max_distance": 6},
                params=_tables(rng, 6, 8, 8), flags=["large-max-distance", "direction"])
    yield value("relative_attention/scale-001", "relative_attention",
                "An explicit scale 0.5 (not 1/sqrt(8)); it multiplies q.k and q.a^K alike.",
                inputs=_qkv(rng, 1, 5, 5, 8, 8), attributes={"max_distance": 2, "scale": 0.5},
                params=_tables(rng, 2, 8, 8), flags=["scale"])
    yield error("relative_attention/negative-distance-001", "relative_attention",
                "max_distance = -1.",
                inputs=_qkv(rng, 1, 4, 4, 8, 8), attributes={"max_distance": -1},
                params=_tables(rng, 1, 8, 8), error="ConfigError", mentions=["max_distance"])
    yield error("relative_attention/rel-k-shape-001", "relative_attention",
                "rel_k with 3 rows for max_distance 2 (needs 2m + 1 = 5).",
                inputs=_qkv(rng, 1, 4, 4, 8, 8), attributes={"max_distance": 2},
                params={"rel_k": rng.weights((3, 8)), "rel_v": rng.weights((5, 8))},
                error="ParameterError", mentions=["rel_k", "(3, 8)"])
    yield error("relative_attention/rel-v-shape-001", "relative_attention",
                "rel_v of width 6 for values of width 8.",
                inputs=_qkv(rng, 1, 4, 4, 8, 8), attributes={"max_distance": 2},
                params={"rel_k": rng.weights((5, 8)), "rel_v": rng.weights((5, 6))},
                error="ParameterError", mentions=["rel_v", "(5, 6)"])
    yield error("relative_attention/width-001", "relative_attention",
                "q of width 8 against k of width 6.",
                inputs={"q": rng.uniform((1, 4, 8)), "k": rng.uniform((1, 4, 6)),
                        "v": rng.uniform((1, 4, 8))},
                attributes={"max_distance": 2}, params=_tables(rng, 2, 8, 8),
                error="ShapeError", mentions=["q", "k"])
    yield error("relative_attention/bad-mask-001", "relative_attention",
                "A (4, 3) mask for T = S = 4.",
                inputs={**_qkv(rng, 1, 4, 4, 8, 8), "mask": np.ones((4, 3), dtype=bool)},
                attributes={"max_distance": 2}, params=_tables(rng, 2, 8, 8),
                error="ShapeError", mentions=["mask", "(4, 3)"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("relative_attention/defaults-001", "relative_attention",
                "scale left out (default None = 1/sqrt(K) = 1/2, K = 4), T = S = 5, "
                "max_distance 2.",
                inputs=_qkv(rd, 1, 5, 5, 4, 4), attributes={"max_distance": 2},
                params=_tables(rd, 2, 4, 4), flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    q = np.full((1, 3, 4), 16.0)
    k = np.array([31.25, -31.25, 31.25, -31.25])[None, :, None] * np.ones((1, 4, 4))
    yield value("relative_attention/large-001", "relative_attention",
                "Scores 32 (k_j + a^K) = +-1000 + O(32) (q = 16, k = +-31.25, K = 4, scale "
                "1/2), max_distance 1: the softmax must subtract the row maximum (exp(1000) "
                "overflows even float64).",
                inputs={"q": q, "k": k, "v": rd.uniform((1, 4, 3))},
                attributes={"max_distance": 1},
                params={"rel_k": rd.weights((3, 4), 0.25), "rel_v": rd.weights((3, 3))},
                flags=["overflow", "stability"])


def _edges(rng):
    """Non-finite masked values and the scale check (their own number stream)."""
    x = _qkv(rng, 1, 4, 4, 4, 4)
    x["v"][0, 3] = np.nan  # causal: only query 3 keeps key 3
    x["k"][0, 3, 0] = np.inf
    yield value("relative_attention/masked-nan-001", "relative_attention",
                "Causal T = S = 4 with NaN in value 3 and inf in key 3: queries 0..2 mask key 3 "
                "and stay finite; query 3 keeps it (an inf score: weight 1) and its output is NaN.",
                inputs={**x, "mask": _causal(4, 4)}, attributes={"max_distance": 1},
                params=_tables(rng, 1, 4, 4),
                flags=["masked-nan", "nan-propagation", "non-finite", "causal"])
    yield error("relative_attention/bad-scale-001", "relative_attention",
                "scale = '0.5', a string (a backend that calls float() on it accepts it).",
                inputs=_qkv(rng, 1, 3, 3, 4, 4), attributes={"max_distance": 1, "scale": "0.5"},
                params=_tables(rng, 1, 4, 4), error="ConfigError", mentions=["scale"])


def grad_cases(r):
    def t(m, kw, vw):
        return {"rel_k": r.weights((2 * m + 1, kw)), "rel_v": r.weights((2 * m + 1, vw))}

    yield gradient("relative_attention/grad-001", "relative_attention",
                   "T = 3, S = 5, K = 3, V = 2, max_distance = 1 (distances 2..4 "
                   "clipped): the rows 0 and 2 of rel_k and rel_v collect the gradient of every "
                   "clipped pair (overwriting instead of accumulating fails).",
                   inputs={"q": r.uniform((2, 3, 3)), "k": r.uniform((2, 5, 3)),
                           "v": r.uniform((2, 5, 2))},
                   attributes={"max_distance": 1}, params=t(1, 3, 2),
                   cotangents={"output": r.uniform((2, 3, 2))},
                   flags=["gradient", "clipping", "accumulation"])
    yield gradient("relative_attention/grad-002", "relative_attention",
                   "max_distance = 3 >= every distance (T = S = 4), a causal mask and cotangents "
                   "on the output and the weights: masked pairs add nothing to the tables' "
                   "gradients, rel_k's upper rows (j > i) get 0.",
                   inputs={"q": r.uniform((1, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 3)), "mask": np.tril(np.ones((4, 4), dtype=bool))},
                   attributes={"max_distance": 3}, params=t(3, 2, 3),
                   cotangents={"output": r.uniform((1, 4, 3)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "causal", "weights-cotangent"])
    yield gradient("relative_attention/grad-003", "relative_attention",
                   "max_distance = 0 (a single table row shared by every pair), scale = 0.5: "
                   "drel_v = sum over every pair of alpha_ij dz_i; drel_k is 0 (the one row "
                   "shifts a query's every score alike, which the softmax ignores).",
                   inputs={"q": r.uniform((2, 2, 2)), "k": r.uniform((2, 3, 2)),
                           "v": r.uniform((2, 3, 2))},
                   attributes={"max_distance": 0, "scale": 0.5}, params=t(0, 2, 2),
                   cotangents={"output": r.uniform((2, 2, 2))},
                   flags=["gradient", "max-distance-0", "scale"])
    keep = r.bools((2, 4, 3))
    keep[..., 0] = True
    yield gradient("relative_attention/grad-004", "relative_attention",
                   "T = 4 > S = 3 with max_distance = 2, a (2, 4, 3) mask and a cotangent on "
                   "the weights only: dq_i includes the scaled a^K term c sum_j de_ij a^K_ij.",
                   inputs={"q": r.uniform((2, 4, 2)), "k": r.uniform((2, 3, 2)),
                           "v": r.uniform((2, 3, 2)), "mask": keep},
                   attributes={"max_distance": 2}, params=t(2, 2, 2),
                   cotangents={"weights": r.uniform((2, 4, 3))},
                   flags=["gradient", "mask", "weights-cotangent"])
