"""attention_sinks: sdpa with a learned per-head sink logit in the softmax denominator
(gpt-oss), with windows and grouped-query attention."""

import numpy as np

from ..oracle.attention_sinks import sdpa_sinks as oracle
from ..oracle.masks import causal_mask, sliding_window_mask
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("attention_sinks", {
    "sdpa_sinks": Fn(module="attention", inputs=["q", "k", "v", "sinks", "mask", "bias"],
                     optional=["mask", "bias"],
                     attributes={"scale": None, "num_kv_heads": None, "softcap": None},
                     returns=["output", "weights"], oracle=oracle),
})

NAME = "attention_sinks"


def heads(rng, b, h, h_kv, t, s, k=4, v=3, lo=-2.0, hi=2.0):
    step = 2.0 ** -6 if max(-lo, hi) <= 4 else 2.0 ** -4  # exact in bfloat16
    return {"q": rng.uniform((b, h, t, k), lo, hi, step),
            "k": rng.uniform((b, h_kv, s, k), lo, hi, step),
            "v": rng.uniform((b, h_kv, s, v))}


def cases(rng):
    yield value(f"{NAME}/basic-001", "sdpa_sinks",
                "B = 2, H = 3 heads, T = 3, S = 4, sinks (-1, 0.5, 2): each row's weights sum "
                "to 1 - exp(sink_h) / Z < 1; reading the sink of another head (reversed), or "
                "dropping it, fails.",
                inputs={**heads(rng, 2, 3, 3, 3, 4), "sinks": np.array([-1.0, 0.5, 2.0])},
                flags=["basic", "per-head"])
    yield value(f"{NAME}/gqa-window-001", "sdpa_sinks",
                "gpt-oss's layout: H = 4 query heads over H_kv = 2, a sliding window of 3 keys "
                "(bottom-right, T = S = 5), a sink per query head (not per kv head).",
                inputs={**heads(rng, 1, 4, 2, 5, 5), "sinks": np.array([1.0, -0.5, 0.25, 3.0]),
                        "mask": sliding_window_mask(5, 5, 3)["mask"]},
                attributes={"num_kv_heads": 2}, flags=["gqa", "sliding-window", "per-head"])
    mask = rng.bools((3, 4))
    mask[1] = False
    mask[[0, 2], 0] = True
    yield value(f"{NAME}/fully-masked-001", "sdpa_sinks",
                "Row 1 fully masked: weights and output exactly 0 (the sink takes the whole "
                "row, and it has no value), never NaN.",
                inputs={**heads(rng, 1, 2, 2, 3, 4), "sinks": np.array([0.5, -2.0]),
                        "mask": mask}, flags=["fully-masked", "mask"])
    yield value(f"{NAME}/large-sink-001", "sdpa_sinks",
                "Sinks 6 and -6 against scores within +-2: head 0's weights are near 0 (the "
                "sink absorbs the row), head 1's near sdpa's; causal T = S = 4.",
                inputs={**heads(rng, 1, 2, 2, 4, 4), "sinks": np.array([6.0, -6.0]),
                        "mask": causal_mask(4, 4)["mask"]}, flags=["causal", "per-head"])
    yield value(f"{NAME}/softcap-bias-001", "sdpa_sinks",
                "softcap = 2 and a (3, 5) bias with sinks (1, -1): the sink is neither scaled, "
                "capped nor biased (capping it, 2 tanh(1 / 2), or scaling it by 1/2 differs).",
                inputs={**heads(rng, 1, 2, 2, 3, 5, lo=-4.0, hi=4.0),
                        "sinks": np.array([1.0, -1.0]), "bias": rng.uniform((3, 5), -1, 1)},
                attributes={"softcap": 2.0}, flags=["softcap", "bias"])
    yield value(f"{NAME}/neg-inf-sink-001", "sdpa_sinks",
                "Sinks -inf (no sink: plain sdpa) and 0 (exp 0 = 1 added to the denominator, "
                "as an always-visible key whose value is 0).",
                inputs={**heads(rng, 2, 2, 2, 2, 3), "sinks": np.array([-np.inf, 0.0])},
                flags=["edge", "non-finite"])
    yield value(f"{NAME}/defaults-001", "sdpa_sinks",
                "Every attribute left out (scale 1/sqrt(4), no grouping, no cap), q, k in "
                "[-8, 8] (scores up to 128): a default scale of 1 or a default cap fails.",
                inputs={**heads(Rng(f"{NAME}/defaults"), 1, 2, 2, 3, 4, lo=-8.0, hi=8.0),
                        "sinks": np.array([0.5, 1.5])}, flags=["defaults"], omit_defaults=True)

    x = heads(rng, 1, 2, 2, 3, 4)
    yield error(f"{NAME}/sinks-shape-001", "sdpa_sinks",
                "Three sinks for H = 2 heads.",
                inputs={**x, "sinks": np.zeros(3)}, error="ShapeError", mentions=["sinks", "(3,)"])
    yield error(f"{NAME}/rank-001", "sdpa_sinks",
                "q of rank 2 has no head axis for the sinks.",
                inputs={"q": rng.uniform((3, 4)), "k": rng.uniform((4, 4)),
                        "v": rng.uniform((4, 3)), "sinks": np.zeros(1)},
                error="ShapeError", mentions=["sinks", "(3, 4)"])
    yield error(f"{NAME}/sinks-dtype-001", "sdpa_sinks", "Integer sinks are refused.",
                inputs={**x, "sinks": np.zeros(2, dtype=np.int64)}, error="DTypeError",
                mentions=["sinks"])


