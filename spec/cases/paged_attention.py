"""paged_attention: attention of T new queries per sequence over a paged key/value cache read
through a block table (vLLM, FlashInfer, flash-attn's block_table)."""

import numpy as np

from ..oracle.paged_attention import paged_attention as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("paged_attention", {
    "paged_attention": Fn(module="attention",
                          inputs=["q", "k_cache", "v_cache", "block_table", "seq_lens"],
                          attributes={"scale": None, "causal": False},
                          returns=["output"], oracle=oracle),
})

NAME = "paged_attention"


def table(rows) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def inputs(rng, b, t, h, h_kv, blocks, page, rows, lens, k=4, v=3, lo=-4.0, hi=4.0):
    """q (B, T, H, K) and caches (N, P, H_kv, .) with q, k in [lo, hi] (peaked weights, so a
    key read from the wrong slot moves the output), v in [-2, 2]."""
    return {"q": rng.uniform((b, t, h, k), lo, hi, 2.0 ** -4),
            "k_cache": rng.uniform((blocks, page, h_kv, k), lo, hi, 2.0 ** -4),
            "v_cache": rng.uniform((blocks, page, h_kv, v)),
            "block_table": table(rows), "seq_lens": table(lens)}


def cases(rng):
    yield value(f"{NAME}/basic-001", NAME,
                "Decoding (T = 1), B = 2, H = H_kv = 2, page_size 4, 6 blocks, block tables "
                "[[2, 0, 5], [4, 1, 3]] (pages out of order), seq_lens (9, 6): a partial last "
                "page in each row; row 1's third entry is unused. Reading another row's table, "
                "the block after the right one, or the partial page to its end fails.",
                inputs=inputs(rng, 2, 1, 2, 2, 6, 4, [[2, 0, 5], [4, 1, 3]], [9, 6]),
                flags=["paged", "basic", "single-query", "decoder-step", "off-by-one"])
    yield value(f"{NAME}/shuffled-001", NAME,
                "T = 3 queries, not causal, page_size 2, a block table [[7, 3, 5, 0]] in no "
                "order and 7 keys: key j is at block table[j // 2], offset j % 2; every query "
                "sees all 7 keys (a causal mask would hide some).",
                inputs=inputs(rng, 1, 3, 2, 1, 8, 2, [[7, 3, 5, 0]], [7]),
                flags=["paged", "mqa", "t-ne-s"])
    yield value(f"{NAME}/causal-gqa-001", NAME,
                "causal with T = 3 new queries per sequence (the last three positions: "
                "query t sees keys j <= L - 3 + t, bottom-right), H = 4 over H_kv = 2 (query "
                "head h reads kv head h // 2), page_size 3, seq_lens (5, 8).",
                inputs=inputs(rng, 2, 3, 4, 2, 6, 3, [[1, 4, 0], [5, 3, 2]], [5, 8]),
                attributes={"causal": True}, flags=["paged", "causal", "gqa", "head-grouping"])
    yield value(f"{NAME}/shared-prefix-001", NAME,
                "Two sequences share their first two pages (a common prompt: block table rows "
                "[[3, 0, 4], [3, 0, 1]]) and diverge in the third; page_size 2, seq_lens (6, 5), "
                "T = 2, causal.",
                inputs=inputs(rng, 2, 2, 2, 2, 5, 2, [[3, 0, 4], [3, 0, 1]], [6, 5]),
                attributes={"causal": True}, flags=["paged", "shared-page", "causal"])
    x = inputs(rng, 2, 1, 2, 1, 5, 4, [[3, -1, 99], [0, 4, -7]], [3, 6])
    x["k_cache"][3, 3] = np.nan  # past seq_len 3 in row 0's partial page
    x["v_cache"][3, 3] = np.inf
    x["k_cache"][1], x["v_cache"][1] = np.nan, np.inf  # a page no row reads
    yield value(f"{NAME}/unused-001", NAME,
                "Unused block-table entries hold -1, 99 and -7 (never read, never checked); "
                "row 0's partial page holds NaN / inf past seq_len 3 and block 1 (read by no "
                "row) is NaN / inf: the output is finite. Reading a slot past seq_len fails.",
                inputs=x, flags=["paged", "masked-nan", "non-finite", "tail"])
    yield value(f"{NAME}/empty-001", NAME,
                "seq_lens (0, 1, 6) with T = 2, causal: row 0 has no key (zero output), row 1's "
                "first query sits at position -1 and sees no key (zero), its second sees key 0.",
                inputs=inputs(rng, 3, 2, 2, 2, 5, 4, [[4, 4], [2, 0], [1, 3]], [0, 1, 6]),
                attributes={"causal": True}, flags=["paged", "empty", "fully-masked", "edge"])
    yield value(f"{NAME}/scale-001", NAME,
                "page_size 1 (a page per key), block table [[5, 2, 6, 0, 3]], 5 keys, an "
                "explicit scale 0.25 with K = 4 (not 1/2), T = 2, not causal.",
                inputs=inputs(rng, 1, 2, 2, 2, 7, 1, [[5, 2, 6, 0, 3]], [5]),
                attributes={"scale": 0.25}, flags=["paged", "scale"])
    yield value(f"{NAME}/defaults-001", NAME,
                "Every attribute left out: scale 1/sqrt(4) and not causal, T = 2 queries over "
                "6 keys with q, k in [-8, 8]: a default scale of 1, or causal by default, fails.",
                inputs=inputs(Rng(f"{NAME}/defaults"), 1, 2, 2, 2, 4, 4, [[2, 0]], [6],
                              lo=-8.0, hi=8.0),
                flags=["paged", "defaults"], omit_defaults=True)

    x = inputs(rng, 2, 1, 2, 2, 6, 4, [[2, 0, 5], [4, 6, 3]], [9, 6])
    yield error(f"{NAME}/block-range-001", NAME,
                "block_table[1, 1] = 6 is read (seq_len 6 needs two pages) but k_cache has 6 "
                "blocks (0..5).", inputs=x, error="DomainError",
                mentions=["block_table[1, 1]", "6"])
    yield error(f"{NAME}/seq-len-001", NAME,
                "seq_lens[0] = 13 exceeds the 3 pages x page_size 4 = 12 the table holds.",
                inputs={**x, "block_table": table([[2, 0, 5], [4, 1, 3]]),
                        "seq_lens": table([13, 6])},
                error="DomainError", mentions=["seq_lens[0]", "13", "12"])
    yield error(f"{NAME}/table-dtype-001", NAME, "A floating block_table is refused.",
                inputs={**x, "block_table": np.array([[2.0, 0.0, 5.0], [4.0, 1.0, 3.0]])},
                error="DTypeError", mentions=["block_table"])
    yield error(f"{NAME}/kv-heads-001", NAME, "k_cache has H_kv = 3, not dividing H = 2.",
                inputs=inputs(rng, 1, 1, 2, 3, 2, 4, [[0, 1]], [5]),
                error="ConfigError", mentions=["H_kv = 3", "H = 2"])
    y = inputs(rng, 1, 1, 2, 2, 2, 4, [[0, 1]], [5])
    yield error(f"{NAME}/cache-shape-001", NAME,
                "v_cache with page_size 2 against k_cache's 4.",
                inputs={**y, "v_cache": rng.uniform((2, 2, 2, 3))}, error="ShapeError",
                mentions=["v_cache", "(2, 2, 2, 3)"])


