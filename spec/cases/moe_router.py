"""moe_router: scores (softmax or sigmoid) of the router logits, the top_k experts (within the
best groups, by scores plus a selection-only bias), their weights (renormalised, scaled)."""

import numpy as np

from ..oracle.moe_router import moe_router as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("moe_router", {
    "moe_router": Fn(module="moe", inputs=["logits", "correction_bias"], optional=["correction_bias"],
                     required=["top_k"],
                     attributes={"scoring": "softmax", "renormalize": False, "eps": 1e-20,
                                 "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0},
                     added={"group_score": "sum_top2"},
                     returns=["weights", "indices"], oracle=oracle),
})

DEEPSEEK = {"scoring": "sigmoid", "renormalize": True, "eps": 1e-20, "n_group": 4,
            "topk_group": 2, "routed_scaling_factor": 2.5}


def _distinct(rng, n, e, spread=4.0):
    """(n, e) logits, a permutation of e levels `spread / e` apart per row: no near-ties."""
    levels = np.arange(e, dtype=np.float64) * (spread / e) - spread / 2
    return np.stack([levels[np.argsort(rng.integers(0, 2**30, (e,)), kind="stable")] for _ in range(n)])


def cases(rng):
    yield value("moe_router/mixtral-001", "moe_router",
                "Mixtral: softmax over 8 experts, top 2, renormalised (w = p_I / sum p_I): "
                "without the renormalisation the weights are about half as large.",
                inputs={"logits": _distinct(rng, 5, 8, 8.0)},
                attributes={"top_k": 2, "renormalize": True}, flags=["basic"])
    yield value("moe_router/qwen-001", "moe_router",
                "Qwen2-MoE with norm_topk_prob = False: softmax over 8 experts, top 4, the "
                "probabilities kept as they are (renormalising scales them up).",
                inputs={"logits": _distinct(rng, 4, 8, 6.0)}, attributes={"top_k": 4},
                flags=["basic"])
    yield value("moe_router/olmoe-001", "moe_router",
                "OLMoE: softmax over 16 experts, top 8, not renormalised; a softmax over the "
                "8 kept logits only (renormalised) differs by the mass of the other 8.",
                inputs={"logits": _distinct(rng, 3, 16, 8.0)}, attributes={"top_k": 8},
                flags=["basic"])
    yield value("moe_router/deepseek-001", "moe_router",
                "DeepSeek-V3 in small: sigmoid scores, 16 experts in 4 groups, the best 2 "
                "groups (each scored by the sum of its top two), top 4, renormalised with "
                "eps 1e-20, times 2.5.",
                inputs={"logits": _distinct(rng, 4, 16, 8.0)}, attributes={"top_k": 4, **DEEPSEEK},
                flags=["basic"])
    # group 0 holds the single largest score but group 1 has the larger top-two sum
    bias = np.array([0.5, 0.0, 0.0, 0.0, 0.25, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    yield value("moe_router/bias-001", "moe_router",
                "Sigmoid scores with a correction bias: the bias moves experts 0, 4 and 5 into "
                "the choice but their weights are their sigmoid scores (the bias never enters "
                "the weights); not renormalised, scale 1.",
                inputs={"logits": np.array([[-2.0, 1.0, 2.0, 0.5, -1.0, -1.5, 1.5, -0.5,
                                             0.0, -3.0, 3.0, 0.25]] * 2) * np.array([[1], [-1]]),
                        "correction_bias": bias},
                attributes={"top_k": 4, "scoring": "sigmoid"}, flags=["basic"])
    x = np.array([[3.0, 0.0, 2.5, 2.5, 0.0, 0.0, 2.5, 1.0],
                  [4.0, 3.5, 0.0, 0.0, 0.0, 0.0, 1.0, 3.0]])
    yield value("moe_router/groups-001", "moe_router",
                "Groups scored by the sum of their top two: 8 experts in 4 groups of 2, the "
                "best group; row 0: group 0 holds the largest score (3) but group 1 (2.5 + 2.5) "
                "wins; row 1: group 0 (4 + 3.5). Scoring a group by its max picks group 0 in "
                "row 0.",
                inputs={"logits": x},
                attributes={"top_k": 2, "scoring": "sigmoid", "n_group": 4, "topk_group": 1,
                            "renormalize": True},
                flags=["edge"])
    yield value("moe_router/ties-001", "moe_router",
                "Ties: equal logits; the lowest expert ids are chosen, listed in ascending id "
                "after any larger score (row 0: all equal -> 0, 1, 2; row 1: 5 largest, then "
                "1, 3 of the tied rest).",
                inputs={"logits": np.array([[1.0] * 6, [0.0, 1.0, 0.0, 1.0, 0.0, 2.0]])},
                attributes={"top_k": 3}, flags=["edge"])
    yield value("moe_router/ties-002", "moe_router",
                "Tied groups: 8 experts in 4 groups of 2 with equal group scores; the lowest "
                "group ids (0 and 1) are kept, then the lowest expert ids among tied scores.",
                inputs={"logits": np.array([[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]])},
                attributes={"top_k": 3, "scoring": "sigmoid", "n_group": 4, "topk_group": 2},
                flags=["edge"])
    yield value("moe_router/top-1-001", "moe_router",
                "Switch Transformer: top 1 of 8 by softmax, not renormalised (the weight is the "
                "probability; renormalised it would be 1).",
                inputs={"logits": _distinct(rng, 6, 8, 6.0)}, attributes={"top_k": 1},
                flags=["edge"])
    yield value("moe_router/defaults-001", "moe_router",
                "Every attribute but top_k left out: softmax, not renormalised, one group, "
                "scale 1; top 2 of 6.",
                inputs={"logits": _distinct(rng, 3, 6, 6.0)}, attributes={"top_k": 2},
                omit_defaults=True, flags=["defaults"])

    x = _distinct(rng, 2, 8)
    yield error("moe_router/top-k-large-001", "moe_router", "top_k = 9 of 8 experts.",
                inputs={"logits": x}, attributes={"top_k": 9}, error="ConfigError",
                mentions=["top_k"])
    yield error("moe_router/scoring-001", "moe_router", "scoring = 'relu' is not a scoring.",
                inputs={"logits": x}, attributes={"top_k": 2, "scoring": "relu"},
                error="ConfigError", mentions=["scoring"])
    yield error("moe_router/n-group-001", "moe_router", "n_group = 3 does not divide 8 experts.",
                inputs={"logits": x}, attributes={"top_k": 2, "n_group": 3},
                error="ConfigError", mentions=["n_group", "8"])
    yield error("moe_router/bias-shape-001", "moe_router",
                "A correction bias of 6 for 8 experts.",
                inputs={"logits": x, "correction_bias": np.zeros(6)}, attributes={"top_k": 2},
                error="ShapeError", mentions=["correction_bias", "(8,)"])
    yield error("moe_router/rank-001", "moe_router", "Rank-3 logits (flatten the tokens first).",
                inputs={"logits": x.reshape(1, 2, 8)}, attributes={"top_k": 2},
                error="ShapeError", mentions=["logits"])
    yield from v2_cases(Rng(f"{COMPONENT.id}/v2"))


def grad_cases(r):
    yield gradient("moe_router/grad-001", "moe_router",
                   "Mixtral: softmax, top 2 of 8, renormalised; the gradient reaches every "
                   "logit through the softmax but only the kept weights carry a cotangent.",
                   inputs={"logits": _distinct(r, 3, 8, 6.0)},
                   attributes={"top_k": 2, "renormalize": True},
                   cotangents={"weights": r.uniform((3, 2))}, flags=["gradient"])
    yield gradient("moe_router/grad-002", "moe_router",
                   "Softmax, top 3 of 8, not renormalised.",
                   inputs={"logits": _distinct(r, 3, 8, 6.0)}, attributes={"top_k": 3},
                   cotangents={"weights": r.uniform((3, 3))}, flags=["gradient"])
    yield gradient("moe_router/grad-003", "moe_router",
                   "DeepSeek-V3 in small: sigmoid, 4 groups, renormalised, scale 2.5: the "
                   "experts not kept get a zero gradient (sigmoid scores are independent).",
                   inputs={"logits": _distinct(r, 2, 16, 8.0)},
                   attributes={"top_k": 4, **DEEPSEEK},
                   cotangents={"weights": r.uniform((2, 4))}, flags=["gradient"])
    yield gradient("moe_router/grad-004", "moe_router",
                   "Sigmoid, top 2 of 6, not renormalised, scale 1.5.",
                   inputs={"logits": _distinct(r, 3, 6, 6.0)},
                   attributes={"top_k": 2, "scoring": "sigmoid", "routed_scaling_factor": 1.5},
                   cotangents={"weights": r.uniform((3, 2))}, flags=["gradient"])
    yield gradient("moe_router/grad-005", "moe_router",
                   "Defaults left out: softmax top 2 of 6, not renormalised.",
                   inputs={"logits": _distinct(r, 2, 6, 6.0)}, attributes={"top_k": 2},
                   cotangents={"weights": r.uniform((2, 2))}, omit_defaults=True,
                   flags=["gradient", "defaults"])
    yield from v2_grad_cases(Rng(f"{COMPONENT.id}/grad-v2"))


# -- group_score "max": DeepSeek-V2's group_limited_greedy (its own streams) -----------------

# DeepSeek-V2 in small (V2: 160 experts in 8 groups, the best 3, top 6, softmax, not
# renormalised, routed_scaling_factor 16): 16 experts in 4 groups, the best 2, top 4
V2 = {"scoring": "softmax", "renormalize": False, "n_group": 4, "topk_group": 2,
      "routed_scaling_factor": 16.0, "group_score": "max"}


def _max_differs(rng, n, e, spread, attrs):
    """_distinct logits (n, e) redrawn until, in some row, scoring a group by its max picks
    other groups than by the sum of its top two (so each rule fails the other's vector), and
    in some row the choice differs from the ungrouped top_k (so dropping groups fails)."""
    from ..oracle.moe_router import select
    for _ in range(200):
        x = _distinct(rng, n, e, spread)
        a = (attrs["top_k"], attrs["n_group"], attrs["topk_group"])
        chosen = [set(select(list(row), *a, "max")) for row in x]
        if any(c != set(select(list(row), *a, "sum_top2")) for c, row in zip(chosen, x)) and \
                any(c != set(select(list(row), a[0], 1, 1)) for c, row in zip(chosen, x)):
            return x
    raise AssertionError("no differing draw")


def v2_cases(r):
    x = np.array([[3.0, 0.0, 2.5, 2.5, 0.0, 0.0, 2.5, 1.0],
                  [4.0, 3.5, 0.0, 0.0, 0.0, 0.0, 1.0, 3.0]])
    yield value("moe_router/v2-groups-001", "moe_router",
                "group_score 'max' (DeepSeek-V2's group_limited_greedy): 8 experts in 4 groups "
                "of 2 scored by their largest softmax score, the best group, top 2; row 0: "
                "group 0 (max 3) where 'sum_top2' picks group 1 (2.5 + 2.5); row 1: group 0.",
                inputs={"logits": x},
                attributes={"top_k": 2, "n_group": 4, "topk_group": 1, "group_score": "max"},
                flags=["edge"])
    a = {"top_k": 4, **V2}
    yield value("moe_router/v2-001", "moe_router",
                "DeepSeek-V2 in small: softmax over 16 experts in 4 groups scored by their "
                "max, the best 2 groups, top 4, not renormalised, times 16 (some row picks "
                "other groups than the sum of the top two would).",
                inputs={"logits": _max_differs(r, 4, 16, 8.0, a)}, attributes=a,
                flags=["basic"])
    yield value("moe_router/v2-lite-001", "moe_router",
                "DeepSeek-V2-Lite (topk_method 'greedy': one group): softmax over 16 experts, "
                "top 6, not renormalised, scale 1; group_score 'max' changes nothing with one "
                "group.",
                inputs={"logits": _distinct(r, 3, 16, 8.0)},
                attributes={"top_k": 6, "group_score": "max"}, flags=["basic"])
    yield value("moe_router/v2-ties-001", "moe_router",
                "Tied group maxima: 8 experts in 4 groups of 2 whose largest scores are equal "
                "(groups 1 and 3 have the larger second score, which 'max' ignores): the "
                "lowest group ids 0 and 1 are kept, top 3.",
                inputs={"logits": np.array([[2.0, 0.0, 2.0, 1.5, 2.0, 0.0, 2.0, 1.5]])},
                attributes={"top_k": 3, "n_group": 4, "topk_group": 2, "group_score": "max"},
                flags=["edge"])
    yield value("moe_router/v2-size-1-001", "moe_router",
                "group_score 'max' with groups of one expert (n_group = E = 6, the best 3 "
                "groups): the top 2 of the 3 largest, i.e. the plain top 2 ('sum_top2' needs "
                "groups of 2).",
                inputs={"logits": _distinct(r, 3, 6, 6.0)},
                attributes={"top_k": 2, "n_group": 6, "topk_group": 3, "group_score": "max"},
                flags=["edge"])
    bias = np.array([0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0])
    yield value("moe_router/v2-bias-001", "moe_router",
                "group_score 'max' on selection scores with a correction bias (sigmoid, "
                "renormalised): the bias lifts group 2's max (expert 4) so that group is "
                "chosen, the weights stay the sigmoid scores.",
                inputs={"logits": np.array([[1.0, -1.0, 0.75, 0.5, 0.25, -2.0, -1.0, -0.5],
                                            [-1.0, 1.0, 0.5, 0.75, 0.5, -1.0, 0.0, 0.25]]),
                        "correction_bias": bias},
                attributes={"top_k": 2, "scoring": "sigmoid", "renormalize": True, "n_group": 4,
                            "topk_group": 1, "group_score": "max"},
                flags=["bias"])
    x = _distinct(r, 2, 8)
    yield error("moe_router/group-score-001", "moe_router",
                "group_score = 'sum' (the names are 'sum_top2' and 'max').",
                inputs={"logits": x}, attributes={"top_k": 2, "n_group": 4, "group_score": "sum"},
                error="ConfigError", mentions=["group_score", "sum"])
    yield error("moe_router/group-score-size-001", "moe_router",
                "n_group = 8 of 8 experts with group_score 'sum_top2': a group needs two "
                "experts for the sum of its top two.",
                inputs={"logits": x}, attributes={"top_k": 1, "n_group": 8},
                error="ConfigError", mentions=["n_group", "8", "sum_top2"])
    yield error("moe_router/group-score-top-k-001", "moe_router",
                "group_score 'max', groups of 1 (n_group = 8), the best 2 groups hold 2 "
                "experts: top_k = 3 is too many.",
                inputs={"logits": x},
                attributes={"top_k": 3, "n_group": 8, "topk_group": 2, "group_score": "max"},
                error="ConfigError", mentions=["top_k", "3"])


def v2_grad_cases(r):
    a = {"top_k": 4, **V2, "routed_scaling_factor": 2.0}
    yield gradient("moe_router/grad-006", "moe_router",
                   "DeepSeek-V2 in small: softmax, 4 groups scored by their max, the best 2, "
                   "top 4, not renormalised, times 2: the gradient reaches every logit through "
                   "the softmax.",
                   inputs={"logits": _max_differs(r, 2, 16, 8.0, a)}, attributes=a,
                   cotangents={"weights": r.uniform((2, 4))}, flags=["gradient"])
    a = {"top_k": 3, **V2, "renormalize": True, "routed_scaling_factor": 1.0}
    yield gradient("moe_router/grad-007", "moe_router",
                   "group_score 'max', softmax, renormalised (norm_topk_prob as vLLM applies "
                   "it), top 3 of 16.",
                   inputs={"logits": _max_differs(r, 2, 16, 8.0, a)}, attributes=a,
                   cotangents={"weights": r.uniform((2, 3))}, flags=["gradient"])
    a = {"top_k": 2, "scoring": "sigmoid", "n_group": 4, "topk_group": 1, "group_score": "max"}
    yield gradient("moe_router/grad-008", "moe_router",
                   "group_score 'max' with sigmoid scores, not renormalised: only the kept "
                   "experts' logits get a gradient.",
                   inputs={"logits": _max_differs(r, 3, 8, 6.0, a)}, attributes=a,
                   cotangents={"weights": r.uniform((3, 2))}, flags=["gradient"])
    a = {"top_k": 2, "n_group": 6, "topk_group": 3, "group_score": "max"}
    yield gradient("moe_router/grad-009", "moe_router",
                   "group_score 'max' with groups of one expert, softmax, top 2 of 6.",
                   inputs={"logits": _distinct(r, 2, 6, 6.0)}, attributes=a,
                   cotangents={"weights": r.uniform((2, 2))}, flags=["gradient"])
