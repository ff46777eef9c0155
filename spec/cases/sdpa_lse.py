"""sdpa_lse: sdpa's output with the log-sum-exp of each query row's kept scores."""

import numpy as np

from ..oracle.masks import causal_mask
from ..oracle.sdpa_lse import sdpa_lse as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("sdpa_lse", {
    "sdpa_lse": Fn(module="attention", inputs=["q", "k", "v", "mask", "bias"],
                   optional=["mask", "bias"],
                   attributes={"scale": None, "num_kv_heads": None, "softcap": None},
                   returns=["output", "lse"], oracle=oracle),
})


def qkv(rng, batch, t, s, k_width, v_width, lo=-2.0, hi=2.0):
    step = 2.0 ** -6 if max(-lo, hi) <= 4 else 2.0 ** -4  # exact in bfloat16
    return {"q": rng.uniform(batch + (t, k_width), lo, hi, step),
            "k": rng.uniform(batch + (s, k_width), lo, hi, step),
            "v": rng.uniform(batch + (s, v_width))}


def gqa(rng, b, h, h_kv, t, s, k=4, v=3):
    return {"q": rng.uniform((b, h, t, k)), "k": rng.uniform((b, h_kv, s, k)),
            "v": rng.uniform((b, h_kv, s, v))}


def cases(rng):
    yield value("sdpa_lse/basic-001", "sdpa_lse",
                "q (2, 3, 4) in [-4, 4], 5 keys, default scale 1/2: lse = ln sum_j exp(s_ij) "
                "per query row, natural log (log2, as some kernels keep it, is 1.44 times it).",
                inputs=qkv(rng, (2,), 3, 5, 4, 4, -4.0, 4.0), flags=["basic", "log-base", "scale"])
    # scores = 0.5 * 2 * k[j, 0]: exactly 1000, 996, 992, 984 (and their negatives)
    q_big = np.zeros((2, 4))
    q_big[0, 0], q_big[1, 0] = 2.0, -2.0
    k_big = np.zeros((4, 4))
    k_big[:, 0] = [1000.0, 996.0, 992.0, 984.0]
    yield value("sdpa_lse/large-001", "sdpa_lse",
                "Scores exactly 1000, 996, 992, 984 (first query) and their negatives (second): "
                "lse = 1000.018... and -983.98...; exp without the row maximum subtracted "
                "overflows (inf) or underflows (-inf) at every dtype.",
                inputs={"q": q_big, "k": k_big, "v": rng.uniform((4, 3))},
                flags=["overflow", "underflow", "stability"])
    mask = rng.bools((3, 5))
    mask[1] = False
    mask[[0, 2], 0] = True
    bias = rng.uniform((3, 5), -2.0, 2.0)
    bias[2, 3] = -np.inf
    yield value("sdpa_lse/fully-masked-001", "sdpa_lse",
                "A (3, 5) mask with row 1 fully masked and a (3, 5) bias with a -inf entry: "
                "the masked row has lse = -inf and a zero output (ln 0; a finite sentinel "
                "or 0 is wrong), the bias enters the lse, the -inf key is left out.",
                inputs={**qkv(rng, (2,), 3, 5, 4, 3), "mask": mask, "bias": bias},
                flags=["fully-masked", "mask", "bias"])
    yield value("sdpa_lse/gqa-causal-001", "sdpa_lse",
                "H = 4 query heads over H_kv = 2 (T = 3, S = 4), bottom-right causal mask: "
                "query i sums over keys j <= i + 1 only; lse is (1, 4, 3), per query head.",
                inputs={**gqa(rng, 1, 4, 2, 3, 4), "mask": causal_mask(3, 4)["mask"]},
                attributes={"num_kv_heads": 2}, flags=["gqa", "causal", "head-grouping"])
    yield value("sdpa_lse/softcap-bias-001", "sdpa_lse",
                "softcap = 3 on scaled scores up to 8, then a (3, 5) bias in [-2, 2]: lse is "
                "over the capped, biased scores (the raw scores' lse is larger).",
                inputs={**qkv(rng, (2,), 3, 5, 4, 3, -4.0, 4.0),
                        "bias": rng.uniform((3, 5), -2.0, 2.0)},
                attributes={"softcap": 3.0}, flags=["softcap", "bias"])
    yield value("sdpa_lse/scale-001", "sdpa_lse",
                "An explicit scale = 0.25 with K = 4 (not 1/2), T = 2 queries against S = 6 "
                "keys: lse of the unscaled q k^T differs.",
                inputs=qkv(rng, (1,), 2, 6, 4, 3, -4.0, 4.0), attributes={"scale": 0.25},
                flags=["scale", "t-ne-s"])
    x = qkv(rng, (2, 3), 3, 4, 4, 2)
    yield value("sdpa_lse/broadcast-001", "sdpa_lse",
                "q (2, 3, 3, 4) with k (3, 4, 4) and v (1, 4, 2): batch dims broadcast; lse is "
                "(2, 3, 3).",
                inputs={"q": x["q"], "k": x["k"][0], "v": x["v"][:1, 0]},
                flags=["batch", "broadcast"])
    yield value("sdpa_lse/empty-keys-001", "sdpa_lse",
                "S = 0 keys: every lse is -inf (ln of an empty sum) and the output is zero.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": np.zeros((2, 0, 4)),
                        "v": np.zeros((2, 0, 5))}, flags=["empty-axis", "fully-masked", "edge"])
    x = qkv(rng, (1,), 3, 4, 4, 3)
    x["k"][0, 3] = np.nan
    x["v"][0, 3] = np.inf
    mask = np.ones((3, 4), dtype=bool)
    mask[:, 3] = False
    bias = rng.uniform((3, 4), -1.0, 1.0)
    bias[2, :2] = np.inf
    yield value("sdpa_lse/non-finite-001", "sdpa_lse",
                "NaN key and inf value of a masked key (never seen: lse and output finite); "
                "row 2 has two +inf bias entries: its lse is +inf and its output the mean of "
                "their values.",
                inputs={**x, "mask": mask, "bias": bias},
                flags=["masked-nan", "pos-inf", "non-finite"])
    yield value("sdpa_lse/defaults-001", "sdpa_lse",
                "Every attribute left out: scale 1/sqrt(4) = 1/2, no grouping, no cap, with "
                "q, k in [-8, 8] (scores up to 128): a default scale of 1 or a default cap "
                "fails.",
                inputs=qkv(Rng("sdpa_lse/defaults"), (2,), 3, 5, 4, 4, -8.0, 8.0),
                flags=["defaults"], omit_defaults=True)

    x = qkv(rng, (2,), 3, 4, 4, 3)
    yield error("sdpa_lse/key-width-001", "sdpa_lse", "q has K = 4 but k has K = 3.",
                inputs={**x, "k": rng.uniform((2, 4, 3))}, error="ShapeError",
                mentions=["k.shape[-1]", "3"])
    yield error("sdpa_lse/mask-dtype-001", "sdpa_lse",
                "An integer 0/1 mask is refused: polarity is never guessed.",
                inputs={**x, "mask": np.ones((3, 4), dtype=np.int64)}, error="DTypeError",
                mentions=["mask"])
    yield error("sdpa_lse/bad-scale-001", "sdpa_lse", "scale given as a string.",
                inputs=x, attributes={"scale": "0.5"}, error="ConfigError", mentions=["scale"])
    yield error("sdpa_lse/gqa-divide-001", "sdpa_lse", "num_kv_heads = 3 does not divide H = 4.",
                inputs=gqa(rng, 1, 4, 3, 2, 2), attributes={"num_kv_heads": 3},
                error="ConfigError", mentions=["num_kv_heads", "4"])


