"""moe: the mixture-of-experts layer: router logits x W_router, the router (moe_router), the
weighted sum of the chosen experts' SwiGLU outputs, plus an optional shared expert (gated by
a sigmoid as in Qwen2-MoE, or ungated as in DeepSeek-V3)."""

import numpy as np

from ..oracle.moe_layer import moe as oracle
from ..oracle.moe_router import select
from ._build import Component, Fn, Rng, error, gradient, value

ROUTER = {"scoring": "softmax", "renormalize": False, "eps": 1e-20, "n_group": 1, "topk_group": 1,
          "routed_scaling_factor": 1.0}

COMPONENT = Component("moe", {
    "moe": Fn(module="moe", inputs=["x"], required=["top_k"], attributes=dict(ROUTER),
              added={"group_score": "sum_top2"}, params=True, returns=["y", "router_logits"], oracle=oracle),
})


def _scores(z, scoring):
    if scoring == "softmax":
        e = np.exp(z - z.max())
        return e / e.sum()
    return 1 / (1 + np.exp(-z))


def _robust(x, wr, bias, attrs, margin=0.125):
    """True when every token's chosen set is the same under 16 sign patterns of +-margin on
    its router logits (so no dtype's rounding moves a token to another expert)."""
    z = x @ wr                                                   # (N, E)
    a = {**ROUTER, **attrs}
    b = np.zeros(z.shape[1]) if bias is None else bias
    signs = np.array([[1.0 if (i * 2654435761 >> (j % 29)) & 1 else -1.0
                       for j in range(z.shape[1])] for i in range(1, 17)])

    def chosen(row):
        return set(select(list(_scores(row, a["scoring"]) + b), a["top_k"], a["n_group"],
                          a["topk_group"], a.get("group_score", "sum_top2")))

    return all(chosen(row) == chosen(row + margin * s) for row in z for s in signs)


def routed(rng, n, d, e, f, attrs, bias=None, scale=1.0):
    """x (N, D), the router and E SwiGLU experts, redrawn until the routing is robust."""
    while True:
        x = rng.uniform((n, d), -1.0, 1.0)
        p = {"router.w": rng.weights((d, e), 2.0 * scale),
             "experts.w_gate": rng.weights((e, d, f)), "experts.w_up": rng.weights((e, d, f)),
             "experts.w_down": rng.weights((e, f, d))}
        if _robust(x, p["router.w"], bias, attrs):
            if bias is not None:
                p["router.correction_bias"] = bias
            return x, p


def shared(rng, d, f, gate=True):
    p = {"shared.w_gate": rng.weights((d, f)), "shared.w_up": rng.weights((d, f)),
         "shared.w_down": rng.weights((f, d))}
    if gate:
        p["shared_gate.w"] = rng.weights((d, 1), 2.0)
    return p


DEEPSEEK = {"scoring": "sigmoid", "renormalize": True, "n_group": 4, "topk_group": 2,
            "routed_scaling_factor": 2.5}


