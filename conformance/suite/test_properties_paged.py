"""Invariants of paged_attention and paged_kv_append (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

# multiples of 2**-6 in [-2, 2]: exact at every dtype, so both sides start equal
exact = st.integers(-128, 128).map(lambda i: i * 2.0**-6)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=exact)


def pages(lens, page: int) -> list:
    return [-(-int(n) // page) for n in lens]


@st.composite
def paged(draw):
    """q (B, T, H, K), caches (N, P, H_kv, .), a block table whose rows take distinct blocks
    in a drawn order (unused entries: any integer), lengths in [0, 9], causal."""
    b, t, h_kv, g = (draw(st.integers(1, n)) for n in (3, 3, 2, 2))
    kw, vw, page = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    lens = draw(st.lists(st.integers(0, 9), min_size=b, max_size=b))
    need = pages(lens, page)
    m, n = max(1, *need), sum(need) + 1
    order = draw(st.permutations(range(n)))
    table = np.array(draw(st.lists(st.lists(st.integers(-3, 100), min_size=m, max_size=m),
                                   min_size=b, max_size=b)), dtype=np.int64)
    used = 0
    for row, k in enumerate(need):
        table[row, :k] = order[used:used + k]
        used += k
    return {"q": draw(arrays((b, t, h_kv * g, kw))), "k_cache": draw(arrays((n, page, h_kv, kw))),
            "v_cache": draw(arrays((n, page, h_kv, vw))), "block_table": table,
            "seq_lens": np.array(lens, dtype=np.int64)}, draw(st.booleans())


def gathered(cache, table, length: int):
    """(N, P, H_kv, D) -> (H_kv, L, D): the first L keys of one row in logical order."""
    page = cache.shape[1]
    return np.stack([cache[table[j // page], j % page] for j in range(length)], axis=1) \
        if length else np.zeros((cache.shape[2], 0, cache.shape[3]))


def bottom_right(t: int, s: int, causal: bool):
    """(T, S) bool: query i sits at position S - T + i."""
    return np.tri(t, s, s - t, dtype=bool) if causal else np.ones((t, s), dtype=bool)


@given(x=paged())
def test_paged_attention_equals_sdpa_on_the_gathered_keys(ops, x):
    x, causal = x
    out = ops.paged_attention(**x, causal=causal)  # (B, T, H, V)
    q = x["q"]
    for b, n in enumerate(x["seq_lens"]):
        want = np.zeros(q.shape[1:3] + x["v_cache"].shape[-1:])  # no key: zeros
        mask = bottom_right(q.shape[1], int(n), causal)
        if n and mask.any():
            o, _ = ops.sdpa(q=np.swapaxes(q[b], 0, 1)[None],
                            k=gathered(x["k_cache"], x["block_table"][b], int(n))[None],
                            v=gathered(x["v_cache"], x["block_table"][b], int(n))[None],
                            mask=mask, num_kv_heads=x["k_cache"].shape[2])  # (1, H, T, V)
            want = np.where(mask.any(axis=1)[:, None, None], np.swapaxes(o[0], 0, 1), 0)
        ops.assert_close(out[b], want, scale=8, what=f"sequence {b}")


@given(x=paged(), data=st.data())
def test_permuting_the_physical_pages_and_the_block_table_changes_nothing(ops, x, data):
    x, causal = x
    n = x["k_cache"].shape[0]
    perm = np.array(data.draw(st.permutations(range(n))))  # block i moves to perm[i]
    moved = {**x, "k_cache": np.empty_like(x["k_cache"]), "v_cache": np.empty_like(x["v_cache"])}
    moved["k_cache"][perm], moved["v_cache"][perm] = x["k_cache"], x["v_cache"]
    table = x["block_table"].copy()
    for b, k in enumerate(pages(x["seq_lens"], x["k_cache"].shape[1])):
        table[b, :k] = perm[table[b, :k]]
    moved["block_table"] = table
    ops.assert_close(ops.paged_attention(**moved, causal=causal),
                     ops.paged_attention(**x, causal=causal), scale=2, what="output")


@st.composite
def sequences(draw):
    """Keys, values and queries of B sequences of S positions (B, S, H, .), a prompt length,
    a page size and a shuffled block table with room for S keys."""
    b, s, h_kv, g = (draw(st.integers(1, n)) for n in (2, 6, 2, 2))
    kw, vw, page = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    m = -(-s // page)
    order = np.array(draw(st.permutations(range(b * m))), dtype=np.int64).reshape(b, m)
    return {"q": draw(arrays((b, s, h_kv * g, kw))), "k": draw(arrays((b, s, h_kv, kw))),
            "v": draw(arrays((b, s, h_kv, vw))), "table": order, "page": page,
            "prompt": draw(st.integers(1, s))}


@given(x=sequences())
def test_paged_decoding_append_then_attend_step_by_step_equals_full_causal_attention(ops, x):
    """The prompt appended and attended at once (causal, T = prompt), then one position per
    step: every query's output equals causal sdpa over the whole sequence."""
    q, k, v, table = x["q"], x["k"], x["v"], x["table"]
    b, s, h_kv = k.shape[:3]
    kc = np.zeros((table.size, x["page"], h_kv, k.shape[-1]))
    vc = np.zeros((table.size, x["page"], h_kv, v.shape[-1]))
    lens = np.zeros(b, dtype=np.int64)
    got, start = [], 0
    for stop in [x["prompt"], *range(x["prompt"] + 1, s + 1)]:
        kc, vc, lens = ops.paged_kv_append(k_cache=kc, v_cache=vc, block_table=table,
                                           seq_lens=lens, k=k[:, start:stop], v=v[:, start:stop])
        assert np.array_equal(np.asarray(lens), np.full(b, stop))
        got.append(ops.paged_attention(q=q[:, start:stop], k_cache=kc, v_cache=vc,
                                       block_table=table, seq_lens=lens, causal=True))
        start = stop
    want, _ = ops.sdpa(q=np.swapaxes(q, 1, 2), k=np.swapaxes(k, 1, 2), v=np.swapaxes(v, 1, 2),
                       mask=bottom_right(s, s, True), num_kv_heads=h_kv)  # (B, H, S, V)
    ops.assert_close(np.concatenate(got, axis=1), np.swapaxes(want, 1, 2), scale=8,
                     what="output")
