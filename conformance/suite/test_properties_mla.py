"""Invariants of multi-head latent attention (mla, spec/components/mla.md): the absorbed-weights
form equals the naive one, the latent cache (mla_init_cache / mla_step) equals the full forward,
and future rows change no past output. Each test name is the invariant; parameters are random
(NumPy generator seeded by hypothesis)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.properties
# a quarter of the profile's examples: every new shape is a new trace (and XLA compile) of
# mla, rope, rms_norm and sdpa in TensorFlow's graph/xla modes
_FEWER = settings(settings.default, max_examples=max(3, settings.default.max_examples // 4))
# each cached step of a new length is one more XLA compile: a tenth
_FEWEST = settings(settings.default, max_examples=max(2, settings.default.max_examples // 10))

seeds = st.integers(0, 2**32 - 1)
# (D, H, Dn, Dr, Dv, R, R_q): with and without a query latent, Dv != Dn + Dr
shapes = st.sampled_from([(8, 2, 2, 4, 4, 6, None), (8, 2, 4, 2, 2, 4, 6), (16, 4, 2, 2, 4, 8, 8),
                          (8, 1, 2, 4, 6, 4, None)])
conventions = st.sampled_from(["interleaved", "half"])
yarns = st.sampled_from([(1.0, 0.0), (40.0, 1.0), (4.0, 0.707)])


def params(r, d, h, dn, dr, dv, rank, r_q):
    w = lambda *s: r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5  # noqa: E731
    g = lambda n: 1 + r.uniform(-0.25, 0.25, n)  # noqa: E731
    p = {"w_kv_a": w(d, rank + dr), "kv_norm.gamma": g(rank), "w_kv_b": w(rank, h * (dn + dv)),
         "w_o": w(h * dv, d)}
    if r_q is None:
        return {**p, "w_q": w(d, h * (dn + dr))}
    return {**p, "w_q_a": w(d, r_q), "q_norm.gamma": g(r_q), "w_q_b": w(r_q, h * (dn + dr))}


def attrs(h, dn, dr, dv, convention, yarn, offset=0):
    return {"num_heads": h, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv,
            "rope_convention": convention, "yarn_factor": yarn[0], "mscale_all_dim": yarn[1],
            "rope_base": 100.0, "eps": 1e-6, "offset": offset}


def yarn_m(sc):
    """transformers' yarn_apply_mscale on rope_parameters sc: m (1 unless mscale_all_dim)."""
    m_all = sc.get("mscale_all_dim") or 0.0
    if sc.get("rope_type", "default") == "default" or not m_all or sc["factor"] <= 1:
        return 1.0
    return 0.1 * m_all * math.log(sc["factor"]) + 1


def absorbed(ops, x, mask, a, p):
    """The absorbed form (DeepSeek-V2 2.1.2, vLLM's MLA): W_UK_h folded into the query, W_UV_h
    into the output, one key/value "head" [c_kv | RoPE(k_pe)] / c_kv of width R + Dr / R,
    the backend's rms_norm, rope and sdpa (num_kv_heads=1) on it."""
    h, dn, dr, dv = a["num_heads"], a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["v_head_dim"]
    b, t, _ = x.shape
    rot = {"offset": a["offset"], "base": a["rope_base"], "convention": a["rope_convention"]}
    if a.get("rope_scaling") is not None:
        rot["scaling"] = a["rope_scaling"]
    if "w_q" in p:
        q = x @ p["w_q"]
    else:
        q = ops.rms_norm(x=x @ p["w_q_a"], eps=a["eps"], params={"gamma": p["q_norm.gamma"]}) @ p["w_q_b"]
    q = q.reshape(b, t, h, dn + dr).transpose(0, 2, 1, 3)  # (B, H, T, Dn + Dr)
    kv_a = x @ p["w_kv_a"]
    rank = kv_a.shape[-1] - dr
    c_kv = ops.rms_norm(x=kv_a[..., :rank], eps=a["eps"], params={"gamma": p["kv_norm.gamma"]})
    k_rot = ops.rope(x=kv_a[:, None, :, rank:], **rot)  # (B, 1, T, Dr)
    w_b = p["w_kv_b"].reshape(rank, h, dn + dv)
    w_uk = w_b[:, :, :dn].transpose(1, 2, 0)  # (H, Dn, R)
    w_uv = w_b[:, :, dn:].transpose(1, 0, 2)  # (H, R, Dv)
    q_lat = q[..., :dn] @ w_uk  # (B, H, T, R)
    qq = np.concatenate([q_lat, ops.rope(x=q[..., dn:], **rot)], -1)  # (B, H, T, R + Dr)
    kk = np.concatenate([c_kv[:, None], k_rot], -1)  # (B, 1, T, R + Dr)
    m = 0.1 * a["mscale_all_dim"] * math.log(a["yarn_factor"]) + 1 if a["yarn_factor"] > 1 else 1.0
    if a.get("rope_scaling") is not None:
        m = yarn_m(a["rope_scaling"])
    keep = np.tril(np.ones((t, t), dtype=bool))
    keep = keep if mask is None else keep & mask
    o_lat, _ = ops.sdpa(q=qq, k=kk, v=c_kv[:, None], mask=keep, scale=m * m / math.sqrt(dn + dr),
                        num_kv_heads=1)  # (B, H, T, R)
    o = o_lat @ w_uv  # (B, H, T, Dv)
    return o.transpose(0, 2, 1, 3).reshape(b, t, h * dv) @ p["w_o"]


