"""Invariants of local_window_mask (left, right) and chunked_mask (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

lengths = st.integers(0, 7)
sides = st.one_of(st.none(), st.integers(0, 8))
# multiples of 2**-6 in [-2, 2]: exact at every dtype
exact = st.integers(-128, 128).map(lambda i: i * 2.0**-6)


def local(ops, t, s, left, right):
    return np.asarray(ops.local_window_mask(t=t, s=s, left=left, right=right))


def chunked(ops, t, s, chunk, causal=True):
    return np.asarray(ops.chunked_mask(t=t, s=s, chunk=chunk, causal=causal))


@given(t=lengths, s=lengths, left=sides, right=sides)
def test_local_window_row_is_the_keys_from_p_minus_left_to_p_plus_right(ops, t, s, left, right):
    """Row i keeps exactly the keys j in [p - left, p + right], p = i + s - t, a None side
    unbounded: a (T, S) bool mask."""
    mask = local(ops, t, s, left, right)
    assert mask.shape == (t, s) and mask.dtype == np.bool_
    j = np.arange(s)
    for i in range(t):
        p = i + s - t
        lo = -np.inf if left is None else p - left
        hi = np.inf if right is None else p + right
        assert np.array_equal(mask[i], (j >= lo) & (j <= hi)), (i, mask[i])


@given(t=lengths, s=lengths)
def test_local_window_unbounded_left_and_right_zero_is_causal(ops, t, s):
    assert np.array_equal(local(ops, t, s, None, 0), np.asarray(ops.causal_mask(t=t, s=s)))


@given(t=lengths, s=lengths)
def test_local_window_both_sides_unbounded_is_all_true(ops, t, s):
    assert np.array_equal(local(ops, t, s, None, None), np.ones((t, s), dtype=bool))


@given(t=lengths, s=lengths, w=st.integers(1, 9))
def test_sliding_window_of_w_is_local_window_left_w_minus_1_right_0(ops, t, s, w):
    want = np.asarray(ops.sliding_window_mask(t=t, s=s, window=w))
    assert np.array_equal(local(ops, t, s, w - 1, 0), want)


@given(t=st.integers(1, 6), s=st.integers(1, 6), left=sides, right=sides)
def test_local_window_transposed_swaps_left_and_right(ops, t, s, left, right):
    """For T = S the band's transpose is the band with left and right exchanged."""
    n = max(t, s)
    assert np.array_equal(local(ops, n, n, left, right).T, local(ops, n, n, right, left))


@given(t=st.integers(1, 6), extra=st.integers(0, 4), left=sides, right=sides)
def test_local_window_with_a_cache_is_the_last_rows_of_the_full_mask(ops, t, extra, left, right):
    s = t + extra
    assert np.array_equal(local(ops, t, s, left, right), local(ops, s, s, left, right)[extra:])


