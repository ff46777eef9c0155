"""moe_aux_loss: the load-balancing loss of Switch / Mixtral (transformers'
load_balancing_loss_func): E sum_e f_e P_e over the router logits of every layer, f_e the
fraction of (token, slot) choices of expert e among the top_k, P_e the mean probability."""

import numpy as np

from ..oracle.moe_layer import moe_aux_loss as oracle
from ._build import Component, Fn, error, gradient, value

COMPONENT = Component("moe_aux_loss", {
    "moe_aux_loss": Fn(module="moe", inputs=["router_logits", "mask"], optional=["mask"],
                       required=["top_k"], returns=["loss"], oracle=oracle),
})


def levels(rng, shape, spread=6.0):
    """(..., E) logits, each row a permutation of E levels spread / E apart: no near-ties."""
    e = shape[-1]
    lv = np.arange(e, dtype=np.float64) * (spread / e) - spread / 2
    rows = [lv[np.argsort(rng.integers(0, 2**30, (e,)), kind="stable")]
            for _ in range(int(np.prod(shape[:-1])))]
    return np.stack(rows).reshape(shape)


def cases(rng):
    yield value("moe_aux_loss/mixtral-001", "moe_aux_loss",
                "Mixtral: 2 layers of 6 tokens, 8 experts, top 2, no mask: f and P are means "
                "over all 12 rows (layers pooled), the loss E sum f_e P_e (f counts both "
                "slots, so a balanced router gives 2, not 1).",
                inputs={"router_logits": levels(rng, (2, 6, 8))}, attributes={"top_k": 2},
                flags=["basic"])
    yield value("moe_aux_loss/switch-001", "moe_aux_loss",
                "Switch Transformer: one layer, 8 tokens, 4 experts, top 1: N sum f_i P_i with "
                "N the number of experts.",
                inputs={"router_logits": levels(rng, (1, 8, 4))}, attributes={"top_k": 1},
                flags=["top-1", "basic"])
    yield value("moe_aux_loss/mask-001", "moe_aux_loss",
                "An attention mask (6 tokens, tokens 4 and 5 padding) over 2 layers: the padded "
                "rows enter neither f nor P and M = 2 x 4 (a mean over all 12 rows differs).",
                inputs={"router_logits": levels(rng, (2, 6, 4)),
                        "mask": np.array([True, True, True, True, False, False])},
                attributes={"top_k": 2}, flags=["mask", "padding"])
    yield value("moe_aux_loss/layers-001", "moe_aux_loss",
                "Three layers routing differently: f and P pooled over the layers before the "
                "product (transformers); the mean of the per-layer losses differs.",
                inputs={"router_logits": levels(rng, (3, 4, 4), 8.0)}, attributes={"top_k": 1},
                flags=["reduction", "mean-not-sum"])
    yield value("moe_aux_loss/olmoe-001", "moe_aux_loss",
                "OLMoE-like: one layer, 4 tokens, 16 experts, top 8.",
                inputs={"router_logits": levels(rng, (1, 4, 16))}, attributes={"top_k": 8},
                flags=["basic"])
    yield value("moe_aux_loss/uniform-001", "moe_aux_loss",
                "Equal logits: P_e = 1/E whatever the (tied) choice, so the loss is exactly "
                "top_k = 3; a count of the first choice only gives 1.",
                inputs={"router_logits": np.zeros((2, 3, 6))}, attributes={"top_k": 3},
                flags=["ties", "edge"])

    x = levels(rng, (2, 3, 4))
    yield error("moe_aux_loss/rank-001", "moe_aux_loss",
                "Rank-2 router logits (the layer axis missing).",
                inputs={"router_logits": x[0]}, attributes={"top_k": 2}, error="ShapeError",
                mentions=["router_logits", "(3, 4)"])
    yield error("moe_aux_loss/mask-shape-001", "moe_aux_loss", "A mask of 4 for 3 tokens.",
                inputs={"router_logits": x, "mask": np.ones(4, dtype=bool)},
                attributes={"top_k": 2}, error="ShapeError", mentions=["mask", "(4,)"])
    yield error("moe_aux_loss/top-k-001", "moe_aux_loss", "top_k = 5 of 4 experts.",
                inputs={"router_logits": x}, attributes={"top_k": 5}, error="ConfigError",
                mentions=["top_k"])


def _cot(r):
    return np.array(r.uniform((), 4.0, 8.0, 2.0**-4))


def grad_cases(r):
    """Cotangents in [4, 8] (a loss coefficient's scale): the gradients of a balance loss are
    small, and a cotangent below 1 would put them under bfloat16's atol."""
    yield gradient("moe_aux_loss/grad-001", "moe_aux_loss",
                   "Mixtral: 2 layers, 4 tokens, 4 experts, top 2: dz = (E f / M) through "
                   "each row's softmax (f is piecewise constant).",
                   inputs={"router_logits": levels(r, (2, 4, 4))}, attributes={"top_k": 2},
                   cotangents={"loss": _cot(r)}, flags=["gradient"])
    yield gradient("moe_aux_loss/grad-002", "moe_aux_loss",
                   "Masked: token 2 of 4 padding, so its rows get a zero gradient.",
                   inputs={"router_logits": levels(r, (2, 4, 4)),
                           "mask": np.array([True, True, False, True])},
                   attributes={"top_k": 2}, cotangents={"loss": _cot(r)},
                   flags=["gradient", "mask"])
    yield gradient("moe_aux_loss/grad-003", "moe_aux_loss", "Switch: top 1, one layer of 6.",
                   inputs={"router_logits": levels(r, (1, 6, 4))}, attributes={"top_k": 1},
                   cotangents={"loss": _cot(r)}, flags=["gradient", "top-1"])
    yield gradient("moe_aux_loss/grad-004", "moe_aux_loss", "Top 3 of 6, one layer of 3.",
                   inputs={"router_logits": levels(r, (1, 3, 6))}, attributes={"top_k": 3},
                   cotangents={"loss": _cot(r)}, flags=["gradient"])
