"""mha: multi-head attention over fused (D, H*K) projections, self and cross."""

import numpy as np

from ..oracle.mha import mha as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("mha", {
    "mha": Fn(required=["num_heads"], module="multihead", inputs=["query", "key", "value", "mask"],
              optional=["mask"], attributes={"num_heads": None}, added={"num_kv_heads": None},
              params=True, returns=["output", "weights"], oracle=oracle),
})


def mha_params(rng, d_q, d_k, d_v, heads, k, v, d_o, bias=True, kv_heads=None):
    """w_q (Dq, H*K), w_k (Dk, H_kv*K), w_v (Dv, H_kv*V), w_o (H*V, Do), biases if asked;
    H_kv = kv_heads (None: H)."""
    kv = heads if kv_heads is None else kv_heads
    p = {"w_q": rng.weights((d_q, heads * k)), "w_k": rng.weights((d_k, kv * k)),
         "w_v": rng.weights((d_v, kv * v)), "w_o": rng.weights((heads * v, d_o))}
    if bias:
        p.update(b_q=rng.weights((heads * k,), 0.5), b_k=rng.weights((kv * k,), 0.5),
                 b_v=rng.weights((kv * v,), 0.5), b_o=rng.weights((d_o,), 0.5))
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
    yield from gqa_cases(Rng(f"{COMPONENT.id}/gqa"))
    yield from causal_cases(Rng(f"{COMPONENT.id}/causal"))


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


# -- grouped- and multi-query attention (num_kv_heads, added in 1.1.0) ----------------------