@given(t=lengths, s=lengths, chunk=st.integers(1, 9), causal=st.booleans())
def test_chunked_row_is_the_queries_chunk_cut_at_the_query_when_causal(ops, t, s, chunk, causal):
    """Row i keeps the keys j with j // C == p // C (floor), and j <= p when causal."""
    mask = chunked(ops, t, s, chunk, causal)
    assert mask.shape == (t, s) and mask.dtype == np.bool_
    j = np.arange(s)
    for i in range(t):
        p = i + s - t
        want = (j // chunk == p // chunk) & ((j <= p) | (not causal))
        assert np.array_equal(mask[i], want), (i, mask[i])


@given(t=lengths, s=lengths, extra=st.integers(0, 3))
def test_chunked_with_chunk_at_least_s_is_causal(ops, t, s, extra):
    assert np.array_equal(chunked(ops, t, s, s + extra + (s == 0)),
                          np.asarray(ops.causal_mask(t=t, s=s)))


@given(t=lengths, s=lengths, chunk=st.integers(1, 9))
def test_chunked_causal_is_chunked_and_causal(ops, t, s, chunk):
    assert np.array_equal(chunked(ops, t, s, chunk, True),
                          chunked(ops, t, s, chunk, False) & np.asarray(ops.causal_mask(t=t, s=s)))


@given(t=lengths, s=lengths, chunk=st.integers(1, 9))
def test_chunked_defaults_to_causal(ops, t, s, chunk):
    assert np.array_equal(np.asarray(ops.chunked_mask(t=t, s=s, chunk=chunk)),
                          chunked(ops, t, s, chunk, True))


@st.composite
def problems(draw):
    t, s = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    k, v = draw(st.integers(1, 3)), draw(st.integers(1, 3))

    def arr(shape):
        return draw(hnp.arrays(np.float64, shape, elements=exact))
    return arr((t, k)), arr((s, k)), arr((s, v))


def _rows_over_visible_keys(ops, q, k, v, mask):
    """sdpa of each query row over only the keys its mask row keeps (zeros when none)."""
    rows = []
    for i in range(q.shape[0]):
        keep = mask[i]
        if not keep.any():
            rows.append(np.zeros(v.shape[-1]))
            continue
        out, _ = ops.sdpa(q=q[i:i + 1], k=k[keep], v=v[keep])
        rows.append(np.asarray(out)[0])
    return np.stack(rows)


@given(x=problems(), left=sides, right=sides)
def test_sdpa_with_a_local_window_equals_sdpa_over_the_visible_keys(ops, x, left, right):
    q, k, v = x
    mask = local(ops, q.shape[0], k.shape[0], left, right)
    out, _ = ops.sdpa(q=q, k=k, v=v, mask=mask)
    ops.assert_close(np.asarray(out), _rows_over_visible_keys(ops, q, k, v, mask), scale=8)


@given(x=problems(), chunk=st.integers(1, 4), causal=st.booleans())
def test_sdpa_with_a_chunked_mask_equals_sdpa_over_the_visible_keys(ops, x, chunk, causal):
    q, k, v = x
    mask = chunked(ops, q.shape[0], k.shape[0], chunk, causal)
    out, _ = ops.sdpa(q=q, k=k, v=v, mask=mask)
    ops.assert_close(np.asarray(out), _rows_over_visible_keys(ops, q, k, v, mask), scale=8)


@st.composite
def packed_batches(draw):
    """Two or three sequences: q (total_q, H, K), k, v (total_k, H, .), their lengths."""
    tq = draw(st.lists(st.integers(0, 4), min_size=2, max_size=3))
    tk = draw(st.lists(st.integers(0, 4), min_size=len(tq), max_size=len(tq)))
    h, k, v = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))

    def arr(shape):
        return draw(hnp.arrays(np.float64, shape, elements=exact))
    return arr((sum(tq), h, k)), arr((sum(tk), h, k)), arr((sum(tk), h, v)), tq, tk


@given(x=packed_batches(), left=sides, right=sides, causal=st.booleans())
def test_sdpa_varlen_window_left_right_is_sdpa_per_sequence_with_its_local_window(
        ops, x, left, right, causal):
    """Sequence b's rows: sdpa of its queries over its keys under local_window_mask(T_b, S_b,
    left, right), met with causal (right = 0): flash-attn's window_size per sequence."""
    q, k, v, tq, tk = x
    cq, ck = np.cumsum([0, *tq]), np.cumsum([0, *tk])
    out = np.asarray(ops.sdpa_varlen(q=q, k=k, v=v, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                     max_seqlen_q=max(tq), max_seqlen_k=max(tk), causal=causal,
                                     window_left=left, window_right=right))
    for b in range(len(tq)):
        if tq[b] == 0:
            continue
        rows = slice(cq[b], cq[b + 1])
        keys = slice(ck[b], ck[b + 1])
        band_right = 0 if causal and (left, right) != (None, None) else right
        mask = local(ops, tq[b], tk[b], left, band_right)
        if causal and (left, right) == (None, None):
            mask = np.asarray(ops.causal_mask(t=tq[b], s=tk[b]))
        want = np.stack([_rows_over_visible_keys(ops, q[rows, h], k[keys, h], v[keys, h], mask)
                         for h in range(q.shape[1])], axis=1)  # (T_b, H, V)
        ops.assert_close(out[rows], want, scale=8)
