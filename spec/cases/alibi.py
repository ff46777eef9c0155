"""alibi: the (H, T, S) additive attention bias of ALiBi (Press et al. 2022), bottom-right
aligned, with the paper's head slopes (also for H not a power of two)."""

from ..oracle.alibi import alibi_bias as oracle
from ._build import Component, Fn, error, value

COMPONENT = Component("alibi", {
    "alibi_bias": Fn(required=["num_heads", "t", "s"], module="positional", inputs=[],
                     attributes={}, returns=["bias"], oracle=oracle),
})


def bias(id, h, t, s, description, flags):
    return value(f"alibi/{id}", "alibi_bias", description, inputs={},
                 attributes={"num_heads": h, "t": t, "s": s}, flags=["alibi", *flags])


def cases(rng):
    yield bias("heads-8-001", 8, 5, 5,
               "H = 8, T = S = 5: slopes 1/2, 1/4, ..., 1/256 (the paper's example); "
               "bias[h, i, j] = -m_h (i - j).", ["basic"])
    yield bias("heads-4-001", 4, 4, 4,
               "H = 4: slopes 2^-2, 2^-4, 2^-6, 2^-8 (ratio 2^(-8/H), not 2^-1).",
               ["basic", "alibi-slopes"])
    yield bias("heads-6-001", 6, 3, 3,
               "H = 6, not a power of two: slopes of 4 heads (2^-2 .. 2^-8), then the "
               "even-indexed slopes of 8 heads (2^-1, 2^-3); 2^(-8 (h + 1) / 6) is wrong.",
               ["alibi-slopes", "edge"])
    yield bias("heads-3-001", 3, 4, 4,
               "H = 3: slopes 2^-4, 2^-8 (2 heads), then 2^-2 (the first of 4 heads).",
               ["alibi-slopes", "edge"])
    yield bias("heads-12-001", 12, 2, 3,
               "H = 12: 8 slopes 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (irrational).",
               ["alibi-slopes", "t-ne-s"])
    yield bias("heads-1-001", 1, 3, 3, "H = 1: the single slope is 2^-8.", ["edge"])
    yield bias("cache-001", 2, 2, 6,
               "H = 2, T = 2 < S = 6 (a cache of 4 keys): query i sits at position i + 4, "
               "bias[h, i, j] = -m_h (i + 4 - j); top-left positions differ by 4 m_h per row "
               "(invisible after softmax, but not the spec's bias).",
               ["t-ne-s", "alignment"])
    yield bias("t-gt-s-001", 2, 4, 2,
               "T = 4 > S = 2: the first two queries sit before every key (p < 0), so their "
               "biases are positive (a causal mask removes those rows).",
               ["t-ne-s", "alignment", "edge"])

    yield error("alibi/heads-zero-001", "alibi_bias", "num_heads = 0.",
                inputs={}, attributes={"num_heads": 0, "t": 2, "s": 2},
                error="ConfigError", mentions=["num_heads"])
    yield error("alibi/negative-t-001", "alibi_bias", "A negative query length t = -1.",
                inputs={}, attributes={"num_heads": 2, "t": -1, "s": 2},
                error="ConfigError", mentions=["t"])
    yield error("alibi/float-s-001", "alibi_bias", "A non-integer key length s = 2.5.",
                inputs={}, attributes={"num_heads": 2, "t": 2, "s": 2.5},
                error="ConfigError", mentions=["s"])