def grad_cases(r):
    yield gradient(f"{NAME}/grad-001", "sdpa_sinks",
                   "dq, dk, dv and dsinks, H = 2, T = 3, S = 4: dsink_h = -sum over rows of "
                   "p_sink (dW' . W), summed over the batch and the queries of head h.",
                   inputs={**heads(r, 2, 2, 2, 3, 4), "sinks": np.array([0.5, -1.0])},
                   cotangents={"output": r.uniform((2, 2, 3, 3))}, flags=["gradient", "basic"])
    yield gradient(f"{NAME}/grad-002", "sdpa_sinks",
                   "H = 4 over H_kv = 2 with a sliding window of 2 keys (T = S = 4): dsinks per "
                   "query head, dk and dv summed over each group.",
                   inputs={**heads(r, 1, 4, 2, 4, 4), "sinks": np.array([0.0, 1.0, -1.0, 2.0]),
                           "mask": sliding_window_mask(4, 4, 2)["mask"]},
                   attributes={"num_kv_heads": 2}, cotangents={"output": r.uniform((1, 4, 4, 3))},
                   flags=["gradient", "gqa", "sliding-window"])
    yield gradient(f"{NAME}/grad-003", "sdpa_sinks",
                   "softcap = 1.5, a cotangent on the weights too, a bias: the sink gets the "
                   "weights' cotangent through the denominator, not the cap's tanh'.",
                   inputs={**heads(r, 1, 2, 2, 3, 4), "sinks": np.array([1.0, -0.5]),
                           "bias": r.uniform((3, 4), -1, 1)},
                   attributes={"softcap": 1.5},
                   cotangents={"output": r.uniform((1, 2, 3, 3)), "weights": r.uniform((1, 2, 3, 4))},
                   flags=["gradient", "softcap", "weights-cotangent", "bias"])
    yield gradient(f"{NAME}/grad-004", "sdpa_sinks",
                   "Every attribute left out (K = 16, so c = 1/sqrt(16) = 1/4): a default of "
                   "c = 1 fails.",
                   inputs={**heads(r, 1, 2, 2, 3, 4, k=16), "sinks": np.array([0.25, -0.75])},
                   cotangents={"output": r.uniform((1, 2, 3, 3))},
                   flags=["gradient", "defaults"], omit_defaults=True)