@_FEWER
@given(seed=seeds, shape=shapes, convention=conventions, yarn=yarns, t=st.integers(1, 6),
       offset=st.integers(0, 4))
def test_mla_absorbed_weights_equal_naive_form(ops, seed, shape, convention, yarn, t, offset):
    d, h, dn, dr, dv, rank, r_q = shape
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    mask = r.uniform(0, 1, (2, 1, 1, t)) < 0.8
    a = attrs(h, dn, dr, dv, convention, yarn, offset)
    ops.assert_close(ops.mla(x=x, mask=mask, params=p, **a), absorbed(ops, x, mask, a, p), scale=8)


@_FEWEST
@given(seed=seeds, shape=shapes, t=st.integers(2, 5), data=st.data())
def test_mla_incremental_decoding_with_latent_cache_equals_full_forward(
        backend, device, attnspec_session, ops, seed, shape, t, data):
    """mla_step over chunks of the rows gives the rows of mla on all of them, padding rows
    masked as keys; the cache holds the latent (B, n, R) and the rotated rope key (B, 1, n, Dr).
    (One convention and DeepSeek-V3's mscale: each new shape is a new trace in graph modes.)"""
    d, h, dn, dr, dv, rank, r_q = shape
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    keep = r.uniform(0, 1, (2, t)) < 0.8
    keep[:, 0] = True
    cuts = sorted(set(data.draw(st.lists(st.integers(1, t - 1), max_size=2))))
    a = attrs(h, dn, dr, dv, "interleaved", (40.0, 1.0))
    step_attrs = {k: v for k, v in a.items() if k != "offset"}
    init, step = ops.raw("mla_init_cache", "decoding"), ops.raw("mla_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    cache = init(batch_size=2, params=bp)
    chunks = []
    for lo, hi in zip([0, *cuts], [*cuts, t]):
        y, cache = step(backend.asarray(x[:, lo:hi], dtype=dtype, device=device), cache,
                        backend.asarray(keep[:, lo:hi], dtype=None, device=device),
                        params=bp, **step_attrs)
        chunks.append(backend.to_numpy(y).astype(np.float64))
    assert tuple(cache["c_kv"].shape) == (2, t, rank)
    assert tuple(cache["k_rope"].shape) == (2, 1, t, dr)
    ops.assert_close(np.concatenate(chunks, axis=1),
                     ops.mla(x=x, mask=keep[:, None, None, :], params=p, **a), scale=8)


@_FEWER
@given(seed=seeds, shape=shapes, t=st.integers(2, 6))
def test_mla_future_rows_change_no_past_output(ops, seed, shape, t):
    d, h, dn, dr, dv, rank, r_q = shape
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    k = int(r.integers(1, t))
    a = attrs(h, dn, dr, dv, "interleaved", (1.0, 0.0))
    x2 = x.copy()
    x2[:, k:] = r.uniform(-2, 2, x2[:, k:].shape)
    ops.assert_close(ops.mla(x=x2, params=p, **a)[:, :k], ops.mla(x=x, params=p, **a)[:, :k], scale=4)


# -- rope_scaling (YaRN as DeepSeek-V2/V3 configure it) -------------------------------------

# (factor, mscale, mscale_all_dim, attention_factor): DeepSeek-V3's, V2's, the attention
# factor from mscale alone, an attention factor given
yarn_scalings = st.sampled_from([(40.0, 1.0, 1.0, None), (16.0, 0.707, 0.707, None),
                                 (40.0, 1.0, None, None), (4.0, None, 1.0, 0.75)])


def yarn_scaling(factor, mscale, mscale_all_dim, attention_factor):
    sc = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 64}
    extra = {"mscale": mscale, "mscale_all_dim": mscale_all_dim,
             "attention_factor": attention_factor}
    return {**sc, **{k: v for k, v in extra.items() if v is not None}}