def grad_cases(r):
    yield gradient("sdpa_lse/grad-001", "sdpa_lse",
                   "Cotangents on the output and the lse, (2, 3, 4) queries, 5 keys: "
                   "d lse / dS = W adds W dlse to dS; dropping it (the output's gradient only) "
                   "fails.",
                   inputs=qkv(r, (2,), 3, 5, 4, 3),
                   cotangents={"output": r.uniform((2, 3, 3)), "lse": r.uniform((2, 3))},
                   flags=["gradient", "basic"])
    mask = r.bools((3, 5))
    mask[1] = False
    mask[[0, 2], 0] = True
    yield gradient("sdpa_lse/grad-002", "sdpa_lse",
                   "A cotangent on the lse only, a (3, 5) mask with row 1 fully masked and a "
                   "(3, 5) bias: dbias = W dlse, dv = 0; the masked row (lse = -inf) gets no "
                   "gradient, never NaN.",
                   inputs={**qkv(r, (2,), 3, 5, 4, 3), "mask": mask,
                           "bias": r.uniform((3, 5))},
                   cotangents={"lse": r.uniform((2, 3))},
                   flags=["gradient", "fully-masked", "mask", "bias"])
    yield gradient("sdpa_lse/grad-003", "sdpa_lse",
                   "softcap = 2 with num_kv_heads = 2 under H = 4 and a causal mask: ds = dS "
                   "(1 - tanh^2(s / 2)), dk and dv summed over each group.",
                   inputs={**gqa(r, 1, 4, 2, 4, 4), "mask": causal_mask(4, 4)["mask"]},
                   attributes={"softcap": 2.0, "num_kv_heads": 2},
                   cotangents={"output": r.uniform((1, 4, 4, 3)), "lse": r.uniform((1, 4, 4))},
                   flags=["gradient", "softcap", "gqa", "causal"])
    yield gradient("sdpa_lse/grad-004", "sdpa_lse",
                   "Every attribute left out (c = 1/sqrt(16) = 1/4), cotangents on both outputs: "
                   "a default of c = 1 fails.",
                   inputs=qkv(r, (2,), 3, 4, 16, 3),
                   cotangents={"output": r.uniform((2, 3, 3)), "lse": r.uniform((2, 3))},
                   flags=["gradient", "defaults"], omit_defaults=True)
    yield gradient("sdpa_lse/grad-005", "sdpa_lse",
                   "Cross-attention T = 2, S = 6, explicit scale = 0.5, cotangent on the lse "
                   "only: dq = c (W dlse) k, dk = c (W dlse)^T q.",
                   inputs=qkv(r, (), 2, 6, 4, 3), attributes={"scale": 0.5},
                   cotangents={"lse": r.uniform((2,))},
                   flags=["gradient", "scale", "cross-attention"])
