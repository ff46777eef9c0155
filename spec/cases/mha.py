"""mha: multi-head attention over fused (D, H*K) projections, self and cross."""

import numpy as np

from ..oracle.mha import mha as oracle
from ._build import Component, Fn, Rng, error, value

COMPONENT = Component("mha", {
    "mha": Fn(required=["num_heads"], module="multihead", inputs=["query", "key", "value", "mask"],
              optional=["mask"], attributes={"num_heads": None}, params=True, returns=["output",
              "weights"], oracle=oracle),
})


def mha_params(rng, d_q, d_k, d_v, heads, k, v, d_o, bias=True):
    """w_q (Dq, H*K), w_k (Dk, H*K), w_v (Dv, H*V), w_o (H*V, Do), biases if asked."""
    p = {"w_q": rng.weights((d_q, heads * k)), "w_k": rng.weights((d_k, heads * k)),
         "w_v": rng.weights((d_v, heads * v)), "w_o": rng.weights((heads * v, d_o))}
    if bias:
        p.update(b_q=rng.weights((heads * k,), 0.5), b_k=rng.weights((heads * k,), 0.5),
                 b_v=rng.weights((heads * v,), 0.5), b_o=rng.weights((d_o,), 0.5))
    return {name: p[name] for name in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")
            if name in p}


