"""sdpa_varlen: attention over a packed batch of variable-length sequences."""

import numpy as np

from ..oracle.sdpa_varlen import sdpa_varlen as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("sdpa_varlen", {
    "sdpa_varlen": Fn(module="attention",
                      inputs=["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"],
                      attributes={"scale": None, "causal": False, "window": None},
                      added={"window_left": None, "window_right": None},
                      required=["max_seqlen_q", "max_seqlen_k"],
                      returns=["output"], oracle=oracle),
})


def packed(rng, lengths_q, lengths_k, h=2, h_kv=2, k=4, v=3):
    """q (total_q, H, K), k (total_k, H_kv, K), v (total_k, H_kv, V) and the offsets."""
    cq, ck = np.cumsum([0, *lengths_q]), np.cumsum([0, *lengths_k])
    return {"q": rng.uniform((int(cq[-1]), h, k)), "k": rng.uniform((int(ck[-1]), h_kv, k)),
            "v": rng.uniform((int(ck[-1]), h_kv, v)),
            "cu_seqlens_q": cq.astype(np.int64), "cu_seqlens_k": ck.astype(np.int64)}


def maxima(lengths_q, lengths_k):
    return {"max_seqlen_q": max(lengths_q), "max_seqlen_k": max(lengths_k)}


def case(rng, lengths_q, lengths_k, **kw):
    return packed(rng, lengths_q, lengths_k, **kw), maxima(lengths_q, lengths_k)


def cases(rng):
    x, m = case(rng, (2, 3, 1), (3, 2, 4))
    yield value("sdpa_varlen/basic-001", "sdpa_varlen",
                "Three sequences, q lengths (2, 3, 1) over k lengths (3, 2, 4), H = 2: each "
                "query attends only to its own sequence's keys (reading a neighbour's keys, "
                "or the previous sequence's length, fails).",
                inputs=x, attributes=m, flags=["basic", "batch", "boundary"])
    x, m = case(rng, (3, 2, 2), (2, 4, 2))
    yield value("sdpa_varlen/causal-001", "sdpa_varlen",
                "causal, q lengths (3, 2, 2) over k lengths (2, 4, 2): aligned bottom-right per "
                "sequence (query i sees keys j <= i + S_b - T_b); sequence 0 has T > S, so its "
                "first query sees no key and gives a zero row. Top-left alignment fails.",
                inputs=x, attributes={**m, "causal": True},
                flags=["causal", "t-ne-s", "fully-masked", "off-by-one"])
    x, m = case(rng, (2, 3), (3, 3), h=4, h_kv=2)
    yield value("sdpa_varlen/gqa-001", "sdpa_varlen",
                "H = 4 query heads over H_kv = 2 (query head h reads kv head h // 2), causal, "
                "two sequences.",
                inputs=x, attributes={**m, "causal": True}, flags=["gqa", "head-grouping", "causal"])
    x, m = case(rng, (4, 3), (5, 3))
    yield value("sdpa_varlen/window-001", "sdpa_varlen",
                "window = 2 per sequence: query i of sequence b sees keys p - 2 < j <= p with "
                "p = i + S_b - T_b, counted from the sequence's own first key.",
                inputs=x, attributes={**m, "window": 2}, flags=["sliding-window", "causal"])
    x, m = case(rng, (2, 0, 2, 0), (3, 2, 0, 0))
    yield value("sdpa_varlen/empty-001", "sdpa_varlen",
                "Zero-length sequences: one with keys and no queries, one with queries and no "
                "keys (its rows are zero: the fully-masked convention), one empty in both.",
                inputs=x, attributes=m, flags=["empty-axis", "fully-masked", "edge"])
    x, m = case(rng, (1, 12, 2), (2, 12, 1), k=2, v=2)
    yield value("sdpa_varlen/long-001", "sdpa_varlen",
                "One sequence of 12 among sequences of 1 and 2, causal: a kernel that pads or "
                "tiles to the first sequence's length, or to a short maximum, fails.",
                inputs=x, attributes={**m, "causal": True}, flags=["long", "causal", "tile-boundary"])
    x, m = case(rng, (2, 2), (3, 2), k=4)
    yield value("sdpa_varlen/defaults-001", "sdpa_varlen",
                "Defaults left out: scale 1/sqrt(K) = 1/2, causal False, no window.",
                inputs=x, attributes=m, omit_defaults=True, flags=["defaults"])
    x, m = case(rng, (2, 3), (4, 2))
    yield value("sdpa_varlen/scale-max-001", "sdpa_varlen",
                "scale = 0.25 and maxima larger than every length (max_seqlen_q = 8, "
                "max_seqlen_k = 9): a larger maximum is allowed and changes nothing.",
                inputs=x, attributes={"scale": 0.25, "max_seqlen_q": 8, "max_seqlen_k": 9},
                flags=["scale"])
    yield from error_cases(rng)
    yield from local_window_cases()


