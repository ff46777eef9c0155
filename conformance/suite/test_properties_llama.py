"""Invariants of the Llama-style decoder: llama_layer, llama_decoder_only and its key/value
cache (llama_init_cache / llama_step, spec/components/llama.md). Each test name is the
invariant; parameters are random (NumPy generator seeded by hypothesis)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
# (D, H, H_kv): GQA, MQA, H_kv = H
heads = st.sampled_from([(8, 2, 1), (16, 4, 2), (16, 4, 1), (8, 2, 2), (16, 4, 4)])
windows = st.sampled_from([None, 1, 2, 3])


def layer(r, d, h, h_kv, f):
    k = d // h
    w = lambda *s: r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5  # noqa: E731
    return {"attn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d), "attn.w_q": w(d, h * k),
            "attn.w_k": w(d, h_kv * k), "attn.w_v": w(d, h_kv * k), "attn.w_o": w(h * k, d),
            "ffn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d), "ffn.w_gate": w(d, f),
            "ffn.w_up": w(d, f), "ffn.w_down": w(f, d)}


def model(r, n, d, h, h_kv, vocab):
    p = {"embed.table": r.uniform(-1, 1, (vocab, d))}
    for i in range(n):
        p.update({f"layers.{i}.{k}": v for k, v in layer(r, d, h, h_kv, 2 * d).items()})
    return {**p, "norm.gamma": 1 + r.uniform(-0.25, 0.25, d),
            "lm_head.w": r.uniform(-1, 1, (d, vocab))}


@given(seed=seeds, cfg=heads, window=windows, n=st.integers(1, 2), t=st.integers(2, 7),
       data=st.data())
def test_llama_incremental_decoding_with_cache_equals_full_forward(
        backend, device, attnspec_session, ops, seed, cfg, window, n, t, data):
    """llama_step over chunks of the ids gives the logits of llama_decoder_only on all ids,
    the sliding window included (the cache holds H_kv heads)."""
    (d, h, h_kv) = cfg
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    p = model(r, n, d, h, h_kv, 10)
    ids = r.integers(0, 10, (2, t))  # 0 is pad_id: pad keys in the cache stay masked
    ids[:, 0] = 1
    cuts = sorted(set(data.draw(st.lists(st.integers(1, t - 1), max_size=3))))
    init, step = ops.raw("llama_init_cache", "decoding"), ops.raw("llama_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    kw = dict(pad_id=0, num_layers=n, num_heads=h, num_kv_heads=h_kv, window=window)
    cache = init(batch_size=2, num_layers=n, num_heads=h, num_kv_heads=h_kv, params=bp)
    chunks = []
    for a, b in zip([0, *cuts], [*cuts, t]):
        logits, cache = step(backend.asarray(ids[:, a:b], dtype=None, device=device), cache,
                             params=bp, **kw)
        chunks.append(backend.to_numpy(logits).astype(np.float64))
    assert tuple(cache["layers.0.k"].shape) == (2, h_kv, t, d // h)
    ops.assert_close(np.concatenate(chunks, axis=1),
                     ops.llama_decoder_only(ids=ids, params=p, **kw), scale=8)


def scaling_of(rule):
    """rope_scaling of a rule whose frequencies do not depend on seq_len, with a small L0
    (4) so that the positions pass it: the cached keys keep their rotation, so llama_step
    equals the full forward for these (dynamic and longrope re-pick their frequencies as
    seq_len grows: spec/components/llama.md)."""
    return {"linear": {"rope_type": "linear", "factor": 4.0},
            "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4},
            "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}[rule]


@given(seed=seeds, cfg=st.sampled_from([(16, 2, 1), (16, 4, 2), (16, 2, 2)]),
       rule=st.sampled_from(["linear", "yarn", "llama3"]), rotary=st.sampled_from([None, 4]),
       t=st.integers(2, 8), data=st.data())
def test_llama_step_with_rope_scaling_equals_full_forward(
        backend, device, attnspec_session, ops, seed, cfg, rule, rotary, t, data):
    """llama_step over chunks of the ids, with rope_scaling (linear, yarn with its attention
    factor, llama3) and a partial rotary, gives the logits of llama_decoder_only on all ids."""
    (d, h, h_kv) = cfg
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    p = model(r, 1, d, h, h_kv, 10)
    ids = r.integers(1, 10, (2, t))
    cuts = sorted(set(c for c in data.draw(st.lists(st.integers(1, t - 1), max_size=3)) if c < t))
    init, step = ops.raw("llama_init_cache", "decoding"), ops.raw("llama_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    kw = dict(pad_id=0, num_layers=1, num_heads=h, num_kv_heads=h_kv,
              rope_scaling=scaling_of(rule), **({} if rotary is None else {"rotary_dim": rotary}))
    cache = init(batch_size=2, num_layers=1, num_heads=h, num_kv_heads=h_kv, params=bp)
    chunks = []
    for a, b in zip([0, *cuts], [*cuts, t]):
        logits, cache = step(backend.asarray(ids[:, a:b], dtype=None, device=device), cache,
                             params=bp, **kw)
        chunks.append(backend.to_numpy(logits).astype(np.float64))
    ops.assert_close(np.concatenate(chunks, axis=1),
                     ops.llama_decoder_only(ids=ids, params=p, **kw), scale=8)


@given(seed=seeds, cfg=heads, window=windows, t=st.integers(2, 6))
def test_llama_future_tokens_change_no_past_logits(ops, seed, cfg, window, t):
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    p = model(r, 2, d, h, h_kv, 10)
    ids = r.integers(1, 10, (2, t))
    k = int(r.integers(1, t))
    kw = dict(pad_id=0, num_layers=2, num_heads=h, num_kv_heads=h_kv, window=window, params=p)
    logits = ops.llama_decoder_only(ids=ids, **kw)
    ids2 = ids.copy()
    ids2[:, k:] = r.integers(1, 10, ids2[:, k:].shape)
    ops.assert_close(ops.llama_decoder_only(ids=ids2, **kw)[:, :k], logits[:, :k], scale=4)


@given(seed=seeds, cfg=heads, t=st.integers(1, 6), extra=st.integers(0, 3),
       offset=st.integers(0, 5))
def test_llama_window_at_least_t_equals_no_window(ops, seed, cfg, t, extra, offset):
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (2, t, d))
    kw = dict(num_heads=h, num_kv_heads=h_kv, offset=offset, params=layer(r, d, h, h_kv, 2 * d))
    ops.assert_close(ops.llama_layer(x=x, window=t + extra, **kw), ops.llama_layer(x=x, **kw),
                     scale=2)


@given(seed=seeds, cfg=heads, t=st.integers(1, 6))
def test_llama_grouped_kv_heads_equal_repeated_kv_heads(ops, seed, cfg, t):
    """GQA with H_kv heads equals H_kv = H with each kv head's columns repeated H / H_kv times
    (query head h reads kv head h // (H / H_kv))."""
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (2, t, d))
    p = layer(r, d, h, h_kv, 2 * d)
    k = d // h
    rep = dict(p)
    for w in ("attn.w_k", "attn.w_v"):
        rep[w] = np.concatenate([p[w][:, (g // (h // h_kv)) * k:(g // (h // h_kv) + 1) * k]
                                 for g in range(h)], axis=1)  # (D, H*K)
    ops.assert_close(ops.llama_layer(x=x, num_heads=h, num_kv_heads=h, params=rep),
                     ops.llama_layer(x=x, num_heads=h, num_kv_heads=h_kv, params=p), scale=2)


@given(seed=seeds, cfg=st.sampled_from([(8, 2), (16, 4), (12, 3)]), t=st.integers(1, 6),
       offset=st.integers(0, 4))
def test_llama_layer_with_kv_heads_equal_heads_is_plain_multi_head_attention(ops, seed, cfg, t,
                                                                             offset):
    """H_kv = H: the layer equals its parts composed by hand from the backend's own kernels,
    with plain (ungrouped) sdpa per head: x + W_o concat_h sdpa(RoPE(q_h), RoPE(k_h), v_h,
    causal), then + SwiGLU(RMSNorm(.))."""
    d, h = cfg
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (1, t, d))
    p = layer(r, d, h, h, 2 * d)
    k = d // h
    n1 = ops.rms_norm(x=x, eps=1e-6, params={"gamma": p["attn_norm.gamma"]})
    causal = ops.causal_mask(t=t, s=t)
    heads_out = []
    for i in range(h):
        cols = slice(i * k, (i + 1) * k)
        q = ops.rope(x=n1 @ p["attn.w_q"][:, cols], offset=offset, convention="half")
        kk = ops.rope(x=n1 @ p["attn.w_k"][:, cols], offset=offset, convention="half")
        out, _ = ops.sdpa(q=q, k=kk, v=n1 @ p["attn.w_v"][:, cols], mask=causal)
        heads_out.append(out)
    r1 = x + np.concatenate(heads_out, axis=-1) @ p["attn.w_o"]
    n2 = ops.rms_norm(x=r1, eps=1e-6, params={"gamma": p["ffn_norm.gamma"]})
    y = r1 + ops.gated_feedforward(x=n2, activation="silu",
                                   params={w: p[f"ffn.{w}"] for w in ("w_gate", "w_up", "w_down")})
    ops.assert_close(ops.llama_layer(x=x, num_heads=h, num_kv_heads=h, offset=offset, params=p),
                     y, scale=4)


@given(seed=seeds, cfg=heads, n=st.integers(1, 2), t=st.integers(1, 6))
def test_llama_tied_head_equals_untied_head_holding_the_table_transposed(ops, seed, cfg, n, t):
    """tie_embeddings (Qwen2's tie_word_embeddings): logits equal the untied model's whose
    lm_head.w is embed.table^T."""
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    p = model(r, n, d, h, h_kv, 10)
    ids = r.integers(1, 10, (2, t))
    kw = dict(pad_id=0, num_layers=n, num_heads=h, num_kv_heads=h_kv)
    untied = {**p, "lm_head.w": p["embed.table"].T.copy()}
    tied = {k: v for k, v in p.items() if k != "lm_head.w"}
    ops.assert_close(ops.llama_decoder_only(ids=ids, tie_embeddings=True, params=tied, **kw),
                     ops.llama_decoder_only(ids=ids, params=untied, **kw), scale=2)


def _biases(r, n, h, h_kv, k, scale):
    return {f"layers.{i}.attn.b_{c}": r.uniform(-1, 1, (h if c == "q" else h_kv) * k) * scale
            for i in range(n) for c in "qkv"}


@given(seed=seeds, cfg=heads, n=st.integers(1, 2), t=st.integers(1, 6))
def test_llama_model_zero_attention_bias_equals_no_bias(ops, seed, cfg, n, t):
    """attention_bias with b_q = b_k = b_v = 0 gives the unbiased model's logits."""
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    p = model(r, n, d, h, h_kv, 10)
    ids = r.integers(1, 10, (2, t))
    kw = dict(pad_id=0, num_layers=n, num_heads=h, num_kv_heads=h_kv)
    zero = {**p, **_biases(r, n, h, h_kv, d // h, 0.0)}
    ops.assert_close(ops.llama_decoder_only(ids=ids, attention_bias=True, params=zero, **kw),
                     ops.llama_decoder_only(ids=ids, params=p, **kw), scale=2)


@given(seed=seeds, cfg=heads, n=st.integers(1, 2))
def test_llama_single_token_logits_ignore_the_query_and_key_biases(ops, seed, cfg, n):
    """T = 1: each query attends to its own key alone (weight 1), so b_q and b_k change no
    logit; b_v does (it passes through the attention)."""
    (d, h, h_kv) = cfg
    r = np.random.default_rng(seed)
    p = {**model(r, n, d, h, h_kv, 10), **_biases(r, n, h, h_kv, d // h, 1.0)}
    ids = r.integers(1, 10, (3, 1))
    kw = dict(pad_id=0, num_layers=n, num_heads=h, num_kv_heads=h_kv, attention_bias=True)
    qk_zero = {k: (0 * v if k.endswith(("b_q", "b_k")) else v) for k, v in p.items()}
    ops.assert_close(ops.llama_decoder_only(ids=ids, params=qk_zero, **kw),
                     ops.llama_decoder_only(ids=ids, params=p, **kw), scale=2)