def cases(rng):
    x = rng.uniform((2, 3, 8))
    yield value("mha/self-001", "mha",
                "Self-attention (query = key = value), B=2, T=3, D=8, H=2, K=V=4, all biases, "
                "no mask.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 2},
                params=mha_params(rng, 8, 8, 8, 2, 4, 4, 8), flags=["basic", "self", "bias"])
    q, mem = rng.uniform((2, 2, 6)), rng.uniform((2, 4, 4))
    yield value("mha/cross-001", "mha",
                "Cross-attention T=2 != S=4, Dq=6 != Dk=Dv=4, H=2, K=3, V=2, Do=5, all biases: "
                "swapping the query and key projections cannot even run.",
                inputs={"query": q, "key": mem, "value": mem}, attributes={"num_heads": 2},
                params=mha_params(rng, 6, 4, 4, 2, 3, 2, 5),
                flags=["cross", "k-ne-v", "bias", "projection-order"])
    x = rng.uniform((1, 3, 8))
    yield value("mha/no-bias-001", "mha",
                "H=4 heads of K=2, V=3 (K != V) with no biases at all (none of b_q, b_k, b_v, "
                "b_o present).",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 4},
                params=mha_params(rng, 8, 8, 8, 4, 2, 3, 8, bias=False),
                flags=["no-bias", "k-ne-v", "head-split"])
    q, k, v = rng.uniform((2, 3, 4)), rng.uniform((2, 5, 6)), rng.uniform((2, 5, 3))
    yield value("mha/cross-002", "mha",
                "H=4 cross-attention with distinct key and value tensors: Dq=4, Dk=6, Dv=3, "
                "T=3, S=5, K=2, V=2, Do=4, all biases.",
                inputs={"query": q, "key": k, "value": v}, attributes={"num_heads": 4},
                params=mha_params(rng, 4, 6, 3, 4, 2, 2, 4),
                flags=["cross", "head-split", "bias", "projection-order"])
    x = rng.uniform((2, 3, 4))
    yield value("mha/one-head-001", "mha",
                "H=1 (one head of K=3, V=5, Do=4): the scale is 1/sqrt(3), not 1/sqrt(D=4).",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 1},
                params=mha_params(rng, 4, 4, 4, 1, 3, 5, 4), flags=["one-head", "scale"])
    x = rng.uniform((2, 4, 8))
    causal = np.tril(np.ones((4, 4), dtype=bool))
    yield value("mha/causal-001", "mha",
                "A (T, S) causal mask broadcast over batch and heads, H=2, K=V=4.",
                inputs={"query": x, "key": x, "value": x, "mask": causal},
                attributes={"num_heads": 2}, params=mha_params(rng, 8, 8, 8, 2, 4, 4, 8),
                flags=["mask", "causal", "broadcast"])
    q, mem = rng.uniform((2, 3, 8)), rng.uniform((2, 4, 8))
    pad = np.array([[True, True, True, False], [True, True, False, False]]).reshape(2, 1, 1, 4)
    yield value("mha/padding-001", "mha",
                "A (B, 1, 1, S) key-padding mask in cross-attention, H=2, K=V=4: padded "
                "memory positions get weight 0 in every head and query.",
                inputs={"query": q, "key": mem, "value": mem, "mask": pad},
                attributes={"num_heads": 2}, params=mha_params(rng, 8, 8, 8, 2, 4, 4, 6),
                flags=["mask", "padding", "cross", "broadcast"])
    x = rng.uniform((2, 3, 8))
    rows = np.array([[[1, 1, 0], [0, 0, 0], [1, 0, 1]],
                     [[1, 1, 1], [0, 1, 0], [0, 0, 0]]], dtype=bool).reshape(2, 1, 3, 3)
    yield value("mha/fully-masked-001", "mha",
                "A (B, 1, T, S) mask with fully masked rows: their weights are 0 in every head "
                "and their output is exactly b_o.",
                inputs={"query": x, "key": x, "value": x, "mask": rows},
                attributes={"num_heads": 2}, params=mha_params(rng, 8, 8, 8, 2, 4, 4, 8),
                flags=["mask", "fully-masked", "bias"])
    x = rng.uniform((1, 3, 8))
    per_head = np.array([[[1, 0, 1], [1, 1, 0], [0, 1, 1]],
                         [[0, 1, 1], [1, 0, 1], [1, 1, 0]],
                         [[1, 1, 1], [0, 0, 1], [1, 0, 0]],
                         [[1, 0, 0], [1, 1, 1], [0, 1, 0]]], dtype=bool).reshape(1, 4, 3, 3)
    yield value("mha/head-mask-001", "mha",
                "A full (B, H, T, S) mask, different for each of the H=4 heads (K=V=2): a mask "
                "applied to the wrong head fails.",
                inputs={"query": x, "key": x, "value": x, "mask": per_head},
                attributes={"num_heads": 4}, params=mha_params(rng, 8, 8, 8, 4, 2, 2, 8),
                flags=["mask", "per-head", "head-split"])

    x, p = rng.uniform((2, 3, 8)), mha_params(rng, 8, 8, 8, 2, 4, 4, 8)
    yield error("mha/rank-001", "mha", "A rank-2 query (T, D) without the batch axis.",
                inputs={"query": x[0], "key": x, "value": x}, attributes={"num_heads": 2},
                params=p, error="ShapeError", mentions=["query", "(3, 8)"])
    yield error("mha/heads-001", "mha", "num_heads=3 does not divide H*K = 8.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 3},
                params=p, error="ConfigError", mentions=["num_heads"])
    yield error("mha/param-shape-001", "mha",
                "w_k of shape (6, 8) for a key of width 8.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 2},
                params={**p, "w_k": rng.weights((6, 8))}, error="ParameterError",
                mentions=["w_k", "(6, 8)"])
    yield error("mha/param-shape-002", "mha",
                "b_o of shape (4,) for an output width of 8.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 2},
                params={**p, "b_o": rng.weights((4,))}, error="ParameterError",
                mentions=["b_o", "(4,)"])
    yield error("mha/missing-param-001", "mha", "No output projection w_o.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 2},
                params={k: a for k, a in p.items() if k != "w_o"}, error="ParameterError",
                mentions=["w_o"])
    yield error("mha/mask-001", "mha", "A (3, 4) mask for T=3, S=3.",
                inputs={"query": x, "key": x, "value": x, "mask": np.ones((3, 4), dtype=bool)},
                attributes={"num_heads": 2}, params=p, error="ShapeError",
                mentions=["mask", "(3, 4)"])
    yield error("mha/length-001", "mha", "key has S=3 positions but value has 2.",
                inputs={"query": x, "key": x, "value": x[:, :2]}, attributes={"num_heads": 2},
                params=p, error="ShapeError", mentions=["key", "value"])
    yield from missed_cases()


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    mask = rd.bools((2, 3, 4))  # (H, T, S): every head its own pattern
    mask[:, :, 0] = True
    mask[1] = ~mask[0]
    mask[1, :, 1] = True
    yield value("mha/head-mask-002", "mha",
                "A per-head (H, T, S) = (2, 3, 4) mask (broadcast over B = 2), head 1 seeing "
                "roughly what head 0 does not: applying head 0's mask to every head, or the "
                "mask along the wrong axis, fails.",
                inputs={"query": rd.uniform((2, 3, 8)), "key": rd.uniform((2, 4, 8)),
                        "value": rd.uniform((2, 4, 8)), "mask": mask},
                attributes={"num_heads": 2}, params=mha_params(rd, 8, 8, 8, 2, 4, 4, 8),
                flags=["mask", "per-head"])
