"""Invariants of multi-head, self-, additive and Luong attention (hypothesis).

Each test name is the invariant. Inputs are multiples of 2**-6 in [-2, 2] and
parameters multiples of 2**-7 in [-1, 1], exact at every dtype, so the backend
under test and the NumPy arithmetic around it start from the same numbers.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
dims = st.integers(1, 4)


def _x(rng, *shape):
    return rng.integers(-128, 129, shape) / 64.0


def _w(rng, *shape):
    return rng.integers(-128, 129, shape) / 128.0


def _mha_params(rng, d_q, d_k, d_v, h, k, v, d_o, bias=True):
    p = {"w_q": _w(rng, d_q, h * k), "w_k": _w(rng, d_k, h * k), "w_v": _w(rng, d_v, h * v),
         "w_o": _w(rng, h * v, d_o)}
    if bias:
        p.update(b_q=_w(rng, h * k), b_k=_w(rng, h * k), b_v=_w(rng, h * v), b_o=_w(rng, d_o))
    return p


def _lin(x, p, w, b):
    return x @ p[w] + p.get(b, 0.0)


@given(seed=seeds, t=dims, d=dims, k=dims, v=dims, bias=st.booleans())
def test_mha_one_head_equals_self_attention(ops, seed, t, d, k, v, bias):
    """num_heads=1 with w_o = I and no b_o is self_attention with the same w_q, w_k, w_v."""
    rng = np.random.default_rng(seed)
    x = _x(rng, 2, t, d)
    p = _mha_params(rng, d, d, d, 1, k, v, v, bias)
    p.pop("b_o", None)
    p["w_o"] = np.eye(v)
    out, w = ops.mha(query=x, key=x, value=x, num_heads=1, params=p)
    sa_out, sa_w = ops.self_attention(x=x, params={n: a for n, a in p.items() if n != "w_o"})
    ops.assert_close(out, sa_out, scale=4, what="output")
    ops.assert_close(w[:, 0], sa_w, scale=4, what="weights")


@given(seed=seeds, h=st.integers(1, 4), t=dims, s=dims, k=dims, v=dims, bias=st.booleans(),
       masked=st.booleans())
def test_mha_equals_independent_heads_concatenated_and_projected(ops, seed, h, t, s, k, v, bias,
                                                                masked):
    """head_h = sdpa on the column blocks h*K:(h+1)*K (h*V:(h+1)*V); output = concat W_o + b_o."""
    rng = np.random.default_rng(seed)
    q_in, k_in, v_in = _x(rng, 2, t, 3), _x(rng, 2, s, 5), _x(rng, 2, s, 2)
    p = _mha_params(rng, 3, 5, 2, h, k, v, 4, bias)
    mask = rng.random((2, h, t, s)) < 0.7 if masked else None
    out, w = ops.mha(query=q_in, key=k_in, value=v_in, mask=mask, num_heads=h, params=p)
    q, kk = _lin(q_in, p, "w_q", "b_q"), _lin(k_in, p, "w_k", "b_k")
    vv = _lin(v_in, p, "w_v", "b_v")
    heads = []
    for i in range(h):
        o_i, w_i = ops.sdpa(q=q[..., i * k:(i + 1) * k], k=kk[..., i * k:(i + 1) * k],
                            v=vv[..., i * v:(i + 1) * v],
                            mask=None if mask is None else mask[:, i])
        heads.append(o_i)
        ops.assert_close(w[:, i], w_i, scale=4, what=f"weights of head {i}")
    want = _lin(np.concatenate(heads, axis=-1), p, "w_o", "b_o")
    ops.assert_close(out, want, scale=8, what="output")


# -- grouped-query attention (num_kv_heads) ------------------------------------


@given(seed=seeds, h=st.integers(1, 4), t=dims, s=dims, k=dims, v=dims, bias=st.booleans(),
       masked=st.booleans())
def test_mha_with_num_kv_heads_equal_to_num_heads_is_plain_mha(ops, seed, h, t, s, k, v, bias,
                                                                 masked):
    """num_kv_heads = num_heads (H_kv = H) is the multi-head attention without it."""
    rng = np.random.default_rng(seed)
    q_in, kv_in = _x(rng, 2, t, 3), _x(rng, 2, s, 5)
    p = _mha_params(rng, 3, 5, 5, h, k, v, 4, bias)
    mask = rng.random((2, h, t, s)) < 0.7 if masked else None
    out, w = ops.mha(query=q_in, key=kv_in, value=kv_in, mask=mask, num_heads=h,
                     num_kv_heads=h, params=p)
    out2, w2 = ops.mha(query=q_in, key=kv_in, value=kv_in, mask=mask, num_heads=h, params=p)
    ops.assert_close(out, out2, scale=4, what="output")
    ops.assert_close(w, w2, scale=4, what="weights")


def _repeat_kv_columns(p, name, h, h_kv, width):
    """(D, H_kv*W) -> (D, H*W) (or a bias (H_kv*W,) -> (H*W,)): query head h gets the column
    block of kv head h // (H / H_kv)."""
    x = p[name]
    blocks = [x[..., (i // (h // h_kv)) * width:(i // (h // h_kv) + 1) * width] for i in range(h)]
    return np.concatenate(blocks, axis=-1)


@given(seed=seeds, h_kv=st.integers(1, 3), group=st.integers(1, 3), t=dims, s=dims, k=dims,
       v=dims, bias=st.booleans(), masked=st.booleans())
def test_mha_gqa_equals_mha_with_kv_columns_repeated_per_group(ops, seed, h_kv, group, t, s, k,
                                                               v, bias, masked):
    """H = group * H_kv query heads over H_kv kv heads: the same as plain mha whose w_k, w_v
    (and b_k, b_v) give query head h the columns of kv head h // group."""
    h = h_kv * group
    rng = np.random.default_rng(seed)
    q_in, k_in, v_in = _x(rng, 2, t, 3), _x(rng, 2, s, 5), _x(rng, 2, s, 2)
    p = {"w_q": _w(rng, 3, h * k), "w_k": _w(rng, 5, h_kv * k), "w_v": _w(rng, 2, h_kv * v),
         "w_o": _w(rng, h * v, 4)}
    if bias:
        p.update(b_q=_w(rng, h * k), b_k=_w(rng, h_kv * k), b_v=_w(rng, h_kv * v),
                 b_o=_w(rng, 4))
    mask = rng.random((2, h, t, s)) < 0.7 if masked else None
    out, w = ops.mha(query=q_in, key=k_in, value=v_in, mask=mask, num_heads=h,
                     num_kv_heads=h_kv, params=p)
    full = dict(p)
    for name, width in (("w_k", k), ("b_k", k), ("w_v", v), ("b_v", v)):
        if name in p:
            full[name] = _repeat_kv_columns(p, name, h, h_kv, width)
    out2, w2 = ops.mha(query=q_in, key=k_in, value=v_in, mask=mask, num_heads=h, params=full)
    ops.assert_close(out, out2, scale=4, what="output")
    ops.assert_close(w, w2, scale=4, what="weights")


@given(seed=seeds, t=st.integers(2, 5), bias=st.booleans(), data=st.data())
def test_self_attention_permutation_equivariance(ops, seed, t, bias, data):
    """Without a mask, permuting the tokens of x permutes the output rows and the weights."""
    rng = np.random.default_rng(seed)
    x = _x(rng, 2, t, 3)
    p = {n: a for n, a in _mha_params(rng, 3, 3, 3, 1, 2, 3, 1, bias).items()
         if n in ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v")}
    perm = np.array(data.draw(st.permutations(range(t))))
    out, w = ops.self_attention(x=x, params=p)
    out_p, w_p = ops.self_attention(x=x[:, perm], params=p)
    ops.assert_close(out_p, out[:, perm], scale=4, what="output")
    ops.assert_close(w_p, w[:, perm][:, :, perm], scale=4, what="weights")


@given(seed=seeds, h=st.integers(1, 3), s=st.integers(2, 5), data=st.data())
def test_cross_attention_invariant_to_permuting_memory(ops, seed, h, s, data):
    """Permuting the memory (key and value rows together, and the mask's S axis) leaves the
    output unchanged and permutes the weights along S."""
    rng = np.random.default_rng(seed)
    q_in, mem = _x(rng, 2, 3, 4), _x(rng, 2, s, 6)
    p = _mha_params(rng, 4, 6, 6, h, 2, 2, 4)
    mask = rng.random((2, 1, 1, s)) < 0.7
    perm = np.array(data.draw(st.permutations(range(s))))
    out, w = ops.mha(query=q_in, key=mem, value=mem, mask=mask, num_heads=h, params=p)
    out_p, w_p = ops.mha(query=q_in, key=mem[:, perm], value=mem[:, perm],
                         mask=mask[..., perm], num_heads=h, params=p)
    ops.assert_close(out_p, out, scale=4, what="output")
    ops.assert_close(w_p, w[..., perm], scale=4, what="weights")


@given(seed=seeds, h=st.integers(1, 3), t=dims, s=dims)
def test_mha_mask_shapes_broadcast_alike(ops, seed, h, t, s):
    """A (T, S) mask, its (B, 1, T, S) and its full (B, H, T, S) broadcast give the same result."""
    rng = np.random.default_rng(seed)
    q_in, mem = _x(rng, 2, t, 4), _x(rng, 2, s, 4)
    p = _mha_params(rng, 4, 4, 4, h, 2, 2, 4)
    mask = rng.random((t, s)) < 0.6
    results = [ops.mha(query=q_in, key=mem, value=mem, mask=m, num_heads=h, params=p)
               for m in (mask, np.broadcast_to(mask, (2, 1, t, s)).copy(),
                         np.broadcast_to(mask, (2, h, t, s)).copy())]
    for out, w in results[1:]:
        ops.assert_close(out, results[0][0], what="output")
        ops.assert_close(w, results[0][1], what="weights")


@given(seed=seeds, h=st.integers(1, 3), t=dims, s=dims)
def test_mha_fully_masked_row_gives_zero_weights_and_output_bias(ops, seed, h, t, s):
    """A query row with nothing to attend to has zero weights in every head; its output is b_o."""
    rng = np.random.default_rng(seed)
    q_in, mem = _x(rng, 1, t, 4), _x(rng, 1, s, 4)
    p = _mha_params(rng, 4, 4, 4, h, 2, 2, 3)
    mask = np.ones((1, 1, t, s), dtype=bool)
    mask[..., 0, :] = False
    out, w = ops.mha(query=q_in, key=mem, value=mem, mask=mask, num_heads=h, params=p)
    assert np.all(w[:, :, 0] == 0)
    ops.assert_close(out[0, 0], p["b_o"], what="output of the masked row")


@given(seed=seeds, t=dims, s=dims, d=dims)
def test_luong_dot_equals_sdpa_with_unit_scale(ops, seed, t, s, d):
    rng = np.random.default_rng(seed)
    q, k, v = _x(rng, 2, t, d) / 2, _x(rng, 2, s, d), _x(rng, 2, s, 3)
    mask = rng.random((2, t, s)) < 0.7
    ctx, w = ops.luong_attention(query=q, keys=k, values=v, mask=mask, score="dot", params={})
    out, w_ref = ops.sdpa(q=q, k=k, v=v, mask=mask, scale=1.0)
    ops.assert_close(ctx, out, scale=4, what="context")
    ops.assert_close(w, w_ref, scale=4, what="weights")


@given(seed=seeds, t=dims, s=dims, d=dims)
def test_luong_general_with_identity_equals_dot(ops, seed, t, s, d):
    rng = np.random.default_rng(seed)
    q, k = _x(rng, 2, t, d) / 2, _x(rng, 2, s, d)
    general = ops.luong_attention(query=q, keys=k, score="general", params={"w": np.eye(d)})
    dot = ops.luong_attention(query=q, keys=k, score="dot", params={})
    ops.assert_close(general[0], dot[0], what="context")
    ops.assert_close(general[1], dot[1], what="weights")


@given(seed=seeds, t=dims, s=dims, d_q=dims, d_k=dims, a=dims)
def test_luong_concat_equals_additive_with_stacked_weights(ops, seed, t, s, d_q, d_k, a):
    """vᵀ tanh([q; k] W) = vᵀ tanh(q W[:Dq] + k W[Dq:]): concat is additive attention."""
    rng = np.random.default_rng(seed)
    q, k = _x(rng, 2, t, d_q), _x(rng, 2, s, d_k)
    w, v = _w(rng, d_q + d_k, a), _w(rng, a) * 2
    concat = ops.luong_attention(query=q, keys=k, score="concat", params={"w": w, "v": v})
    additive = ops.additive_attention(query=q, keys=k,
                                      params={"w_q": w[:d_q], "w_k": w[d_q:], "v": v})
    ops.assert_close(concat[0], additive[0], scale=4, what="context")
    ops.assert_close(concat[1], additive[1], scale=4, what="weights")


@given(seed=seeds, t=dims, s=dims, a=dims)
def test_additive_attention_weights_rows_sum_to_one_and_masked_are_zero(ops, seed, t, s, a):
    rng = np.random.default_rng(seed)
    q, k = _x(rng, 2, t, 3), _x(rng, 2, s, 2)
    p = {"w_q": _w(rng, 3, a), "w_k": _w(rng, 2, a), "v": _w(rng, a) * 2}
    mask = rng.random((2, t, s)) < 0.7
    ctx, w = ops.additive_attention(query=q, keys=k, mask=mask, params=p)
    assert np.all(w >= 0) and np.all(w[~mask] == 0)
    kept = mask.any(axis=-1)
    ops.assert_close(w.sum(axis=-1)[kept], np.ones(int(kept.sum())), scale=4)
    assert np.all(w.sum(axis=-1)[~kept] == 0) and np.all(ctx[~kept] == 0)


@given(seed=seeds, t=dims, s=dims)
def test_additive_attention_values_default_to_keys(ops, seed, t, s):
    rng = np.random.default_rng(seed)
    q, k = _x(rng, 1, t, 2), _x(rng, 1, s, 3)
    p = {"w_q": _w(rng, 2, 4), "w_k": _w(rng, 3, 4), "v": _w(rng, 4)}
    default = ops.additive_attention(query=q, keys=k, params=p)
    explicit = ops.additive_attention(query=q, keys=k, values=k, params=p)
    ops.assert_close(default[0], explicit[0], what="context")


@given(seed=seeds, h=st.integers(1, 3), t=dims, s=st.integers(2, 4), k=dims, v=dims,
       poison=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_mha_nonfinite_key_and_value_rows_at_padded_positions_never_reach_the_output(
        ops, seed, h, t, s, k, v, poison):
    """A (B, 1, 1, S) padding mask: NaN/inf in the key and value inputs at padded positions
    (projected into every head) leave the output and weights unchanged."""
    rng = np.random.default_rng(seed)
    q_in, k_in, v_in = _x(rng, 2, t, 3), _x(rng, 2, s, 5), _x(rng, 2, s, 2)
    p = _mha_params(rng, 3, 5, 2, h, k, v, 4)
    pad = np.zeros((2, s), dtype=bool)
    pad[:, -1] = True  # the last position of each sequence is padding
    pad[0, 0] = True
    mask = ~pad[:, None, None, :]  # (B, 1, 1, S)
    out, w = ops.mha(query=q_in, key=k_in, value=v_in, mask=mask, num_heads=h, params=p)
    k2, v2 = k_in.copy(), v_in.copy()
    k2[pad], v2[pad] = poison, poison
    out2, w2 = ops.mha(query=q_in, key=k2, value=v2, mask=mask, num_heads=h, params=p)
    assert np.all(np.isfinite(out2))
    ops.assert_close(out2, out, scale=8, what="output")
    ops.assert_close(w2, w, scale=8, what="weights")


@given(seed=seeds, h=st.integers(1, 4), s=st.integers(2, 7), data=st.data())
def test_causal_mha_on_the_last_queries_equals_the_last_rows_of_full_causal_attention(
        ops, seed, h, s, data):
    """Causal at T < S aligned to the last key (j <= i + S - T, as with a KV cache): the last
    T queries over all S keys give the last T rows of causal self-attention over S."""
    t = data.draw(st.integers(1, s))
    rng = np.random.default_rng(seed)
    d, k = 5, 3
    x = _x(rng, 2, s, d)
    p = _mha_params(rng, d, d, d, h, k, k, d)
    full, _ = ops.mha(query=x, key=x, value=x, mask=np.tril(np.ones((s, s), dtype=bool)),
                      num_heads=h, params=p)
    mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
    last, _ = ops.mha(query=x[:, s - t:], key=x, value=x, mask=mask, num_heads=h, params=p)
    ops.assert_close(last, full[:, s - t:], scale=4)
