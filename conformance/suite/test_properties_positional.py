"""Invariants of the positional components (hypothesis). Each test name is the invariant."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

unit = st.floats(-2, 2, allow_nan=False, width=32)
even_width = st.integers(1, 8).map(lambda h: 2 * h)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=unit)


# -- sinusoidal_pe --------------------------------------------------------------------


@given(d=even_width, length=st.integers(1, 6), offset=st.integers(0, 60), k=st.integers(0, 9))
def test_sinusoidal_pe_shift_by_k_is_a_fixed_block_rotation(ops, d, length, offset, k):
    """PE(pos + k) = R(k) PE(pos), R(k) block-diagonal rotations by k * 10000^(-2i/D),
    the same for every pos."""
    pe = ops.sinusoidal_pe(length=length + k, d_model=d, offset=offset)
    w = k * 10000.0 ** (-2.0 * np.arange(d // 2) / d)  # (D/2,)
    s, c = pe[:length, 0::2], pe[:length, 1::2]  # sin, cos of pos * omega_i
    # sin(a + b) = sin a cos b + cos a sin b,  cos(a + b) = cos a cos b - sin a sin b
    shifted = np.stack([s * np.cos(w) + c * np.sin(w), c * np.cos(w) - s * np.sin(w)], -1)
    ops.assert_close(pe[k:], shifted.reshape(length, d), scale=4)


@given(half=st.integers(0, 7), length=st.integers(1, 6), offset=st.integers(0, 60),
       k=st.integers(0, 9))
def test_sinusoidal_pe_odd_width_rotates_its_pairs_and_ends_in_a_lone_sin(ops, half, length,
                                                                         offset, k):
    """Odd D: columns 0..D-2 shift by the same block rotations, with omega_i = 10000^(-2i/D)
    for the actual (odd) D; the last column is sin(pos * 10000^(-(D-1)/D)), no cos partner."""
    d = 2 * half + 1
    pe = ops.sinusoidal_pe(length=length + k, d_model=d, offset=offset)
    omega = 10000.0 ** (-2.0 * np.arange(half + 1) / d)  # (D//2 + 1,)
    w = k * omega[:half]
    s, c = pe[:length, 0:d - 1:2], pe[:length, 1::2]  # sin, cos of pos * omega_i
    shifted = np.stack([s * np.cos(w) + c * np.sin(w), c * np.cos(w) - s * np.sin(w)], -1)
    ops.assert_close(pe[k:, :d - 1], shifted.reshape(length, d - 1), scale=4)
    pos = np.arange(offset, offset + length + k)
    ops.assert_close(pe[:, -1], np.sin(pos * omega[half]), scale=4)


@given(d=st.integers(1, 16), length=st.integers(0, 6), offset=st.integers(0, 40))
def test_sinusoidal_pe_offset_equals_slice_of_longer_table(ops, d, length, offset):
    longer = ops.sinusoidal_pe(length=offset + length, d_model=d)
    ops.assert_close(ops.sinusoidal_pe(length=length, d_model=d, offset=offset),
                     longer[offset:])


@given(d=st.integers(1, 16), length=st.integers(1, 8), offset=st.integers(0, 10**5))
def test_sinusoidal_pe_values_in_unit_interval(ops, d, length, offset):
    pe = ops.sinusoidal_pe(length=length, d_model=d, offset=offset)
    assert pe.shape == (length, d)
    assert np.all(np.abs(pe) <= 1)


@given(d=even_width, length=st.integers(1, 6), offset=st.integers(0, 60))
def test_sinusoidal_pe_sin_cos_pairs_have_unit_norm(ops, d, length, offset):
    pe = ops.sinusoidal_pe(length=length, d_model=d, offset=offset)
    ops.assert_close(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, np.ones((length, d // 2)), scale=4)


# -- learned_pe -----------------------------------------------------------------------


@given(max_len=st.integers(1, 9), d=st.integers(1, 8), data=st.data())
def test_learned_pe_equals_table_row_lookup(ops, max_len, d, data):
    table = data.draw(arrays((max_len, d)))
    positions = data.draw(hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=3,
                                                                max_side=4),
                                     elements=st.integers(0, max_len - 1)))
    pe = ops.learned_pe(positions=positions, params={"table": table})
    assert pe.shape == positions.shape + (d,)
    for idx in np.ndindex(positions.shape):
        ops.assert_close(pe[idx], table[positions[idx]])


# -- rope -------------------------------------------------------------------------------

conventions = st.sampled_from(["interleaved", "half"])


@given(k=even_width, t=st.integers(1, 5), offset=st.integers(0, 100), convention=conventions,
       data=st.data())
def test_rope_preserves_norms_of_feature_pairs(ops, k, t, offset, convention, data):
    x = data.draw(arrays((2, t, k)))
    y = ops.rope(x=x, offset=offset, convention=convention)

    def pair_norms(a):
        if convention == "interleaved":
            return a[..., 0::2] ** 2 + a[..., 1::2] ** 2
        return a[..., : k // 2] ** 2 + a[..., k // 2:] ** 2

    ops.assert_close(pair_norms(y), pair_norms(x), scale=4)
    ops.assert_close(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), scale=4)


@given(k=even_width, p=st.integers(0, 40), p2=st.integers(0, 40), c=st.integers(0, 40),
       convention=conventions, data=st.data())
def test_rope_scores_depend_only_on_relative_position(ops, k, p, p2, c, convention, data):
    """<rope(q, p), rope(k, p')> == <rope(q, p + c), rope(k, p' + c)>."""
    q, kk = data.draw(arrays((1, k))), data.draw(arrays((1, k)))

    def score(pq, pk):
        return float(np.sum(ops.rope(x=q, offset=pq, convention=convention)
                            * ops.rope(x=kk, offset=pk, convention=convention)))

    bound = float(np.linalg.norm(q) * np.linalg.norm(kk))
    ops.assert_close(score(p + c, p2 + c), score(p, p2), scale=8 * max(bound, 1))


@given(k=even_width, t=st.integers(1, 5), offset=st.integers(0, 60), data=st.data())
def test_rope_conventions_equal_up_to_feature_permutation(ops, k, t, offset, data):
    """half(x[..., P]) == interleaved(x)[..., P] with P = (0, 2, 4, ..., 1, 3, 5, ...)."""
    x = data.draw(arrays((t, k)))
    perm = np.concatenate([np.arange(0, k, 2), np.arange(1, k, 2)])
    ops.assert_close(ops.rope(x=x[..., perm], offset=offset, convention="half"),
                     ops.rope(x=x, offset=offset, convention="interleaved")[..., perm], scale=4)


@given(k=even_width, convention=conventions, data=st.data())
def test_rope_at_position_zero_is_identity(ops, k, convention, data):
    x = data.draw(arrays((3, 1, k)))
    ops.assert_close(ops.rope(x=x, convention=convention), x)


# -- relative_attention -----------------------------------------------------------------

dims = st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 5), st.integers(1, 6),
                 st.integers(1, 6), st.integers(0, 4))  # B, T, S, K, V, m


def _qkv_mask(data, b, t, s, kw, vw):
    q, k, v = data.draw(arrays((b, t, kw))), data.draw(arrays((b, s, kw))), \
        data.draw(arrays((b, s, vw)))
    mask = data.draw(hnp.arrays(np.bool_, (b, t, s)))
    return q, k, v, mask


@given(shape=dims, data=st.data())
def test_relative_attention_with_zero_tables_equals_sdpa(ops, shape, data):
    b, t, s, kw, vw, m = shape
    q, k, v, mask = _qkv_mask(data, b, t, s, kw, vw)
    zero = {"rel_k": np.zeros((2 * m + 1, kw)), "rel_v": np.zeros((2 * m + 1, vw))}
    out, w = ops.relative_attention(q=q, k=k, v=v, mask=mask, max_distance=m, params=zero)
    out_ref, w_ref = ops.sdpa(q=q, k=k, v=v, mask=mask)
    ops.assert_close(w, w_ref, scale=4)
    ops.assert_close(out, out_ref, scale=4)


@given(shape=dims, data=st.data())
def test_relative_attention_with_constant_tables_equals_sdpa_on_shifted_keys_and_values(
        ops, shape, data):
    """Every row of rel_k equal to a, of rel_v equal to c: attention over k + a and v + c."""
    b, t, s, kw, vw, m = shape
    q, k, v, _ = _qkv_mask(data, b, t, s, kw, vw)
    a, c = data.draw(arrays((kw,))), data.draw(arrays((vw,)))
    tables = {"rel_k": np.tile(a, (2 * m + 1, 1)), "rel_v": np.tile(c, (2 * m + 1, 1))}
    out, w = ops.relative_attention(q=q, k=k, v=v, max_distance=m, params=tables)
    out_ref, w_ref = ops.sdpa(q=q, k=k + a, v=v + c)
    ops.assert_close(w, w_ref, scale=4)
    ops.assert_close(out, out_ref, scale=8)


@given(shape=dims, data=st.data())
def test_relative_attention_weights_are_a_masked_distribution(ops, shape, data):
    b, t, s, kw, vw, m = shape
    q, k, v, mask = _qkv_mask(data, b, t, s, kw, vw)
    tables = {"rel_k": data.draw(arrays((2 * m + 1, kw))),
              "rel_v": data.draw(arrays((2 * m + 1, vw)))}
    out, w = ops.relative_attention(q=q, k=k, v=v, mask=mask, max_distance=m, params=tables)
    assert np.all(w >= 0) and np.all(w[~mask] == 0)
    kept = mask.any(axis=-1)
    ops.assert_close(w.sum(-1)[kept], np.ones(int(kept.sum())), scale=4)
    assert np.all(out[~kept] == 0)


# -- alibi ----------------------------------------------------------------------------


@given(h_exp=st.integers(0, 4), t=st.integers(1, 5), extra=st.integers(0, 4))
def test_alibi_for_h_a_power_of_two_is_geometric_slopes_times_distance(ops, h_exp, t, extra):
    """H = 2^e: bias[h, i, j] = -2^(-8 (h + 1) / H) (i + S - T - j)."""
    H, s = 2 ** h_exp, t + extra
    m = 2.0 ** (-8.0 * np.arange(1, H + 1) / H)
    dist = np.arange(t)[:, None] + extra - np.arange(s)[None, :]
    ops.assert_close(ops.alibi_bias(num_heads=H, t=t, s=s), -m[:, None, None] * dist)


@given(h=st.integers(1, 20))
def test_alibi_slopes_of_h_heads_are_a_permutation_of_a_subset_of_2p_heads(ops, h):
    """The paper's rule: the slopes of H heads are the P slopes of P = 2^floor(log2 H) heads
    and H - P of the 2P-head slopes, all distinct and in (0, 1)."""
    def slope(n):
        return -np.asarray(ops.alibi_bias(num_heads=n, t=1, s=2), np.float64)[:, 0, 0]

    m = slope(h)
    p = 1 << (h.bit_length() - 1)
    assert np.all((m > 0) & (m < 1)) and len(np.unique(m)) == h
    ops.assert_close(m[:p], slope(p))
    if h > p:
        ops.assert_close(m[p:], slope(2 * p)[0::2][:h - p])


def paper_slopes(n: int) -> np.ndarray:
    """ALiBi's head slopes from the paper (Press et al. 2022, section 3, and its
    get_slopes): for n a power of two 2^(-8 (h + 1) / n), h = 0..n-1; otherwise the slopes
    of P = 2^floor(log2 n) heads followed by the first n - P even-indexed slopes of 2P heads."""
    p = 1 << (n.bit_length() - 1)
    first = [2.0 ** (-8.0 * (h + 1) / p) for h in range(p)]
    return np.array(first if p == n else first + list(paper_slopes(2 * p)[0::2][:n - p]))


@given(h=st.integers(1, 12), t=st.integers(1, 5), extra=st.integers(0, 4), seed=st.integers(0, 99))
def test_alibi_in_sdpa_equals_the_key_position_bias_of_fairseq_and_bloom(ops, h, t, extra, seed):
    """Under a causal mask, softmax ignores a per-row constant: the backend's bias
    -m (p - j) gives the same attention as the m j bias (fairseq, BLOOM), with the slopes m
    computed here from the paper (not read back from the backend's bias)."""
    s = t + extra
    r = np.random.default_rng(seed)
    q, k, v = r.uniform(-1, 1, (h, t, 4)), r.uniform(-1, 1, (h, s, 4)), r.uniform(-1, 1, (h, s, 3))
    bias = np.asarray(ops.alibi_bias(num_heads=h, t=t, s=s), np.float64)
    m = paper_slopes(h)                                                      # (H,)
    key_pos = m[:, None, None] * np.arange(s)[None, None, :] * np.ones((h, t, 1))  # (H, T, S)
    mask = ops.causal_mask(t=t, s=s)
    out, _ = ops.sdpa(q=q, k=k, v=v, mask=mask, bias=bias)
    out2, _ = ops.sdpa(q=q, k=k, v=v, mask=mask, bias=key_pos)
    ops.assert_close(out, out2, scale=8)

