"""Invariants of masks, sdpa, topk_attention and attention_entropy (hypothesis).

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
sizes = st.integers(1, 5)
batches = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=exact)


@st.composite
def qkv(draw, min_t=1):
    batch, t, s = draw(batches), draw(st.integers(min_t, 5)), draw(sizes)
    kw, vw = draw(sizes), draw(sizes)
    q = draw(arrays(batch + (t, kw)))
    k = draw(arrays(batch + (s, kw)))
    v = draw(arrays(batch + (s, vw)))
    return q, k, v


# -- sdpa ----------------------------------------------------------------------


@given(x=qkv(), data=st.data())
def test_sdpa_key_value_permutation_invariance(ops, x, data):
    """Permuting keys and values (and the mask columns) together leaves the output unchanged."""
    q, k, v = x
    s = k.shape[-2]
    perm = np.array(data.draw(st.permutations(range(s))))
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], s)))
    out, w = ops.sdpa(q=q, k=k, v=v, mask=mask)
    out_p, w_p = ops.sdpa(q=q, k=k[..., perm, :], v=v[..., perm, :], mask=mask[:, perm])
    ops.assert_close(out_p, out, scale=8)
    ops.assert_close(w_p, w[..., perm], scale=8)


@given(x=qkv(), data=st.data())
def test_sdpa_query_permutation_equivariance(ops, x, data):
    """Permuting the queries permutes the output rows and nothing else."""
    q, k, v = x
    perm = np.array(data.draw(st.permutations(range(q.shape[-2]))))
    out, w = ops.sdpa(q=q, k=k, v=v)
    out_p, w_p = ops.sdpa(q=q[..., perm, :], k=k, v=v)
    ops.assert_close(out_p, out[..., perm, :], scale=8)
    ops.assert_close(w_p, w[..., perm, :], scale=8)


@given(x=qkv(), data=st.data())
def test_sdpa_boolean_mask_equals_minus_inf_bias(ops, x, data):
    """mask False is the same as an additive bias of -inf (fully masked rows: zeros both ways)."""
    q, k, v = x
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], k.shape[-2])))
    bias = np.where(mask, 0.0, -np.inf)
    out_m, w_m = ops.sdpa(q=q, k=k, v=v, mask=mask)
    out_b, w_b = ops.sdpa(q=q, k=k, v=v, bias=bias)
    ops.assert_close(out_b, out_m)
    ops.assert_close(w_b, w_m)
    assert np.all(w_m[..., ~mask] == 0) and np.all(w_b[..., ~mask] == 0)


@given(x=qkv(), data=st.data())
def test_sdpa_weights_rows_sum_to_one_or_zero(ops, x, data):
    """Each weight row is >= 0 and sums to 1, or is all 0 exactly when fully masked."""
    q, k, v = x
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], k.shape[-2])))
    out, w = ops.sdpa(q=q, k=k, v=v, mask=mask)
    assert np.all(w >= 0) and np.all(np.isfinite(out))
    kept = np.broadcast_to(mask.any(axis=-1), w.shape[:-1])
    sums = w.sum(axis=-1)
    ops.assert_close(sums[kept], np.ones(int(kept.sum())), scale=4)
    assert np.all(sums[~kept] == 0) and np.all(out[~kept] == 0)


@given(x=qkv(), n=st.integers(1, 5), extra=st.integers(1, 3))
def test_sdpa_causal_prefix_invariance(ops, x, n, extra):
    """Under a causal mask, appending later positions does not change earlier outputs."""
    q, k, v = x
    t = q.shape[-2]
    k = np.concatenate([k, q] * 2, axis=-2)[..., :t + extra, :]  # any keys, T + extra of them
    v = np.concatenate([v] * (t + extra), axis=-2)[..., :t + extra, :]
    # full sequence: queries are the last t of t+extra positions (bottom-right alignment)
    full = ops.causal_mask(t=t, s=t + extra)
    out, _ = ops.sdpa(q=q, k=k, v=v, mask=full)
    m = min(n, t)  # a prefix: the first m queries see keys up to position m - 1 + extra
    head = ops.causal_mask(t=m, s=m + extra)
    out_head, _ = ops.sdpa(q=q[..., :m, :], k=k[..., :m + extra, :], v=v[..., :m + extra, :],
                           mask=head)
    ops.assert_close(out_head, out[..., :m, :], scale=8)


@given(x=qkv(), e=st.integers(-3, 3))
def test_sdpa_scale_equals_scaled_queries(ops, x, e):
    """sdpa(q, k, v, scale=c) == sdpa(c q, k, v, scale=1) (c a power of 2, so c q is exact)."""
    q, k, v = x
    c = 2.0**e
    ops.assert_close(ops.sdpa(q=q, k=k, v=v, scale=c)[0],
                     ops.sdpa(q=q * c, k=k, v=v, scale=1.0)[0], scale=8)


@given(x=qkv())
def test_sdpa_default_scale_is_inverse_sqrt_key_width(ops, x):
    """scale=None equals scale=1/sqrt(K), K = q.shape[-1]."""
    q, k, v = x
    ops.assert_close(ops.sdpa(q=q, k=k, v=v)[0],
                     ops.sdpa(q=q, k=k, v=v, scale=float(1 / np.sqrt(q.shape[-1])))[0], scale=8)


@given(x=qkv(), data=st.data())
def test_sdpa_masked_keys_do_not_affect_output(ops, x, data):
    """Changing the keys and values at masked positions leaves the output unchanged."""
    q, k, v = x
    mask = data.draw(hnp.arrays(np.bool_, (k.shape[-2],)))
    k2, v2 = k.copy(), v.copy()
    k2[..., ~mask, :] += 1.0
    v2[..., ~mask, :] -= 1.0
    ops.assert_close(ops.sdpa(q=q, k=k2, v=v2, mask=mask)[0],
                     ops.sdpa(q=q, k=k, v=v, mask=mask)[0])


# -- masks ---------------------------------------------------------------------


@given(t=st.integers(0, 7), s=st.integers(0, 7))
def test_causal_mask_is_bottom_right_aligned(ops, t, s):
    """Row i of causal_mask(t, s) allows exactly the keys 0 .. i + s - t."""
    mask = np.asarray(ops.causal_mask(t=t, s=s))
    assert mask.shape == (t, s) and mask.dtype == np.bool_
    for i in range(t):
        want = np.arange(s) <= i + s - t
        assert np.array_equal(mask[i], want), (i, mask[i])


@given(t=st.integers(0, 7), s=st.integers(0, 7), w=st.integers(1, 8))
def test_sliding_window_mask_is_causal_limited_to_the_last_window_keys(ops, t, s, w):
    """Row i of sliding_window_mask(t, s, w) allows exactly the keys max(0, p - w + 1) .. p,
    p = i + s - t: the causal row, of which at most w keys; window >= s is causal_mask."""
    mask = np.asarray(ops.sliding_window_mask(t=t, s=s, window=w))
    causal = np.asarray(ops.causal_mask(t=t, s=s))
    assert mask.shape == (t, s) and mask.dtype == np.bool_
    assert not np.any(mask & ~causal)
    for i in range(t):
        p = i + s - t
        assert mask[i].sum() == min(w, max(0, p + 1)) and (p < 0 or mask[i, p]), (i, mask[i])
    if w >= s:
        assert np.array_equal(mask, causal)


@given(t=st.integers(1, 6), extra=st.integers(0, 4), w=st.integers(1, 5))
def test_sliding_window_mask_with_a_cache_is_the_last_rows_of_the_full_mask(ops, t, extra, w):
    """The T new queries after `extra` cached keys get the last T rows of the square mask."""
    s = t + extra
    full = np.asarray(ops.sliding_window_mask(t=s, s=s, window=w))
    assert np.array_equal(np.asarray(ops.sliding_window_mask(t=t, s=s, window=w)), full[extra:])


@given(h_kv=st.integers(1, 3), group=st.integers(1, 3), t=st.integers(1, 4),
       s=st.integers(1, 4), seed=st.integers(0, 2**16), causal=st.booleans())
def test_sdpa_gqa_equals_sdpa_with_each_kv_head_repeated_for_its_query_group(
        ops, h_kv, group, t, s, seed, causal):
    """num_kv_heads = H_kv: the same as plain sdpa on k, v with kv head g repeated for query
    heads g * H / H_kv .. (g + 1) * H / H_kv - 1 (group = 1 is plain multi-head sdpa)."""
    h = h_kv * group
    r = np.random.default_rng(seed)
    q, k, v = r.uniform(-2, 2, (2, h, t, 4)), r.uniform(-2, 2, (2, h_kv, s, 4)), \
        r.uniform(-2, 2, (2, h_kv, s, 3))
    mask = ops.causal_mask(t=t, s=s) if causal else None
    out, w = ops.sdpa(q=q, k=k, v=v, mask=mask, num_kv_heads=h_kv)
    k_rep, v_rep = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    out2, w2 = ops.sdpa(q=q, k=k_rep, v=v_rep, mask=mask)
    ops.assert_close(out, out2)
    ops.assert_close(w, w2)


# -- sdpa with softcap (logit soft-capping) -------------------------------------


@given(x=qkv())
def test_sdpa_softcap_far_above_the_scores_equals_no_softcap(ops, x):
    """c tanh(s / c) = s - s^3 / (3 c^2) + ...: with c = 2^20 and |s| <= 8, sdpa is unchanged."""
    q, k, v = x
    out_c, w_c = ops.sdpa(q=q, k=k, v=v, softcap=2.0 ** 20)
    out, w = ops.sdpa(q=q, k=k, v=v)
    ops.assert_close(out_c, out, scale=4)
    ops.assert_close(w_c, w, scale=4)


@given(x=qkv(), cap=st.sampled_from([0.25, 0.5, 1.0, 2.0]), scale=st.sampled_from([4.0, 16.0]))
def test_sdpa_softcapped_scores_stay_below_the_cap(ops, x, cap, scale):
    """|c tanh(s / c)| < c: within a row, w_i / w_j = exp(s_i - s_j) <= exp(2c) whatever the
    scale, so every weight is at least exp(-2c) / S (without the cap, scale 16 drives
    some weights to ~0)."""
    q, k, v = x
    _, w = ops.sdpa(q=q, k=k, v=v, scale=scale, softcap=cap)
    w = np.asarray(w, np.float64)
    s = w.shape[-1]
    floor = np.exp(-2 * cap) / s
    assert np.all(w >= floor * (1 - 8 * ops.tol["rtol"])), (w.min(), floor)
    spread = np.log(w.max(axis=-1) / w.min(axis=-1))  # the largest s_i - s_j of each row
    assert np.all(spread <= 2 * cap + 8 * ops.tol["rtol"] * (1 + 2 * cap)), (spread.max(), cap)


@given(x=qkv(), cap=st.sampled_from([0.5, 2.0, 5.0]), with_bias=st.booleans(), data=st.data())
def test_sdpa_softcap_equals_capped_scores_plus_bias(ops, x, cap, with_bias, data):
    """softcap caps scale * q k^T before the bias: the same as sdpa with q = 0 and the bias
    softcap(scale q k^T) + bias (ops.softcap, the standalone component)."""
    q, k, v = x
    full = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    bias = data.draw(arrays(full)) if with_bias else np.zeros(full)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # exact inputs; float64
    capped = np.asarray(ops.softcap(x=scores, cap=cap), np.float64)
    out, w = ops.sdpa(q=q, k=k, v=v, bias=bias if with_bias else None, softcap=cap)
    out2, w2 = ops.sdpa(q=np.zeros_like(q), k=k, v=v, bias=capped + bias)
    ops.assert_close(out, out2, scale=8)
    ops.assert_close(w, w2, scale=8)


@given(x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5),
                   elements=st.integers(-512, 512).map(lambda k: k / 4)),
       cap=st.sampled_from([0.5, 1.0, 8.0, 30.0, 50.0]))
def test_softcap_is_odd_bounded_and_monotone(ops, x, cap):
    """softcap(-x) = -softcap(x), |softcap(x)| <= cap, and sorting x sorts y, up to rounding
    (a vectorised tanh and its scalar tail may differ by an ulp on equal inputs)."""
    y = np.asarray(ops.softcap(x=x, cap=cap), np.float64)
    ops.assert_close(ops.softcap(x=-x, cap=cap), -y)
    assert np.all(np.abs(y) <= cap)
    flat = np.argsort(x, axis=None, kind="stable")
    assert np.all(np.diff(y.ravel()[flat]) >= -ops.tol["rtol"] * cap)


@given(x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=5),
                   elements=st.floats(-1, 1, allow_nan=False, width=16)))
def test_softcap_is_near_identity_far_below_the_cap(ops, x):
    """cap tanh(x / cap) = x - x^3 / (3 cap^2) + ...: within 2^-20 of x for |x| <= 1, cap = 2^8."""
    y = np.asarray(ops.softcap(x=x, cap=256.0), np.float64)
    ops.assert_close(y, x - x ** 3 / (3 * 256.0 ** 2), scale=4)


@given(ids=hnp.arrays(np.int64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=5),
                      elements=st.integers(0, 3)),
       pad_id=st.integers(0, 3), t=st.integers(0, 5), h=st.integers(1, 3),
       causal=st.booleans())
def test_combined_mask_is_padding_and_causal(ops, ids, pad_id, t, h, causal):
    """combined_mask == padding_mask & causal_mask, materialised to (B, H, T, S)."""
    b, s = ids.shape
    got = np.asarray(ops.combined_mask(ids=ids, pad_id=pad_id, t=t, num_heads=h, causal=causal))
    pad = np.asarray(ops.padding_mask(ids=ids, pad_id=pad_id))
    assert pad.shape == (b, 1, 1, s) and np.array_equal(pad[:, 0, 0], ids != pad_id)
    cau = np.asarray(ops.causal_mask(t=t, s=s)) if causal else np.ones((t, s), dtype=bool)
    assert got.shape == (b, h, t, s)
    assert np.array_equal(got, np.broadcast_to(pad & cau, (b, h, t, s)))


# -- topk_attention ------------------------------------------------------------


@given(x=qkv())
def test_topk_attention_with_all_keys_equals_sdpa(ops, x):
    """top_k = S keeps every key: the same as sdpa."""
    q, k, v = x
    out_k, w_k = ops.topk_attention(q=q, k=k, v=v, top_k=k.shape[-2])
    out, w = ops.sdpa(q=q, k=k, v=v)
    ops.assert_close(out_k, out, scale=4)
    ops.assert_close(w_k, w, scale=4)


@given(x=qkv(), data=st.data())
def test_topk_attention_keeps_at_most_top_k_unmasked_keys(ops, x, data):
    """At most top_k weights per row are non-zero, all on unmasked keys; rows sum to 1 or 0."""
    q, k, v = x
    s = k.shape[-2]
    top_k = data.draw(st.integers(1, s))
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], s)))
    _, w = ops.topk_attention(q=q, k=k, v=v, mask=mask, top_k=top_k)
    assert np.all((w > 0).sum(axis=-1) <= top_k)
    assert np.all(w[..., ~mask] == 0)
    kept = np.broadcast_to(mask.any(axis=-1), w.shape[:-1])
    ops.assert_close(w.sum(axis=-1)[kept], np.ones(int(kept.sum())), scale=4)


# -- attention_entropy ---------------------------------------------------------


@given(x=qkv(), data=st.data())
def test_attention_entropy_between_zero_and_log_kept_keys(ops, x, data):
    """For weights from sdpa: 0 <= H <= ln(number of unmasked keys) (0 for a masked row)."""
    q, k, v = x
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], k.shape[-2])))
    _, w = ops.sdpa(q=q, k=k, v=v, mask=mask)
    h = np.asarray(ops.attention_entropy(weights=w), dtype=np.float64)
    n = np.broadcast_to(mask.sum(axis=-1), h.shape)
    slack = 10 * ops.tol["atol"]
    assert np.all(h >= -slack)
    assert np.all(h <= np.log(np.maximum(n, 1)) + slack)


@given(n=st.integers(1, 9))
def test_attention_entropy_of_uniform_is_log_n(ops, n):
    """Uniform weights 1/n over n keys have entropy ln n (in nats)."""
    w = np.full((2, n), 1.0 / n)
    ops.assert_close(ops.attention_entropy(weights=w), np.full(2, np.log(n)), scale=4)


# -- edges: empty axes and non-finite inputs (spec/components/sdpa.md, "Edge cases") -----

poison = st.sampled_from([np.nan, np.inf, -np.inf])


@given(batch=batches, t=st.integers(0, 3), s=st.integers(0, 3), kw=sizes, vw=sizes,
       data=st.data())
def test_sdpa_empty_axes_keep_their_shapes_and_no_keys_give_zero_rows(ops, batch, t, s, kw, vw,
                                                                      data):
    """T = 0 or S = 0: output (..., T, V), weights (..., T, S); S = 0: every output row is 0."""
    q, k, v = (data.draw(arrays(batch + shape)) for shape in ((t, kw), (s, kw), (s, vw)))
    out, w = ops.sdpa(q=q, k=k, v=v)
    assert out.shape == batch + (t, vw) and w.shape == batch + (t, s)
    if s == 0:
        assert np.all(out == 0)


@given(x=qkv(), data=st.data())
def test_sdpa_nonfinite_keys_values_and_bias_of_masked_keys_never_reach_the_output(ops, x, data):
    """NaN/inf in the key and value rows no query keeps, and in the bias wherever the mask is
    False, change nothing: a weight of 0 leaves its key out (0 * NaN would be NaN)."""
    q, k, v = x
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], k.shape[-2])))
    bias = data.draw(arrays(mask.shape))
    out, w = ops.sdpa(q=q, k=k, v=v, mask=mask, bias=bias)
    dead = ~mask.any(axis=0)  # (S,) keys that no query keeps
    k2, v2 = k.copy(), v.copy()
    k2[..., dead, :], v2[..., dead, :] = data.draw(poison), data.draw(poison)
    bias2 = np.where(mask, bias, data.draw(poison))
    out2, w2 = ops.sdpa(q=q, k=k2, v=v2, mask=mask, bias=bias2)
    assert np.all(np.isfinite(out2)) and np.all(w2[..., ~mask] == 0)
    ops.assert_close(out2, out, scale=8)
    ops.assert_close(w2, w, scale=8)


@given(x=qkv(), data=st.data())
def test_sdpa_nan_in_one_value_reaches_exactly_the_queries_that_weight_its_key(ops, x, data):
    """v[j, c] = NaN makes output column c NaN exactly where weights[..., i, j] != 0; every
    other output is unchanged."""
    q, k, v = x
    s, vw = k.shape[-2], v.shape[-1]
    mask = data.draw(hnp.arrays(np.bool_, (q.shape[-2], s)))
    j, c = data.draw(st.integers(0, s - 1)), data.draw(st.integers(0, vw - 1))
    out, w = ops.sdpa(q=q, k=k, v=v, mask=mask)
    v2 = v.copy()
    v2[..., j, c] = np.nan
    out2, w2 = ops.sdpa(q=q, k=k, v=v2, mask=mask)
    ops.assert_close(w2, w, scale=8)
    reached = np.broadcast_to(w[..., :, j] != 0, out2.shape[:-1])  # (..., T)
    assert np.array_equal(np.isnan(out2[..., c]), reached)
    others = np.arange(vw) != c
    ops.assert_close(out2[..., others], out[..., others], scale=8)


@given(x=qkv(), data=st.data())
def test_sdpa_pos_inf_bias_entries_share_their_row_equally(ops, x, data):
    """bias +inf at kept keys J of a row: weight 1/|J| on each and 0 elsewhere (the limit)."""
    q, k, v = x
    t, s = q.shape[-2], k.shape[-2]
    top = data.draw(hnp.arrays(np.bool_, (t, s)))
    bias = np.where(top, np.inf, data.draw(arrays((t, s))))
    _, w = ops.sdpa(q=q, k=k, v=v, bias=bias)
    rows = top.any(axis=-1)  # (T,)
    share = np.where(top, 1.0 / np.maximum(top.sum(-1, keepdims=True), 1), 0.0)
    ops.assert_close(w[..., rows, :], np.broadcast_to(share, w.shape)[..., rows, :])