def cases(rng):
    a = {"top_k": 2, "renormalize": True}
    x, p = routed(rng, 6, 4, 8, 6, a)
    yield value("moe/mixtral-001", "moe",
                "Mixtral: router logits x W_router, softmax over 8 experts, top 2, renormalised, "
                "SwiGLU experts (D = 4, F = 6), each expert's output times its weight, summed; "
                "N = 6 tokens.", inputs={"x": x}, attributes=a, params=p, flags=["basic"])
    a = {"top_k": 2}
    x, p = routed(rng, 5, 4, 6, 4, a)
    yield value("moe/qwen-001", "moe",
                "Qwen2-MoE: softmax over 6 experts, top 2, not renormalised (norm_topk_prob "
                "False), plus the shared expert (F = 8) times sigmoid(x W_shared_gate); dropping "
                "the gate, or renormalising, changes y.",
                inputs={"x": x}, attributes=a, params={**p, **shared(rng, 4, 8)},
                flags=["basic", "optional-params"])
    a = {"top_k": 2, **DEEPSEEK}
    bias = np.array([0.25, 0.0, -0.25, 0.0, 0.5, 0.0, 0.0, -0.5])
    x, p = routed(rng, 5, 4, 8, 4, a, bias=bias)
    yield value("moe/deepseek-001", "moe",
                "DeepSeek-V3 in small: sigmoid scores, 8 experts in 4 groups, the best 2, top 2, "
                "a selection-only correction bias (router.correction_bias), renormalised, times "
                "2.5, plus an ungated shared expert (F = 4).",
                inputs={"x": x}, attributes=a, params={**p, **shared(rng, 4, 4, gate=False)},
                flags=["basic", "optional-params", "bias"])
    a = {"top_k": 1}
    x, p = routed(rng, 6, 4, 4, 4, a)
    yield value("moe/top-1-001", "moe",
                "Switch: top 1 of 4, not renormalised: y = p_I FFN_I(x), the probability times "
                "the expert's output (renormalised the weight would be 1).",
                inputs={"x": x}, attributes=a, params=p, flags=["top-1", "edge"])
    a = {"top_k": 4}
    x, p = routed(rng, 4, 4, 4, 4, a)
    yield value("moe/top-all-001", "moe",
                "top_k = E = 4: every expert on every token, the softmax-weighted sum (a dense "
                "mixture).", inputs={"x": x}, attributes=a, params=p, flags=["top-all", "edge"])
    a = {"top_k": 2}
    x, p = routed(rng, 4, 6, 4, 4, a)
    gate = shared(rng, 6, 4)
    gate["shared_gate.w"] = rng.weights((6, 1), 2.0) * 2
    yield value("moe/shared-gate-001", "moe",
                "A shared expert whose gate pre-activations x W_shared_gate lie far from 0 "
                "(W_shared_gate in [-4, 4]): sigma is near 0 for some tokens and near 1 for "
                "others; an ungated shared expert or sigma(0) = 1/2 fails.",
                inputs={"x": x}, attributes=a, params={**p, **gate}, flags=["optional-params"])
    a = {"top_k": 2}
    x, p = routed(rng, 5, 4, 6, 4, a)
    yield value("moe/defaults-001", "moe",
                "Every attribute but top_k left out: softmax, not renormalised, one group, "
                "scale 1; top 2 of 6 experts.",
                inputs={"x": x}, attributes=a, params=p, omit_defaults=True, flags=["defaults"])

    a = {"top_k": 2}
    x, p = routed(rng, 3, 4, 4, 4, a)
    yield error("moe/rank-001", "moe", "A rank-3 x (flatten the tokens first).",
                inputs={"x": x.reshape(1, 3, 4)}, attributes=a, params=p, error="ShapeError",
                mentions=["x", "(1, 3, 4)"])
    yield error("moe/expert-shape-001", "moe",
                "experts.w_up of shape (4, 4, 5) where experts.w_gate gives F = 4.",
                inputs={"x": x}, attributes=a, params={**p, "experts.w_up": np.zeros((4, 4, 5))},
                error="ParameterError", mentions=["experts.w_up", "(4, 4, 5)"])
    yield error("moe/router-missing-001", "moe", "router.w is missing.",
                inputs={"x": x}, attributes=a,
                params={k: v for k, v in p.items() if k != "router.w"},
                error="ParameterError", mentions=["router.w"])
    yield error("moe/top-k-001", "moe", "top_k = 5 of 4 experts.",
                inputs={"x": x}, attributes={"top_k": 5}, params=p, error="ConfigError",
                mentions=["top_k"])
    yield error("moe/gate-alone-001", "moe",
                "shared_gate.w without a shared expert (shared.w_gate missing).",
                inputs={"x": x}, attributes=a, params={**p, "shared_gate.w": np.zeros((4, 1))},
                error="ParameterError", mentions=["shared.w_gate"])
    yield from v2_cases(Rng(f"{COMPONENT.id}/v2"))