def gqa_cases(rng):
    """H query heads over H_kv key/value heads: query head h reads kv head h // (H / H_kv)."""
    def gqa(id, description, inputs, heads, kv_heads, params, flags):
        return value(f"mha/{id}", "mha", description, inputs=inputs,
                     attributes={"num_heads": heads, "num_kv_heads": kv_heads}, params=params,
                     flags=["gqa", *flags])
    x = rng.uniform((2, 3, 8))
    yield gqa("gqa-001", "Grouped-query self-attention, H = 4 over H_kv = 2 (K = V = 2), "
              "B = 2, T = 3, D = 8, all biases: w_k, w_v are (8, 4); heads 0, 1 read kv head 0 "
              "and heads 2, 3 kv head 1 (the grouping h % H_kv differs).",
              {"query": x, "key": x, "value": x}, 4, 2,
              mha_params(rng, 8, 8, 8, 4, 2, 2, 8, kv_heads=2),
              ["basic", "head-grouping", "bias"])
    x = rng.uniform((2, 3, 8))
    yield gqa("mqa-001", "Multi-query attention: H = 4 query heads (K = 2, V = 3) share one "
              "key/value head, w_k (8, 2), w_v (8, 3), w_o (12, 8).",
              {"query": x, "key": x, "value": x}, 4, 1,
              mha_params(rng, 8, 8, 8, 4, 2, 3, 8, kv_heads=1), ["mqa", "k-ne-v", "bias"])
    x = rng.uniform((2, 3, 8))
    yield gqa("gqa-equal-001", "num_kv_heads = num_heads = 2: exactly the multi-head "
              "attention of mha/self-001's shapes.",
              {"query": x, "key": x, "value": x}, 2, 2, mha_params(rng, 8, 8, 8, 2, 4, 4, 8),
              ["edge"])
    q, k, v = rng.uniform((2, 2, 6)), rng.uniform((2, 5, 4)), rng.uniform((2, 5, 5))
    yield gqa("gqa-cross-001", "Grouped-query cross-attention T = 2 != S = 5, Dq = 6, Dk = 4, "
              "Dv = 5, H = 4 over H_kv = 2, K = 3, V = 2, Do = 5, all biases.",
              {"query": q, "key": k, "value": v}, 4, 2,
              mha_params(rng, 6, 4, 5, 4, 3, 2, 5, kv_heads=2),
              ["cross", "t-ne-s", "head-grouping", "projection-order"])
    x = rng.uniform((1, 4, 6))
    yield gqa("gqa-causal-001", "H = 6 over H_kv = 3 (groups of 2, K = V = 2), a (T, S) "
              "causal mask broadcast over the heads, no biases.",
              {"query": x, "key": x, "value": x, "mask": np.tril(np.ones((4, 4), dtype=bool))},
              6, 3, mha_params(rng, 6, 6, 6, 6, 2, 2, 6, bias=False, kv_heads=3),
              ["mask", "causal", "no-bias", "head-grouping"])
    per_head = rng.bools((4, 3, 5))  # (H, T, S): the mask follows the query heads
    per_head[:, :, 0] = True
    per_head[1] = ~per_head[0]
    per_head[1, :, 1] = True
    q, mem = rng.uniform((2, 3, 8)), rng.uniform((2, 5, 8))
    yield gqa("gqa-head-mask-001", "A per-head (H, T, S) = (4, 3, 5) mask with H = 4 over "
              "H_kv = 2 (K = V = 2), cross-attention: the mask follows the query heads (heads "
              "0 and 1 share a kv head, not a mask).",
              {"query": q, "key": mem, "value": mem, "mask": per_head}, 4, 2,
              mha_params(rng, 8, 8, 8, 4, 2, 2, 8, kv_heads=2),
              ["mask", "per-head", "head-grouping"])
    x = rng.uniform((1, 3, 8))
    yield gqa("gqa-no-bias-001", "H = 8 over H_kv = 2 (groups of 4), K = 1, V = 2, no biases.",
              {"query": x, "key": x, "value": x}, 8, 2,
              mha_params(rng, 8, 8, 8, 8, 1, 2, 8, bias=False, kv_heads=2),
              ["no-bias", "head-grouping"])
    x = rng.uniform((2, 3, 8))
    yield value("mha/defaults-001", "mha",
                "num_kv_heads left out (default None: H_kv = H = 4, w_k and w_v (8, 8)): a "
                "default of 1 (multi-query) reads the parameters as the wrong shapes.",
                inputs={"query": x, "key": x, "value": x}, attributes={"num_heads": 4},
                params=mha_params(rng, 8, 8, 8, 4, 2, 2, 8), flags=["defaults"],
                omit_defaults=True)

    x, p = rng.uniform((2, 3, 8)), mha_params(rng, 8, 8, 8, 4, 2, 2, 8, kv_heads=2)
    yield error("mha/gqa-divide-001", "mha", "num_kv_heads = 3 does not divide num_heads = 4.",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": 3}, params=p, error="ConfigError",
                mentions=["num_kv_heads=3", "num_heads=4"])
    yield error("mha/gqa-param-shape-001", "mha",
                "num_kv_heads = 2 with H = 4, K = 2 but w_k of shape (8, 8) (H*K, not "
                "H_kv*K = 4, columns).",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": 2},
                params={**p, "w_k": rng.weights((8, 8))}, error="ParameterError",
                mentions=["w_k", "(8, 8)", "(8, 4)"])
    yield error("mha/gqa-zero-001", "mha", "num_kv_heads = 0.",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": 0}, params=p, error="ConfigError",
                mentions=["num_kv_heads"])
    yield error("mha/gqa-bool-001", "mha", "num_kv_heads = True: a bool is not a count.",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": True}, params=p,
                error="ConfigError", mentions=["num_kv_heads", "True"])
    yield error("mha/gqa-float-001", "mha", "num_kv_heads = 1.5.",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": 1.5}, params=p,
                error="ConfigError", mentions=["num_kv_heads", "1.5"])
    yield error("mha/gqa-value-width-001", "mha",
                "num_kv_heads = 2 with w_v of shape (8, 5): H_kv = 2 does not divide its 5 "
                "columns.",
                inputs={"query": x, "key": x, "value": x},
                attributes={"num_heads": 4, "num_kv_heads": 2},
                params={**p, "w_v": rng.weights((8, 5))}, error="ConfigError",
                mentions=["w_v", "num_kv_heads=2", "5"])