def grad_cases(r):
    yield gradient(f"{NAME}/grad-001", NAME,
                   "Decoding, pages [[2, 0, 5], [4, 1, 3]] of size 2 out of order, seq_lens "
                   "(5, 4): dk_cache, dv_cache are scattered back through the table; slots never "
                   "read (block 3, slot 1 of block 5) get zero.",
                   inputs=inputs(r, 2, 1, 2, 2, 6, 2, [[2, 0, 5], [4, 1, 3]], [5, 4],
                                 lo=-2.0, hi=2.0),
                   cotangents={"output": r.uniform((2, 1, 2, 3))}, flags=["gradient", "paged"])
    yield gradient(f"{NAME}/grad-002", NAME,
                   "A shared prefix page (block 0 in both rows), causal T = 2: the shared "
                   "slots' gradients are the sums over both sequences.",
                   inputs=inputs(r, 2, 2, 2, 2, 4, 2, [[0, 3], [0, 1]], [4, 3],
                                 lo=-2.0, hi=2.0),
                   attributes={"causal": True}, cotangents={"output": r.uniform((2, 2, 2, 3))},
                   flags=["gradient", "paged", "shared-page", "causal"])
    yield gradient(f"{NAME}/grad-003", NAME,
                   "H = 4 over H_kv = 2 with scale 0.25: a kv head's slot gradient sums its "
                   "two query heads.",
                   inputs=inputs(r, 1, 2, 4, 2, 3, 2, [[2, 0, 1]], [5], lo=-2.0, hi=2.0),
                   attributes={"scale": 0.25}, cotangents={"output": r.uniform((1, 2, 4, 3))},
                   flags=["gradient", "paged", "gqa", "scale"])
    yield gradient(f"{NAME}/grad-004", NAME,
                   "Every attribute left out (scale 1/sqrt(16), not causal), T = 2.",
                   inputs=inputs(r, 1, 2, 2, 1, 3, 2, [[1, 2]], [4], k=16, lo=-2.0, hi=2.0),
                   cotangents={"output": r.uniform((1, 2, 2, 3))},
                   flags=["gradient", "defaults"], omit_defaults=True)
