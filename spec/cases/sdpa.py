"""sdpa: scaled dot-product attention with boolean mask, additive bias, any batch dims."""

import numpy as np

from ..oracle.masks import causal_mask
from ..oracle.sdpa import sdpa as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("sdpa", {
    "sdpa": Fn(module="attention", inputs=["q", "k", "v", "mask", "bias"],
               optional=["mask", "bias"], attributes={"scale": None},
               added={"num_kv_heads": None, "softcap": None},
               returns=["output", "weights"], oracle=oracle),
})

F64_ONLY = ["float64"]


def qkv(rng, batch, t, s, k_width, v_width, lo=-2.0, hi=2.0):
    return {"q": rng.uniform(batch + (t, k_width), lo, hi),
            "k": rng.uniform(batch + (s, k_width), lo, hi),
            "v": rng.uniform(batch + (s, v_width))}


def cases(rng):
    yield value("sdpa/basic-001", "sdpa",
                "q (2, 3, 4), k and v (2, 5, 4), no mask, default scale 1/sqrt(4) = 0.5.",
                inputs=qkv(rng, (2,), 3, 5, 4, 4), flags=["basic", "scale", "wrong-axis"])
    yield value("sdpa/kv-width-001", "sdpa",
                "K = 4 and V = 9 differ: the default scale is 1/sqrt(K) = 1/2, not "
                "1/sqrt(V) = 1/3; output has width V.",
                inputs=qkv(rng, (2,), 3, 4, 4, 9), flags=["k-ne-v", "scale"])
    yield value("sdpa/t-ne-s-001", "sdpa",
                "T = 2 queries against S = 6 keys (cross-attention shape).",
                inputs=qkv(rng, (1,), 2, 6, 4, 3), flags=["t-ne-s"])
    yield value("sdpa/t-ne-s-002", "sdpa",
                "T = 5 queries against S = 2 keys.",
                inputs=qkv(rng, (1,), 5, 2, 4, 3), flags=["t-ne-s"])
    yield value("sdpa/single-key-001", "sdpa",
                "S = 1: every weight is exactly 1 and the output repeats v's only row.",
                inputs=qkv(rng, (2,), 3, 1, 4, 4), flags=["single-key"])
    yield value("sdpa/k1-001", "sdpa",
                "K = 1 (scale 1): scores are products of scalars.",
                inputs=qkv(rng, (1,), 3, 4, 1, 2), flags=["k-1"])
    yield value("sdpa/heads-001", "sdpa",
                "Batch dims (2, 3): q (2, 3, 3, 4) as in (B, H, T, K); an implementation that "
                "divides by sqrt(H*K) = sqrt(12) (the model width) instead of sqrt(K) fails.",
                inputs=qkv(rng, (2, 3), 3, 4, 4, 4), flags=["batch", "heads", "scale"])
    x = qkv(rng, (2, 3), 3, 4, 4, 2)
    yield value("sdpa/broadcast-001", "sdpa",
                "q (2, 3, 3, 4) with k (3, 4, 4) and v (1, 4, 2): batch dims broadcast "
                "between q, k and v.",
                inputs={"q": x["q"], "k": x["k"][0], "v": x["v"][:1, 0]},
                flags=["batch", "broadcast"])
    yield value("sdpa/scale-001", "sdpa",
                "An explicit scale = 1.0 with K = 4: the default 1/sqrt(4) must not be used.",
                inputs=qkv(rng, (2,), 3, 4, 4, 4, -1.5, 1.5), attributes={"scale": 1.0},
                flags=["scale"])
    yield value("sdpa/scale-002", "sdpa",
                "An explicit scale = 0.125 with K = 2 (q, k in [-4, 4]).",
                inputs=qkv(rng, (2,), 3, 4, 2, 3, -4.0, 4.0), attributes={"scale": 0.125},
                flags=["scale"])
    # scores = 0.5 * 2 * k[j, 0]: exactly 1000, 996, 992, 984 (and their negatives)
    big = np.array([1000.0, 996.0, 992.0, 984.0])
    q_big = np.zeros((2, 4))
    q_big[0, 0], q_big[1, 0] = 2.0, -2.0
    k_big = np.zeros((4, 4))
    k_big[:, 0] = big
    yield value("sdpa/large-001", "sdpa",
                "Scores exactly around +1000 (first query) and -1000 (second query), K = 4: "
                "exp overflows / underflows unless the row maximum is subtracted.",
                inputs={"q": q_big, "k": k_big, "v": rng.uniform((4, 3))},
                flags=["overflow", "underflow", "stability"])
    q_tiny = np.array([[1.0]])
    k_tiny = 1.0 + np.arange(4.0)[:, None] * 2.0**-27
    yield value("sdpa/tiny-diff-001", "sdpa",
                "K = 1, scale 1, scores 1 + j*2**-27 (differences ~7.5e-9): the weights differ "
                "from uniform in the 9th digit.",
                inputs={"q": q_tiny, "k": k_tiny, "v": np.array([[1.0], [2.0], [4.0], [8.0]])},
                attributes={"scale": 1.0}, dtypes=F64_ONLY,
                dtype_note="differences of 2**-27 around 1 are not representable in float32, "
                           "float16 or bfloat16", flags=["precision"])
    yield value("sdpa/mask-001", "sdpa",
                "A (3, 5) boolean mask (True = may attend) with some keys masked per row, "
                "broadcast over the batch of 2: masked keys get weight exactly 0.",
                inputs={**qkv(rng, (2,), 3, 5, 4, 4),
                        "mask": np.array([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1], [1, 1, 0, 1, 1]],
                                         dtype=bool)},
                flags=["mask", "mask-polarity", "broadcast"])
    yield value("sdpa/fully-masked-001", "sdpa",
                "Row 1 of each batch is fully masked: its weights and output are exactly 0 "
                "(filling with -1e9 gives the uniform average of v instead; -inf gives NaN).",
                inputs={**qkv(rng, (2,), 3, 4, 4, 3),
                        "mask": np.array([[[1, 1, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1]]],
                                         dtype=bool)},
                flags=["mask", "fully-masked"])
    yield value("sdpa/causal-001", "sdpa",
                "A bottom-right causal mask for T = 3, S = 5 (query i sees keys j <= i + 2): "
                "a top-left mask (torch.tril) gives different rows.",
                inputs={**qkv(rng, (2,), 3, 5, 4, 4), "mask": causal_mask(3, 5)["mask"]},
                flags=["mask", "causal", "t-ne-s"])
    yield value("sdpa/causal-002", "sdpa",
                "Causal self-attention, T = S = 4, mask (1, 4, 4) over a batch of 2.",
                inputs={**qkv(rng, (2,), 4, 4, 4, 4), "mask": causal_mask(4, 4)["mask"][None]},
                flags=["mask", "causal"])
    yield value("sdpa/bias-001", "sdpa",
                "An additive float bias (3, 5) (e.g. ALiBi / relative positions) added after "
                "the scale: softmax(0.5 q k^T + bias); scaling the bias too fails.",
                inputs={**qkv(rng, (2,), 3, 5, 4, 4), "bias": rng.uniform((3, 5), -3.0, 3.0)},
                flags=["bias", "scale"])
    bias = rng.uniform((2, 1, 4), -2.0, 2.0)
    bias[0, 0, 2] = -np.inf
    yield value("sdpa/bias-mask-001", "sdpa",
                "Bias (2, 1, 4) with one -inf entry (weight 0, like a masked key) together with "
                "a boolean mask; row 2 of batch 1 is fully masked (zero output).",
                inputs={**qkv(rng, (2,), 3, 4, 4, 2), "bias": bias,
                        "mask": np.array([[[1, 1, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1]],
                                          [[0, 1, 1, 1], [1, 1, 0, 1], [0, 0, 0, 0]]],
                                         dtype=bool)},
                flags=["bias", "mask", "non-finite", "fully-masked"])
    yield value("sdpa/rank2-001", "sdpa",
                "No batch dims at all: q (4, 4), k (3, 4), v (3, 5).",
                inputs=qkv(rng, (), 4, 3, 4, 5), flags=["rank-2"])

    yield error("sdpa/rank-001", "sdpa", "q of rank 1 has no query axis.",
                inputs={"q": rng.uniform((4,)), "k": rng.uniform((3, 4)),
                        "v": rng.uniform((3, 4))},
                error="ShapeError", mentions=["q", "(4,)"])
    yield error("sdpa/key-width-001", "sdpa", "q has K = 4 but k has K = 3.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 3)),
                        "v": rng.uniform((2, 5, 4))},
                error="ShapeError", mentions=["q.shape[-1]", "k.shape[-1]"])
    yield error("sdpa/key-length-001", "sdpa", "k has S = 5 keys but v has 4 rows.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 4)),
                        "v": rng.uniform((2, 4, 4))},
                error="ShapeError", mentions=["k.shape[-2]", "v.shape[-2]"])
    yield error("sdpa/batch-001", "sdpa", "Batch dims 2 (q) and 3 (k) do not broadcast.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((3, 5, 4)),
                        "v": rng.uniform((3, 5, 4))},
                error="ShapeError", mentions=["batch"])
    yield error("sdpa/mask-shape-001", "sdpa",
                "A (3, 4) mask for scores of shape (2, 3, 5) does not broadcast.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 4)),
                        "v": rng.uniform((2, 5, 4)), "mask": np.ones((3, 4), dtype=bool)},
                error="ShapeError", mentions=["mask", "(3, 4)"])
    yield error("sdpa/mask-dtype-001", "sdpa",
                "An integer 0/1 mask is refused: polarity is never guessed.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 4)),
                        "v": rng.uniform((2, 5, 4)), "mask": np.ones((3, 5), dtype=np.int64)},
                error="DTypeError", mentions=["mask"])
    yield error("sdpa/bias-shape-001", "sdpa",
                "A (2, 5, 3) bias for scores of shape (2, 3, 5) (transposed) does not broadcast.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 4)),
                        "v": rng.uniform((2, 5, 4)), "bias": rng.uniform((2, 5, 3))},
                error="ShapeError", mentions=["bias", "(2, 5, 3)"])
    yield error("sdpa/bad-scale-001", "sdpa", "scale given as a string.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": rng.uniform((2, 5, 4)),
                        "v": rng.uniform((2, 5, 4))}, attributes={"scale": "0.5"},
                error="ConfigError", mentions=["scale"])
    yield from defaults_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))
    yield from gqa_cases(Rng(f"{COMPONENT.id}/gqa"))
    yield from softcap_cases(Rng(f"{COMPONENT.id}/softcap"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("sdpa/defaults-001", "sdpa",
                "scale left out (default None = 1/sqrt(K) = 1/2, K = 4): a default scale of 1 "
                "fails.",
                inputs=qkv(rd, (2,), 3, 5, 4, 4), flags=["defaults"], omit_defaults=True)


def _edges(rng):
    """Empty axes, non-finite inputs, attribute checks (their own number stream)."""
    inf, nan = np.inf, np.nan
    yield value("sdpa/empty-keys-001", "sdpa",
                "S = 0 keys: weights (2, 3, 0) and a zero output (2, 3, 5): a row with nothing "
                "to attend yields zeros.",
                inputs={"q": rng.uniform((2, 3, 4)), "k": np.zeros((2, 0, 4)),
                        "v": np.zeros((2, 0, 5))}, flags=["empty-axis", "fully-masked", "edge"])
    yield value("sdpa/empty-queries-001", "sdpa",
                "T = 0 queries: output (2, 0, 5) and weights (2, 0, 3), both empty.",
                inputs={"q": np.zeros((2, 0, 4)), "k": rng.uniform((2, 3, 4)),
                        "v": rng.uniform((2, 3, 5))}, flags=["empty-axis", "edge"])
    x = qkv(rng, (2,), 4, 4, 4, 3)
    # key 3 is masked for queries 0..2 (causal), key 2 for queries 0..1
    x["k"][0, 3] = nan
    x["v"][0, 3] = [nan, inf, -inf]
    x["v"][0, 2, 1] = inf
    x["v"][1, 3] = nan
    bias = rng.uniform((2, 4, 4), -1.0, 1.0)
    bias[1, 0, 2] = nan  # at a masked position
    mask = np.tril(np.ones((4, 4), dtype=bool))
    mask[3] = [True, True, False, False]  # query 3 keeps neither key 2 nor key 3
    yield value("sdpa/masked-nan-001", "sdpa",
                "NaN/inf in the keys, values and bias of masked keys only: every output is "
                "finite and equals the output without them (a weight of 0 leaves the key out; "
                "weights @ v would give 0 * NaN = NaN).",
                inputs={**x, "bias": bias, "mask": mask},
                flags=["masked-nan", "non-finite", "mask", "causal", "bias"])
    x = qkv(rng, (1,), 4, 4, 4, 3)
    x["k"][0, 3, 0] = nan  # kept by query 3 only: its weights and output are NaN
    x["v"][0, 2] = [inf, 1.0, -inf]  # kept by queries 2 and 3
    x["v"][0, 1, 1] = nan  # kept by queries 1..3
    yield value("sdpa/nan-propagation-001", "sdpa",
                "Causal T = S = 4. A NaN in kept key 3 makes query 3's weights and output NaN; "
                "+inf/-inf/NaN in kept values give +inf/-inf/NaN in those output columns of "
                "the queries that keep them (never of query 0).",
                inputs={**x, "mask": causal_mask(4, 4)["mask"]},
                flags=["nan-propagation", "non-finite", "causal"])
    bias = rng.uniform((3, 4), -1.0, 1.0)
    bias[0, [0, 2]] = inf
    bias[1, 3] = inf
    yield value("sdpa/pos-inf-bias-001", "sdpa",
                "A +inf bias: the +inf keys of a row share its weight equally (1/2 and 1/2, or "
                "1) and the other keys get 0; row 2 is ordinary.",
                inputs={**qkv(rng, (2,), 3, 4, 4, 3), "bias": bias},
                flags=["pos-inf", "non-finite", "bias"])
    yield value("sdpa/inexact-scale-001", "sdpa",
                "scale = 0.1, not exact in float16 or bfloat16: the attribute is the exact "
                "Python float 0.1 (a backend may round it once to the working dtype; reading "
                "it as 0.125 or 0.0999 fails at float64).",
                inputs=qkv(rng, (2,), 3, 4, 4, 3, -4.0, 4.0), attributes={"scale": 0.1},
                flags=["inexact-attribute", "scale"])
    yield error("sdpa/bad-scale-002", "sdpa", "scale = True: a bool is not a number here.",
                inputs=qkv(rng, (2,), 3, 4, 4, 3), attributes={"scale": True},
                error="ConfigError", mentions=["scale", "True"])



def _qkv(rng, b, h, h_kv, t, s, k=4, v=3):
    return {"q": rng.uniform((b, h, t, k)), "k": rng.uniform((b, h_kv, s, k)),
            "v": rng.uniform((b, h_kv, s, v))}


def gqa_cases(rng):
    """Grouped- and multi-query attention (num_kv_heads, added in 1.1.0), own stream."""
    def gqa(id, description, qkv, h_kv, flags, **extra):
        return value(f"sdpa/{id}", "sdpa", description, inputs={**qkv, **extra},
                     attributes={"num_kv_heads": h_kv}, flags=["gqa", *flags])
    yield gqa("gqa-001", "H = 4 query heads over H_kv = 2 kv heads (T = 3, S = 4, K = 4, "
              "V = 3): heads 0, 1 read kv head 0 and heads 2, 3 kv head 1; the grouping "
              "h % H_kv (heads 0, 2 on kv head 0) differs.",
              _qkv(rng, 1, 4, 2, 3, 4), 2, ["basic", "head-grouping"])
    yield gqa("gqa-002", "H = 6 over H_kv = 3 (groups of 2), B = 2, with a causal mask.",
              _qkv(rng, 2, 6, 3, 4, 4), 3, ["head-grouping", "causal"],
              mask=causal_mask(4, 4)["mask"])
    yield gqa("mqa-001", "Multi-query attention: H = 4 query heads share H_kv = 1 kv head.",
              _qkv(rng, 2, 4, 1, 3, 5), 1, ["mqa"])
    yield gqa("gqa-equal-001", "num_kv_heads = H = 3: ordinary multi-head sdpa.",
              _qkv(rng, 1, 3, 3, 2, 3), 3, ["edge"])
    yield gqa("gqa-cache-001", "One decoding step (T = 1) over a cache of S = 5 keys, H = 8 "
              "over H_kv = 2 (groups of 4), bottom-right causal mask (every key visible).",
              _qkv(rng, 1, 8, 2, 1, 5), 2, ["decoding", "t-ne-s", "head-grouping"],
              mask=causal_mask(1, 5)["mask"])
    yield gqa("gqa-bias-001", "H = 4 over H_kv = 2 with a per-query-head (4, 3, 3) additive "
              "bias (like ALiBi's): the bias follows the query heads, not the kv heads.",
              _qkv(rng, 1, 4, 2, 3, 3), 2, ["bias", "head-grouping"],
              bias=rng.uniform((4, 3, 3), -1, 1))

    yield error("sdpa/gqa-divide-001", "sdpa", "num_kv_heads = 3 does not divide H = 4.",
                inputs=_qkv(rng, 1, 4, 3, 2, 2), attributes={"num_kv_heads": 3},
                error="ConfigError", mentions=["num_kv_heads", "4"])
    yield error("sdpa/gqa-kv-heads-001", "sdpa",
                "num_kv_heads = 2 but k has 4 heads on axis -3.",
                inputs={**_qkv(rng, 1, 4, 2, 2, 3), "k": rng.uniform((1, 4, 3, 4))},
                attributes={"num_kv_heads": 2}, error="ShapeError",
                mentions=["k", "(1, 4, 3, 4)"])
    yield error("sdpa/gqa-zero-001", "sdpa", "num_kv_heads = 0.",
                inputs=_qkv(rng, 1, 2, 1, 2, 2), attributes={"num_kv_heads": 0},
                error="ConfigError", mentions=["num_kv_heads"])
    yield error("sdpa/gqa-rank-001", "sdpa",
                "num_kv_heads with q of rank 2 (no head axis).",
                inputs={"q": rng.uniform((3, 4)), "k": rng.uniform((3, 4)),
                        "v": rng.uniform((3, 4))},
                attributes={"num_kv_heads": 1}, error="ShapeError", mentions=["q", "(3, 4)"])


def softcap_cases(rng):
    """Logit soft-capping (softcap, added in 1.1.0), own stream: scores = c tanh(scale q k^T
    / c) + bias, then the mask (Gemma 2's and ONNX Attention's order)."""
    def capped(id, description, inputs, cap, flags, **attributes):
        return value(f"sdpa/{id}", "sdpa", description, inputs=inputs,
                     attributes={"softcap": cap, **attributes}, flags=["softcap", *flags])
    yield capped("softcap-001", "softcap = 5 with q, k in [-4, 4], K = 4 (scale 1/2): scaled "
                 "scores up to 32 are capped to (-5, 5); tanh without the outer c, or no cap, "
                 "gives other weights.",
                 qkv(rng, (2,), 3, 5, 4, 3, -4.0, 4.0), 5.0, ["basic", "saturation"])
    yield capped("softcap-scale-001", "softcap = 4 with an explicit scale = 0.25 (K = 4, q, k "
                 "in [-4, 4]): the cap applies to the scaled scores; capping q k^T before the "
                 "scale gives at most 4 * 0.25 = 1.",
                 qkv(rng, (2,), 3, 4, 4, 3, -4.0, 4.0), 4.0, ["scale"], scale=0.25)
    yield capped("softcap-bias-001", "softcap = 2 and an additive (3, 5) bias in [-4, 4]: the "
                 "bias is added after the cap (softmax(2 tanh(s / 2) + bias)); capping s + "
                 "bias differs.",
                 {**qkv(rng, (2,), 3, 5, 4, 3, -4.0, 4.0), "bias": rng.uniform((3, 5), -4, 4)},
                 2.0, ["bias"])
    yield capped("softcap-mask-001", "softcap = 3 with a (3, 4) mask whose row 1 is fully "
                 "masked: masked keys keep weight 0 (capping after a -inf fill makes them -3, "
                 "weight > 0), the masked row is zero.",
                 {**qkv(rng, (2,), 3, 4, 4, 3, -4.0, 4.0),
                  "mask": np.array([[1, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 0]], dtype=bool)},
                 3.0, ["mask", "fully-masked"])
    yield capped("softcap-gemma-001", "softcap = 50 (Gemma 2's attn_logit_softcapping) with "
                 "scale 1 and q, k in [-8, 8], K = 4: scores up to 256, from the near-linear "
                 "middle to saturation.",
                 {"q": rng.uniform((1, 4, 4), -8, 8, step=2.0**-4),
                  "k": rng.uniform((1, 6, 4), -8, 8, step=2.0**-4),
                  "v": rng.uniform((1, 6, 3))}, 50.0, ["saturation"], scale=1.0)
    yield capped("softcap-small-001", "softcap = 16 with scores |s| <= 2: close to the "
                 "identity (c tanh(s / c) = s - s^3 / 768 + ...); tanh(s / c) alone is 16 "
                 "times too small.",
                 qkv(rng, (2,), 3, 4, 4, 3), 16.0, [])
    yield capped("softcap-gqa-001", "softcap = 5 with num_kv_heads: H = 4 query heads over "
                 "H_kv = 2 (K = 4, q, k in [-2, 2]) and a causal mask.",
                 {**_qkv(rng, 1, 4, 2, 4, 4), "mask": causal_mask(4, 4)["mask"]}, 5.0,
                 ["gqa", "causal"], num_kv_heads=2)
    yield capped("softcap-inexact-001", "softcap = 30.1, not exact in float16 or bfloat16: "
                 "the attribute is the exact Python float (reading it as 30 or 30.125 fails "
                 "at float64).",
                 qkv(rng, (2,), 3, 4, 4, 3, -4.0, 4.0), 30.1, ["inexact-attribute"],
                 scale=2.0)

    yield value("sdpa/defaults-002", "sdpa",
                "Every attribute left out (softcap None: no capping; scale 1/sqrt(4)) with "
                "q, k in [-8, 8]: scores up to 128, so a default cap (Gemma 2's 50, or 30) "
                "fails.",
                inputs={"q": rng.uniform((2, 3, 4), -8, 8, step=2.0**-4),
                        "k": rng.uniform((2, 5, 4), -8, 8, step=2.0**-4),
                        "v": rng.uniform((2, 5, 3))}, flags=["defaults", "softcap"],
                omit_defaults=True)

    x = qkv(rng, (2,), 3, 4, 4, 3)
    for id, cap, what in (("zero", 0.0, "softcap = 0 (s / c is undefined; ONNX's 0 = off is "
                                        "None here)."),
                          ("negative", -50.0, "A negative softcap = -50."),
                          ("string", "50", "softcap given as a string '50'."),
                          ("bool", True, "softcap = True: a bool is not a number here.")):
        yield error(f"sdpa/softcap-{id}-001", "sdpa", what, inputs=x,
                    attributes={"softcap": cap}, error="ConfigError", mentions=["softcap"])


def _grad(r):
    q, k, v = r.uniform((2, 3, 4)), r.uniform((2, 5, 4)), r.uniform((2, 5, 3))
    yield gradient("sdpa/grad-001", "sdpa",
                   "dq, dk, dv for a (2, 3, 4) query, 5 keys and values of width 3, with a "
                   "cotangent on the output only: dq = c dS k and dk = c dS^T q, so a missing "
                   "transpose or a missing scale c fails.",
                   inputs={"q": q, "k": k, "v": v}, cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "basic"])
    yield gradient("sdpa/grad-002", "sdpa",
                   "Cotangents on both the output and the attention weights: the weights' "
                   "cotangent adds to dO v^T before the softmax backward.",
                   inputs={"q": r.uniform((1, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 2))},
                   cotangents={"output": r.uniform((1, 4, 2)), "weights": r.uniform((1, 4, 4))},
                   flags=["gradient", "weights-cotangent"])
    mask = r.bools((3, 5))
    mask[:, 0] = True
    yield gradient("sdpa/grad-003", "sdpa",
                   "A (3, 5) mask and a (3, 5) bias broadcast over a (2, 2) batch of heads: "
                   "dbias = dS summed over the batch axes; masked keys get no gradient in dk "
                   "and dv from their row.",
                   inputs={"q": r.uniform((2, 2, 3, 4)), "k": r.uniform((2, 2, 5, 4)),
                           "v": r.uniform((2, 2, 5, 4)), "mask": mask,
                           "bias": r.uniform((3, 5))},
                   cotangents={"output": r.uniform((2, 2, 3, 4))},
                   flags=["gradient", "mask", "bias", "broadcast"])
    yield gradient("sdpa/grad-004", "sdpa",
                   "Cross-attention with T = 2 queries and S = 6 keys (dq and dk have different "
                   "shapes, so swapping them fails) and scale = 0.5 given explicitly.",
                   inputs={"q": r.uniform((2, 4)), "k": r.uniform((6, 4)),
                           "v": r.uniform((6, 3))},
                   attributes={"scale": 0.5}, cotangents={"output": r.uniform((2, 3))},
                   flags=["gradient", "scale", "cross-attention"])
    causal = np.tril(np.ones((4, 4), dtype=bool))
    yield gradient("sdpa/grad-005", "sdpa",
                   "A causal (4, 4) mask and a full (4, 4) bias: dbias is dS itself, 0 above "
                   "the diagonal.",
                   inputs={"q": r.uniform((4, 3)), "k": r.uniform((4, 3)), "v": r.uniform((4, 3)),
                           "mask": causal, "bias": r.uniform((4, 4))},
                   cotangents={"output": r.uniform((4, 3)), "weights": r.uniform((4, 4))},
                   flags=["gradient", "causal", "bias"])


def _grad_gqa_softcap(r):
    yield gradient("sdpa/grad-006", "sdpa",
                   "num_kv_heads = 2 under H = 4 query heads (groups of 2): dk and dv of a kv "
                   "head are the sums over the two query heads of its group; keeping one head's "
                   "share, or pairing head h with kv head h % 2, fails.",
                   inputs={"q": r.uniform((2, 4, 3, 4)), "k": r.uniform((2, 2, 5, 4)),
                           "v": r.uniform((2, 2, 5, 3))},
                   attributes={"num_kv_heads": 2}, cotangents={"output": r.uniform((2, 4, 3, 3))},
                   flags=["gradient", "gqa"])
    yield gradient("sdpa/grad-007", "sdpa",
                   "Multi-query attention (num_kv_heads = 1 under H = 3) with a cotangent on the "
                   "weights too: dk and dv sum over every query head.",
                   inputs={"q": r.uniform((3, 4, 2)), "k": r.uniform((1, 4, 2)),
                           "v": r.uniform((1, 4, 3))},
                   attributes={"num_kv_heads": 1},
                   cotangents={"output": r.uniform((3, 4, 3)), "weights": r.uniform((3, 4, 4))},
                   flags=["gradient", "mqa", "weights-cotangent"])
    yield gradient("sdpa/grad-008", "sdpa",
                   "softcap = 1.5 on scaled scores up to 8 in size: ds = dS (1 - tanh^2(s / 1.5)) "
                   "before dq and dk; leaving out tanh' (ds = dS) fails.",
                   inputs={"q": r.uniform((2, 3, 4)), "k": r.uniform((2, 5, 4)),
                           "v": r.uniform((2, 5, 3))},
                   attributes={"softcap": 1.5}, cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "softcap"])
    mask = r.bools((4, 4))
    mask[:, 0] = True
    yield gradient("sdpa/grad-009", "sdpa",
                   "softcap = 2, num_kv_heads = 1 under H = 2, a (4, 4) mask and bias and a "
                   "cotangent on the weights: the bias is added after the cap, so dbias = dS "
                   "(not ds), while dq, dk use ds.",
                   inputs={"q": r.uniform((2, 4, 3)), "k": r.uniform((1, 4, 3)),
                           "v": r.uniform((1, 4, 2)), "mask": mask, "bias": r.uniform((4, 4))},
                   attributes={"softcap": 2.0, "num_kv_heads": 1},
                   cotangents={"output": r.uniform((2, 4, 2)), "weights": r.uniform((2, 4, 4))},
                   flags=["gradient", "softcap", "mqa", "mask", "bias"])


def grad_cases(r):
    yield from _grad(r)
    yield from _grad_gqa_softcap(r)
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("sdpa/grad-010", "sdpa",
                   "scale (and num_kv_heads, softcap) left out: c = 1/sqrt(K) = 1/4 for K = 16, "
                   "on (2, 3, 16) queries and 4 keys in [-2, 2]; a default of c = 1 fails.",
                   inputs={"q": r.uniform((2, 3, 16)), "k": r.uniform((2, 4, 16)),
                           "v": r.uniform((2, 4, 3))},
                   cotangents={"output": r.uniform((2, 3, 3))},
                   flags=["gradient", "defaults"], omit_defaults=True)