def grad_cases(r):
    a = {"top_k": 2, "renormalize": True}
    x, p = routed(r, 4, 4, 4, 4, a)
    yield gradient("moe/grad-001", "moe",
                   "Mixtral: top 2 of 4, renormalised; the gradient reaches the chosen experts' "
                   "weights, the router (through the kept weights and router_logits' own "
                   "cotangent) and x.",
                   inputs={"x": x}, attributes=a, params=p,
                   cotangents={"y": r.uniform((4, 4)), "router_logits": r.uniform((4, 4))},
                   flags=["gradient"])
    a = {"top_k": 2}
    x, p = routed(r, 4, 4, 4, 4, a)
    yield gradient("moe/grad-002", "moe",
                   "Qwen2-MoE: top 2 of 4, not renormalised, a sigmoid-gated shared expert: "
                   "d W_shared_gate = x^T (<dy, s> g (1 - g)).",
                   inputs={"x": x}, attributes=a, params={**p, **shared(r, 4, 4)},
                   cotangents={"y": r.uniform((4, 4)), "router_logits": r.uniform((4, 4))},
                   flags=["gradient", "optional-params"])
    a = {"top_k": 2, "scoring": "sigmoid", "renormalize": True, "n_group": 2, "topk_group": 1,
         "routed_scaling_factor": 2.0}
    x, p = routed(r, 4, 4, 4, 4, a)
    yield gradient("moe/grad-003", "moe",
                   "DeepSeek-V3 style: sigmoid, 2 groups of 2, the best group, top 2, "
                   "renormalised, times 2, an ungated shared expert.",
                   inputs={"x": x}, attributes=a, params={**p, **shared(r, 4, 4, gate=False)},
                   cotangents={"y": r.uniform((4, 4)), "router_logits": r.uniform((4, 4))},
                   flags=["gradient", "optional-params"])
    a = {"top_k": 2}
    x, p = routed(r, 3, 4, 4, 4, a)
    yield gradient("moe/grad-004", "moe",
                   "Defaults left out: softmax top 2 of 4, not renormalised.",
                   inputs={"x": x}, attributes=a, params=p,
                   cotangents={"y": r.uniform((3, 4)), "router_logits": r.uniform((3, 4))},
                   omit_defaults=True, flags=["gradient", "defaults"])
    yield from v2_grad_cases(Rng(f"{COMPONENT.id}/grad-v2"))


# -- group_score "max": DeepSeek-V2's MoE block (its own streams) ----------------------------

V2 = {"scoring": "softmax", "renormalize": False, "n_group": 4, "topk_group": 1,
      "routed_scaling_factor": 2.0, "group_score": "max"}


def _v2_routed(r, n, d, e, f, a):
    """routed(), redrawn until some token's groups by max differ from those by top-two sums,
    and some token's choice from the plain (ungrouped) top_k."""
    for _ in range(200):
        x, p = routed(r, n, d, e, f, a)
        z = [list(_scores(row, "softmax")) for row in x @ p["router.w"]]
        k = (a["top_k"], a["n_group"], a["topk_group"])
        chosen = [set(select(s, *k, "max")) for s in z]
        if any(c != set(select(s, *k, "sum_top2")) for c, s in zip(chosen, z)) and \
                any(c != set(select(s, a["top_k"], 1, 1)) for c, s in zip(chosen, z)):
            return x, p
    raise AssertionError("no differing draw")


def v2_cases(r):
    a = {"top_k": 2, **V2}
    x, p = _v2_routed(r, 6, 4, 8, 4, a)
    yield value("moe/v2-001", "moe",
                "DeepSeek-V2's block in small: softmax over 8 experts in 4 groups scored by "
                "their max (group_limited_greedy), the best group, top 2, not renormalised, "
                "times 2, plus an ungated shared expert (F = 4); some token's choice differs "
                "from that of the top-two sums, some from the ungrouped top 2.",
                inputs={"x": x}, attributes=a, params={**p, **shared(r, 4, 4, gate=False)},
                flags=["basic", "optional-params"])


def v2_grad_cases(r):
    a = {"top_k": 2, **V2}
    x, p = _v2_routed(r, 4, 4, 8, 4, a)
    yield gradient("moe/grad-005", "moe",
                   "DeepSeek-V2 style: softmax, groups by max, the best of 4, top 2, times 2, "
                   "an ungated shared expert.",
                   inputs={"x": x}, attributes=a, params={**p, **shared(r, 4, 4, gate=False)},
                   cotangents={"y": r.uniform((4, 4)), "router_logits": r.uniform((4, 8))},
                   flags=["gradient", "optional-params"])