def error_cases(rng):
    x, m = case(rng, (2, 1), (2, 2))
    yield error("sdpa_varlen/offset-start-001", "sdpa_varlen",
                "cu_seqlens_q starts at 1, not 0.",
                inputs={**x, "cu_seqlens_q": np.array([1, 2, 3], dtype=np.int64)}, attributes=m,
                error="DomainError", mentions=["cu_seqlens_q", "0"])
    yield error("sdpa_varlen/offset-decreasing-001", "sdpa_varlen",
                "cu_seqlens_k decreases: (0, 3, 2).",
                inputs={**x, "cu_seqlens_k": np.array([0, 3, 2], dtype=np.int64)}, attributes=m,
                error="DomainError", mentions=["cu_seqlens_k", "decreas"])
    yield error("sdpa_varlen/offset-total-001", "sdpa_varlen",
                "cu_seqlens_k ends at 3 but k has 4 rows.",
                inputs={**x, "cu_seqlens_k": np.array([0, 2, 3], dtype=np.int64)}, attributes=m,
                error="ShapeError", mentions=["cu_seqlens_k", "(4, 2, 4)"])
    yield error("sdpa_varlen/offset-dtype-001", "sdpa_varlen",
                "cu_seqlens_q as floats.",
                inputs={**x, "cu_seqlens_q": np.array([0.0, 2.0, 3.0])}, attributes=m,
                error="DTypeError", mentions=["cu_seqlens_q"])
    yield error("sdpa_varlen/max-small-001", "sdpa_varlen",
                "max_seqlen_k = 1 but a sequence has 2 keys.",
                inputs=x, attributes={**m, "max_seqlen_k": 1},
                error="ConfigError", mentions=["max_seqlen_k", "2"])
    yield error("sdpa_varlen/batch-001", "sdpa_varlen",
                "cu_seqlens_q holds 2 sequences, cu_seqlens_k 1.",
                inputs={**x, "cu_seqlens_k": np.array([0, 4], dtype=np.int64)}, attributes=m,
                error="ShapeError", mentions=["cu_seqlens_k", "(2,)", "(3,)"])
    x, m = case(rng, (2,), (2,), h=4, h_kv=3)
    yield error("sdpa_varlen/gqa-divide-001", "sdpa_varlen",
                "H_kv = 3 does not divide H = 4.",
                inputs=x, attributes=m, error="ConfigError", mentions=["4", "3"])


def grad_cases(r):
    def grad(id, description, lengths_q, lengths_k, attrs=None, flags=(), omit=False, **kw):
        x, m = case(r, lengths_q, lengths_k, **kw)
        cot = {"output": r.uniform((x["q"].shape[0], x["q"].shape[1], x["v"].shape[2]))}
        return gradient(id, "sdpa_varlen", description, inputs=x, cotangents=cot,
                        attributes={**m, **(attrs or {})}, flags=["gradient", *flags],
                        omit_defaults=omit)

    yield grad("sdpa_varlen/grad-001", "Two sequences (2, 3) over (3, 2) keys: dk and dv of a "
               "sequence's keys come only from its own queries.", (2, 3), (3, 2), flags=["basic"])
    yield grad("sdpa_varlen/grad-002", "causal, T > S in sequence 0 (a zero row, no gradient from "
               "it), bottom-right.", (3, 2), (2, 3), {"causal": True}, flags=["causal", "t-ne-s"])
    yield grad("sdpa_varlen/grad-003", "GQA H = 4 over H_kv = 2 with window = 2: dk, dv summed over "
               "the two query heads of each kv head.", (3, 2), (3, 3), {"window": 2},
               flags=["gqa", "sliding-window"], h=4, h_kv=2)
    yield grad("sdpa_varlen/grad-004", "Defaults left out, a sequence with no keys and one with no "
               "queries between them.", (2, 2, 0), (2, 0, 2), flags=["defaults", "empty-axis"],
               omit=True)
    yield from local_window_grad_cases()