def yarn_attrs(h, dn, dr, dv, convention, sc, offset=0):
    a = attrs(h, dn, dr, dv, convention, (1.0, 0.0), offset)
    return {**a, "rope_base": 10.0, "rope_scaling": sc}


@_FEWER
@given(seed=seeds, shape=shapes, convention=conventions, yarn=yarn_scalings, t=st.integers(1, 6),
       offset=st.integers(0, 4))
def test_mla_absorbed_weights_equal_naive_form_under_yarn_rope_scaling(
        ops, seed, shape, convention, yarn, t, offset):
    """The absorbed form with the backend's rope under rope_scaling (frequencies and the
    attention factor on cos/sin) and m^2 = yarn_get_mscale(factor, mscale_all_dim)^2 on the
    scale, as transformers' DeepseekV3Attention computes them."""
    d, h, dn, dr, dv, rank, r_q = shape
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    mask = r.uniform(0, 1, (2, 1, 1, t)) < 0.8
    a = yarn_attrs(h, dn, dr, dv, convention, yarn_scaling(*yarn), offset)
    ops.assert_close(ops.mla(x=x, mask=mask, params=p, **a), absorbed(ops, x, mask, a, p), scale=8)


@_FEWER
@given(seed=seeds, shape=shapes, convention=conventions, t=st.integers(1, 6),
       offset=st.integers(0, 4))
def test_mla_yarn_rope_scaling_of_factor_one_equals_plain_rope(ops, seed, shape, convention, t,
                                                              offset):
    """YaRN with factor 1 leaves every frequency (1 / factor = 1 across the ramp), the
    attention factor and m at 1: mla equals mla without rope_scaling."""
    d, h, dn, dr, dv, rank, r_q = shape
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    a = yarn_attrs(h, dn, dr, dv, convention, yarn_scaling(1.0, 1.0, 1.0, None), offset)
    plain = {k: v for k, v in a.items() if k != "rope_scaling"}
    ops.assert_close(ops.mla(x=x, params=p, **a), ops.mla(x=x, params=p, **plain), scale=4)


@_FEWEST
@given(seed=seeds, shape=shapes, yarn=yarn_scalings, t=st.integers(2, 5), cut=st.integers(1, 4))
def test_mla_incremental_decoding_under_yarn_rope_scaling_equals_full_forward(
        backend, device, attnspec_session, ops, seed, shape, yarn, t, cut):
    """mla_step in two chunks with rope_scaling gives mla on all rows with it (YaRN's
    frequencies do not depend on seq_len, so the cached rotated keys stay right)."""
    d, h, dn, dr, dv, rank, r_q = shape
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    x, p = r.uniform(-2, 2, (2, t, d)), params(r, d, h, dn, dr, dv, rank, r_q)
    cut = min(cut, t - 1)
    a = yarn_attrs(h, dn, dr, dv, "interleaved", yarn_scaling(*yarn))
    step_attrs = {k: v for k, v in a.items() if k != "offset"}
    init, step = ops.raw("mla_init_cache", "decoding"), ops.raw("mla_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    cache = init(batch_size=2, params=bp)
    chunks = []
    for lo, hi in ((0, cut), (cut, t)):
        y, cache = step(backend.asarray(x[:, lo:hi], dtype=dtype, device=device), cache,
                        params=bp, **step_attrs)
        chunks.append(backend.to_numpy(y).astype(np.float64))
    ops.assert_close(np.concatenate(chunks, axis=1), ops.mla(x=x, params=p, **a), scale=8)