def causal_mask(t, s):
    """(T, S), True where j <= i + (S - T): the causal mask aligned to the last key
    (spec/components/masks.md), as with a KV cache; with T > S the first T - S rows are empty."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


def causal_cases(r):
    """Causal multi-head attention (issue 25): T != S, odd widths, several heads."""
    x = r.uniform((2, 7, 9))
    yield value("mha/causal-002", "mha",
                "Causal at T = 3 < S = 7 (the last 3 of 7 tokens query all 7, as with a KV "
                "cache): mask j <= i + 4 (aligned to the last key, not the first); D = 9, H = 3, "
                "K = V = 3, all biases.",
                inputs={"query": x[:, 4:], "key": x, "value": x, "mask": causal_mask(3, 7)},
                attributes={"num_heads": 3}, params=mha_params(r, 9, 9, 9, 3, 3, 3, 9),
                flags=["causal", "t-ne-s", "odd-width", "heads"])
    x = r.uniform((1, 5, 7))
    yield value("mha/causal-003", "mha",
                "Causal self-attention with H = 6 heads of K = 2, V = 3 (K != V), D = 7 "
                "(odd, not H*K = 12), Do = 5, T = 5, all biases.",
                inputs={"query": x, "key": x, "value": x, "mask": causal_mask(5, 5)},
                attributes={"num_heads": 6}, params=mha_params(r, 7, 7, 7, 6, 2, 3, 5),
                flags=["causal", "heads", "k-ne-v", "odd-width"])
    q, kv = r.uniform((2, 5, 6)), r.uniform((2, 3, 6))
    yield value("mha/causal-004", "mha",
                "Causal at T = 5 > S = 3: mask j <= i - 2, so query rows 0 and 1 see no key "
                "(weights 0, output b_o) and row 2 sees key 0 only; a top-left aligned mask "
                "(j <= i) fails. H = 2, K = V = 3.",
                inputs={"query": q, "key": kv, "value": kv, "mask": causal_mask(5, 3)},
                attributes={"num_heads": 2}, params=mha_params(r, 6, 6, 6, 2, 3, 3, 6),
                flags=["causal", "t-ne-s", "fully-masked", "alignment"])
    x = r.uniform((3, 9, 10))
    keep = causal_mask(9, 9)[None, None] & (np.arange(9) < np.array([9, 6, 1])[:, None])[:, None, None, :]
    yield value("mha/causal-005", "mha",
                "Causal AND key padding (3, 1, 9, 9) at T = S = 9, H = 5 heads of K = V = 2, "
                "D = 10; row 2 has one real token (every query sees key 0 only).",
                inputs={"query": x, "key": x, "value": x, "mask": keep},
                attributes={"num_heads": 5}, params=mha_params(r, 10, 10, 10, 5, 2, 2, 10),
                flags=["causal", "padding", "heads", "broadcast"])
    x = r.uniform((2, 6, 6))
    yield value("mha/causal-006", "mha",
                "Causal self-attention with H = 3 heads of K = 1 (D = 6, V = 5, Do = 6), "
                "no biases, T = 6: a one-wide head's scale is 1/sqrt(1) = 1.",
                inputs={"query": x, "key": x, "value": x, "mask": causal_mask(6, 6)},
                attributes={"num_heads": 3}, params=mha_params(r, 6, 6, 6, 3, 1, 5, 6, bias=False),
                flags=["causal", "no-bias", "scale", "heads"])


def grad_cases(r):
    yield from _grad_cases(r)
    yield from causal_grad_cases(Rng(f"{COMPONENT.id}/causal-grad"))


def causal_grad_cases(r):
    x = r.uniform((2, 5, 6), -1, 1)
    yield gradient("mha/grad-005", "mha",
                   "Causal at T = 2 < S = 5 (mask j <= i + 3), H = 3, K = 2, V = 3, D = 6, all "
                   "biases, query = the last 2 rows of key = value: the key and value "
                   "gradients of key 4 come from query row 1 only.",
                   inputs={"query": x[:, 3:], "key": x, "value": x, "mask": causal_mask(2, 5)},
                   attributes={"num_heads": 3}, params=mha_params(r, 6, 6, 6, 3, 2, 3, 6),
                   cotangents={"output": r.uniform((2, 2, 6))},
                   flags=["gradient", "causal", "t-ne-s", "heads"])
    x = r.uniform((1, 5, 5), -1, 1)
    yield gradient("mha/grad-006", "mha",
                   "Causal self-attention T = S = 5, H = 5 heads of K = V = 1 (D = 5, odd), "
                   "cotangents on the output and the (1, 5, 5, 5) weights.",
                   inputs={"query": x, "key": x, "value": x, "mask": causal_mask(5, 5)},
                   attributes={"num_heads": 5}, params=mha_params(r, 5, 5, 5, 5, 1, 1, 5),
                   cotangents={"output": r.uniform((1, 5, 5)), "weights": r.uniform((1, 5, 5, 5))},
                   flags=["gradient", "causal", "heads", "weights-cotangent"])


def _grad_cases(r):
    def u(*shape):
        return r.uniform(shape, -1, 1)

    yield gradient("mha/grad-001", "mha",
                   "Cross-attention B = 2, T = 2, S = 4, Dq = 5, Dk = Dv = 4, H = 2, K = 3, V = 2, "
                   "Do = 3, all biases: every width differs, so a projection gradient with a "
                   "wrong transpose (dW_o = dO^T concat) cannot even take the parameter's shape, "
                   "and db_q sums over the batch and the tokens.",
                   inputs={"query": u(2, 2, 5), "key": u(2, 4, 4), "value": u(2, 4, 4)},
                   attributes={"num_heads": 2}, params=mha_params(r, 5, 4, 4, 2, 3, 2, 3),
                   cotangents={"output": r.uniform((2, 2, 3))},
                   flags=["gradient", "cross-attention", "bias"])
    x = u(1, 3, 4)
    yield gradient("mha/grad-002", "mha",
                   "Self-attention (the same (1, 3, 4) array as query, key and value; each gets "
                   "its own gradient), H = 2, K = V = 2, a causal mask and cotangents on the "
                   "output and the (1, 2, 3, 3) weights.",
                   inputs={"query": x, "key": x, "value": x,
                           "mask": np.tril(np.ones((3, 3), dtype=bool))},
                   attributes={"num_heads": 2}, params=mha_params(r, 4, 4, 4, 2, 2, 2, 4),
                   cotangents={"output": r.uniform((1, 3, 4)), "weights": r.uniform((1, 2, 3, 3))},
                   flags=["gradient", "self", "causal", "weights-cotangent"])
    yield gradient("mha/grad-003", "mha",
                   "num_kv_heads = 2 under H = 4 (K = V = 2, D = 4, B = 2, T = 3, S = 4): w_k and "
                   "w_v are (4, 4), and the gradient of kv head g's columns is the sum over "
                   "query heads 2g and 2g + 1.",
                   inputs={"query": u(2, 3, 4), "key": u(2, 4, 4), "value": u(2, 4, 4)},
                   attributes={"num_heads": 4, "num_kv_heads": 2},
                   params=mha_params(r, 4, 4, 4, 4, 2, 2, 4, kv_heads=2),
                   cotangents={"output": r.uniform((2, 3, 4))}, flags=["gradient", "gqa", "bias"])
    keep = np.array([[True, True, True, False], [True, True, False, False]])[:, None, None, :]
    yield gradient("mha/grad-004", "mha",
                   "Multi-query (num_kv_heads = 1 under H = 3), no biases, a (2, 1, 1, 4) "
                   "padding mask: padded keys and values get zero gradient, and the parameter "
                   "gradients hold only the four weights.",
                   inputs={"query": u(2, 2, 3), "key": u(2, 4, 3), "value": u(2, 4, 3),
                           "mask": keep},
                   attributes={"num_heads": 3, "num_kv_heads": 1},
                   params=mha_params(r, 3, 3, 3, 3, 2, 2, 3, bias=False, kv_heads=1),
                   cotangents={"output": r.uniform((2, 2, 3)), "weights": r.uniform((2, 3, 2, 4))},
                   flags=["gradient", "mqa", "padding", "no-bias"])