def local_window_grad_cases():
    r = Rng(f"{COMPONENT.id}/local-window-grad")
    x, m = case(r, (3, 4), (3, 4), h=4, h_kv=2)
    cot = {"output": r.uniform((x["q"].shape[0], x["q"].shape[1], x["v"].shape[2]))}
    yield gradient("sdpa_varlen/grad-005", "sdpa_varlen",
                   "window_left = 1, window_right = 1 (not causal), GQA H = 4 over H_kv = 2: a "
                   "key's dk, dv come from the queries before and after it, never from the next "
                   "sequence's.", inputs=x, cotangents=cot,
                   attributes={**m, "window_left": 1, "window_right": 1},
                   flags=["gradient", "sliding-window", "gqa"])


def local_window_cases():
    """window_left / window_right (flash-attn's window_size=(left, right)), added after the
    first cases: their own stream."""
    r = Rng(f"{COMPONENT.id}/local-window")
    x, m = case(r, (4, 3), (4, 3))
    yield value("sdpa_varlen/local-window-001", "sdpa_varlen",
                "window_left = 1, window_right = 1, not causal, two sequences of 4 and 3: query i "
                "sees its own sequence's keys i-1..i+1; the last query of sequence 0 must not "
                "read sequence 1's first key through right = 1, nor right be dropped.",
                inputs=x, attributes={**m, "window_left": 1, "window_right": 1},
                flags=["sliding-window", "boundary", "off-by-one"])
    x, m = case(r, (2, 3), (5, 3))
    yield value("sdpa_varlen/local-window-002", "sdpa_varlen",
                "window_left = 1, window_right = 2 with T_b != S_b: bottom-right per sequence (query "
                "i of sequence 0 at p = i + 3 sees keys p-1..p+2, clipped at its 5 keys); top-left "
                "(p = i) fails.", inputs=x, attributes={**m, "window_left": 1, "window_right": 2},
                flags=["sliding-window", "t-ne-s", "alignment"])
    x, m = case(r, (4, 2), (4, 3))
    yield value("sdpa_varlen/local-window-003", "sdpa_varlen",
                "window_left = 2, window_right = 2 with causal = True: as flash-attn, causal wins "
                "(right = 0): the window of 3 keys, window = 3.",
                inputs=x, attributes={**m, "causal": True, "window_left": 2, "window_right": 2},
                flags=["sliding-window", "causal"])
    x, m = case(r, (3, 3), (3, 4))
    yield value("sdpa_varlen/local-window-004", "sdpa_varlen",
                "window_left left out (unbounded, flash-attn's -1), window_right = 0: causal per "
                "sequence.", inputs=x, attributes={**m, "window_right": 0},
                flags=["sliding-window", "causal", "t-ne-s"])
    x, m = case(r, (2,), (3,))
    yield error("sdpa_varlen/local-window-negative-001", "sdpa_varlen",
                "window_left = -1 (flash-attn's unbounded is None here).",
                inputs=x, attributes={**m, "window_left": -1, "window_right": 0},
                error="ConfigError", mentions=["window_left"])
    yield error("sdpa_varlen/local-window-float-001", "sdpa_varlen", "window_right = 1.5.",
                inputs=x, attributes={**m, "window_left": 1, "window_right": 1.5},
                error="ConfigError", mentions=["window_right"])
