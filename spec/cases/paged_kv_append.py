"""paged_kv_append: the decoding step that writes T new keys and values per sequence into a
paged cache through its block table and returns the new caches and lengths."""

import numpy as np

from ..oracle.paged_attention import paged_kv_append as oracle
from ._build import Component, Fn, error, value

COMPONENT = Component("paged_kv_append", {
    "paged_kv_append": Fn(module="attention",
                          inputs=["k_cache", "v_cache", "block_table", "seq_lens", "k", "v"],
                          returns=["k_cache", "v_cache", "seq_lens"], oracle=oracle),
})

NAME = "paged_kv_append"


def table(rows) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def inputs(rng, b, t, h_kv, blocks, page, rows, lens, k=4, v=3):
    return {"k_cache": rng.uniform((blocks, page, h_kv, k)),
            "v_cache": rng.uniform((blocks, page, h_kv, v)),
            "block_table": table(rows), "seq_lens": table(lens),
            "k": rng.uniform((b, t, h_kv, k)), "v": rng.uniform((b, t, h_kv, v))}


def cases(rng):
    yield value(f"{NAME}/basic-001", NAME,
                "One new key per sequence (T = 1), page_size 4, tables [[2, 0], [3, 1]], "
                "seq_lens (5, 2): row 0 writes block 0 offset 1, row 1 block 3 offset 2; "
                "lengths become (6, 3). Writing at seq_len - 1 or through the wrong row fails.",
                inputs=inputs(rng, 2, 1, 2, 4, 4, [[2, 0], [3, 1]], [5, 2]),
                flags=["paged", "basic", "decoder-step", "off-by-one"])
    yield value(f"{NAME}/boundary-001", NAME,
                "T = 3 from seq_len 3, page_size 4, table [[1, 3, 0]]: positions 3, 4, 5 go to "
                "block 1 offset 3, then block 3 offsets 0 and 1 (crossing a page boundary).",
                inputs=inputs(rng, 1, 3, 1, 4, 4, [[1, 3, 0]], [3]),
                flags=["paged", "boundary"])
    yield value(f"{NAME}/empty-001", NAME,
                "Empty sequences (seq_lens 0): T = 2 keys go to offsets 0 and 1 of each row's "
                "first page; unused entries hold -1.",
                inputs=inputs(rng, 2, 2, 2, 3, 2, [[2, -1], [0, -1]], [0, 0]),
                flags=["paged", "empty", "edge"])
    yield value(f"{NAME}/shared-prefix-001", NAME,
                "Rows share the full first page (block 0, page_size 2, seq_lens (3, 2)) and "
                "append into their own pages: the shared page is unchanged.",
                inputs=inputs(rng, 2, 1, 1, 3, 2, [[0, 2], [0, 1]], [3, 2]),
                flags=["paged", "shared-page"])
    yield value(f"{NAME}/page-size-1-001", NAME,
                "page_size 1: each new key takes a whole page; T = 2, table [[4, 1, 3, 0]], "
                "seq_len 2: positions 2, 3 go to blocks 3 and 0.",
                inputs=inputs(rng, 1, 2, 2, 5, 1, [[4, 1, 3, 0]], [2]),
                flags=["paged", "edge"])
    yield value(f"{NAME}/fill-001", NAME,
                "Appending exactly up to the table's capacity: seq_len 5 + T = 3 = 2 pages x 4; "
                "K = 2 and V = 5 widths differ.",
                inputs=inputs(rng, 1, 3, 2, 3, 4, [[2, 1]], [5], k=2, v=5),
                flags=["paged", "boundary", "k-ne-v"])

    x = inputs(rng, 2, 2, 2, 4, 4, [[2, 0], [3, 1]], [7, 2])
    yield error(f"{NAME}/full-001", NAME,
                "seq_lens[0] = 7 with T = 2 needs 9 slots; the table holds 2 x 4 = 8.",
                inputs=x, error="DomainError", mentions=["seq_lens[0]", "7"])
    yield error(f"{NAME}/shared-write-001", NAME,
                "Both rows' next slot is block 0 offset 2 (a shared page written twice): "
                "refused, the caller copies the page first.",
                inputs={**x, "block_table": table([[0, 1], [0, 3]]), "seq_lens": table([2, 2])},
                error="DomainError", mentions=["block 0 offset 2", "twice"])
    yield error(f"{NAME}/block-range-001", NAME,
                "block_table[1, 1] = -1 is the page position 4 goes to.",
                inputs={**x, "block_table": table([[2, 0], [3, -1]]), "seq_lens": table([1, 3])},
                error="DomainError", mentions=["block_table[1, 1]", "-1"])
    yield error(f"{NAME}/lens-dtype-001", NAME, "Floating seq_lens are refused.",
                inputs={**x, "seq_lens": np.array([1.0, 2.0])},
                error="DTypeError", mentions=["seq_lens"])
    yield error(f"{NAME}/k-shape-001", NAME, "k has H_kv = 1, the caches 2.",
                inputs={**x, "seq_lens": table([1, 2]), "k": rng.uniform((2, 2, 1, 4))},
                error="ShapeError", mentions=["k", "(2, 2, 1, 4)"])
