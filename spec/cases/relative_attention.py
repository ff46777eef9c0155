"""relative_attention: one head with Shaw et al. (2018) relative position representations."""

import numpy as np

from ..oracle.relative_attention import relative_attention as oracle
from ._build import Component, Fn, error, value

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
