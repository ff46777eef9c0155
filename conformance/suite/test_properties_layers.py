"""Invariants of the Transformer layers, stacks, models and decoding (hypothesis).
Each test name is the invariant. Parameters are random (NumPy generator seeded by
hypothesis), so only relations between calls are checked, never golden values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)


def _attn(r, d):
    return {f"{n}": r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5
            for n, s in (("w_q", (d, d)), ("w_k", (d, d)), ("w_v", (d, d)), ("w_o", (d, d)))} | \
        {f"b_{n}": r.uniform(-0.25, 0.25, d) for n in "qkvo"}


def _ln(r, d):
    return {"gamma": 1 + r.uniform(-0.25, 0.25, d), "beta": r.uniform(-0.25, 0.25, d)}


def _ffn(r, d, f):
    return {"w1": r.uniform(-1, 1, (d, f)) / np.sqrt(d) * 1.5, "b1": r.uniform(-0.25, 0.25, f),
            "w2": r.uniform(-1, 1, (f, d)) / np.sqrt(f) * 1.5, "b2": r.uniform(-0.25, 0.25, d)}


def _scoped(prefix, params):
    return {f"{prefix}.{k}": v for k, v in params.items()}


def enc_layer(r, d, f):
    return {**_scoped("self_attn", _attn(r, d)), **_scoped("norm1", _ln(r, d)),
            **_scoped("ffn", _ffn(r, d, f)), **_scoped("norm2", _ln(r, d))}


def dec_layer(r, d, f):
    return {**enc_layer(r, d, f), **_scoped("cross_attn", _attn(r, d)),
            **_scoped("norm3", _ln(r, d))}


def stack(r, layer, n, d, f, final):
    p = {}
    for i in range(n):
        p.update(_scoped(f"layers.{i}", layer(r, d, f)))
    return {**p, **(_scoped("final_norm", _ln(r, d)) if final else {})}


def lm(r, n, d, vocab, max_len, norm="pre"):
    return {"embed.table": r.uniform(-1, 1, (vocab, d)),
            "pos.table": r.uniform(-.5, .5, (max_len, d)),
            **stack(r, enc_layer, n, d, 2 * d, norm == "pre"),
            "lm_head.w": r.uniform(-1, 1, (d, vocab)), "lm_head.b": r.uniform(-.25, .25, vocab)}


configs = st.tuples(st.sampled_from([(8, 2), (12, 3), (8, 4)]), st.sampled_from(["post", "pre"]),
                    st.integers(1, 2))


@given(seed=seeds, cfg=configs, t=st.integers(3, 6))
def test_encoder_padded_positions_change_no_unpadded_output(ops, seed, cfg, t):
    (d, h), norm, n = cfg
    r = np.random.default_rng(seed)
    keep = int(r.integers(1, t))
    x = r.uniform(-2, 2, (1, t, d))
    mask = (np.arange(t) < keep)[None, None, None, :]
    p = stack(r, enc_layer, n, d, 2 * d, norm == "pre")
    kw = dict(mask=mask, num_layers=n, num_heads=h, norm=norm, params=p)
    y = ops.encoder(x=x, **kw)
    x2 = x.copy()
    x2[:, keep:] = r.uniform(-2, 2, x2[:, keep:].shape)
    ops.assert_close(ops.encoder(x=x2, **kw)[:, :keep], y[:, :keep], scale=4)


@given(seed=seeds, cfg=configs, t=st.integers(2, 6))
def test_decoder_only_future_tokens_change_no_past_logits(ops, seed, cfg, t):
    (d, h), norm, n = cfg
    r = np.random.default_rng(seed)
    p = lm(r, n, d, 10, 8, norm)
    ids = r.integers(1, 10, (2, t))
    k = int(r.integers(1, t))
    kw = dict(pad_id=0, num_layers=n, num_heads=h, norm=norm, params=p)
    logits = ops.decoder_only(ids=ids, **kw)
    ids2 = ids.copy()
    ids2[:, k:] = r.integers(1, 10, ids2[:, k:].shape)
    ops.assert_close(ops.decoder_only(ids=ids2, **kw)[:, :k], logits[:, :k], scale=4)


@given(seed=seeds, cfg=configs, t=st.integers(2, 5), s=st.integers(2, 5))
def test_decoder_future_positions_change_no_past_output(ops, seed, cfg, t, s):
    (d, h), norm, n = cfg
    r = np.random.default_rng(seed)
    x, memory = r.uniform(-2, 2, (1, t, d)), r.uniform(-2, 2, (1, s, d))
    causal = np.tril(np.ones((t, t), dtype=bool))
    kw = dict(memory=memory, self_mask=causal, num_layers=n, num_heads=h, norm=norm,
              params=stack(r, dec_layer, n, d, 2 * d, norm == "pre"))
    k = int(r.integers(1, t))
    y = ops.decoder(x=x, **kw)
    x2 = x.copy()
    x2[:, k:] = r.uniform(-2, 2, x2[:, k:].shape)
    ops.assert_close(ops.decoder(x=x2, **kw)[:, :k], y[:, :k], scale=4)


@given(seed=seeds, cfg=configs)
def test_one_layer_stack_equals_its_layer_then_final_norm_when_pre(ops, seed, cfg):
    (d, h), norm, _ = cfg
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (2, 4, d))
    layer, final = enc_layer(r, d, 2 * d), _ln(r, d)
    params = _scoped("layers.0", layer)
    if norm == "pre":
        params.update(_scoped("final_norm", final))
    y = ops.encoder(x=x, num_layers=1, num_heads=h, norm=norm, params=params)
    want = ops.encoder_layer(x=x, num_heads=h, norm=norm, params=layer)
    if norm == "pre":
        want = ops.layer_norm(x=want, params=final)
    ops.assert_close(y, want, scale=4)


@given(seed=seeds, cfg=configs, t=st.integers(2, 6), data=st.data())
def test_encoder_is_permutation_equivariant_without_positions(ops, seed, cfg, t, data):
    (d, h), norm, n = cfg
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (1, t, d))
    perm = np.array(data.draw(st.permutations(range(t))))
    kw = dict(num_layers=n, num_heads=h, norm=norm,
              params=stack(r, enc_layer, n, d, 2 * d, norm == "pre"))
    ops.assert_close(ops.encoder(x=x[:, perm], **kw), ops.encoder(x=x, **kw)[:, perm], scale=4)


@given(seed=seeds, s=st.integers(3, 6))
def test_transformer_padded_source_tokens_change_no_logits(ops, seed, s):
    r = np.random.default_rng(seed)
    d, h, vocab = 8, 2, 10
    p = {"src_embed.table": r.uniform(-.35, .35, (vocab, d)),
         "tgt_embed.table": r.uniform(-.35, .35, (vocab, d)),
         **_scoped("encoder", stack(r, enc_layer, 1, d, 16, False)),
         **_scoped("decoder", stack(r, dec_layer, 1, d, 16, False)),
         "lm_head.w": r.uniform(-1, 1, (d, vocab)), "lm_head.b": r.uniform(-.25, .25, vocab)}
    keep = int(r.integers(1, s))
    src = r.integers(1, vocab, (1, s))
    src[:, keep:] = 0
    tgt = r.integers(1, vocab, (1, 4))
    kw = dict(tgt_ids=tgt, pad_id=0, num_layers=1, num_heads=h, params=p)
    logits = ops.transformer(src_ids=src, **kw)
    # the same source without its padding: identical logits (padding is invisible)
    ops.assert_close(ops.transformer(src_ids=src[:, :keep], **kw), logits, scale=4)


@given(seed=seeds, cfg=configs, t=st.integers(2, 6), data=st.data())
def test_incremental_decoding_with_cache_equals_full_decoding(backend, device, attnspec_session,
                                                               ops, seed, cfg, t, data):
    """decoder_only_step over chunks of the ids (API: spec/components/greedy_decode.md)
    gives the logits of decoder_only on all ids."""
    (d, h), norm, n = cfg
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    p = lm(r, n, d, 10, 8, norm)
    ids = r.integers(0, 10, (2, t))  # 0 is pad_id: pad keys in the cache stay masked
    ids[:, 0] = 1
    cuts = sorted(set(data.draw(st.lists(st.integers(1, t - 1), max_size=3))))
    init = ops.raw("decoder_only_init_cache", "decoding")
    step = ops.raw("decoder_only_step", "decoding")
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    cfg_kw = dict(pad_id=0, num_layers=n, num_heads=h, norm=norm)
    cache = init(batch_size=2, num_layers=n, num_heads=h, params=bp)
    chunks = []
    for a, b in zip([0, *cuts], [*cuts, t]):
        logits, cache = step(backend.asarray(ids[:, a:b], dtype=None, device=device), cache,
                             params=bp, **cfg_kw)
        chunks.append(backend.to_numpy(logits).astype(np.float64))
    ops.assert_close(np.concatenate(chunks, axis=1), ops.decoder_only(ids=ids, params=p, **cfg_kw),
                     scale=8)


def _snapshot(backend, cache: dict) -> dict:
    return {k: np.array(backend.to_numpy(v), copy=True) if hasattr(v, "shape") else v
            for k, v in cache.items()}


@given(seed=seeds, t=st.integers(1, 3), more=st.integers(1, 3))
def test_decoder_only_step_leaves_its_input_cache_unchanged(backend, device, attnspec_session,
                                                             ops, seed, t, more):
    """A step returns a new cache: the one it was given keeps its entries and values, so a
    second step from the same cache gives the same logits (beam search relies on it)."""
    dtype = attnspec_session.property_dtype
    r = np.random.default_rng(seed)
    p = lm(r, 1, 8, 10, 8)
    bp = {k: backend.asarray(v, dtype=dtype, device=device) for k, v in p.items()}
    init = ops.raw("decoder_only_init_cache", "decoding")
    step = ops.raw("decoder_only_step", "decoding")
    kw = dict(pad_id=0, num_layers=1, num_heads=2, norm="pre", params=bp)
    ids = r.integers(1, 10, (2, t + more))
    _, cache = step(backend.asarray(ids[:, :t], dtype=None, device=device),
                    init(batch_size=2, num_layers=1, num_heads=2, params=bp), **kw)
    before = _snapshot(backend, cache)
    tail = backend.asarray(ids[:, t:], dtype=None, device=device)
    first, _ = step(tail, cache, **kw)
    after = _snapshot(backend, cache)
    assert sorted(after) == sorted(before), "decoder_only_step changed its input cache's keys"
    for k in before:
        assert np.array_equal(after[k], before[k]), f"decoder_only_step changed cache[{k!r}]"
    second, _ = step(tail, cache, **kw)
    assert np.array_equal(backend.to_numpy(first), backend.to_numpy(second))


@given(seed=seeds, p_len=st.integers(1, 3), max_len=st.integers(3, 7), eos_bias=st.floats(0, 3))
def test_greedy_decode_keeps_the_prompt_and_pads_after_eos(ops, seed, p_len, max_len, eos_bias):
    r = np.random.default_rng(seed)
    p = lm(r, 1, 8, 10, 8)
    p["lm_head.b"][2] += eos_bias
    prompt = r.integers(3, 10, (3, p_len))
    prompt[:, 0] = 1
    ids = ops.greedy_decode(prompt=prompt, model="decoder_only", bos_id=1, eos_id=2, pad_id=0,
                            max_len=max(max_len, p_len), num_layers=1, num_heads=2, norm="pre",
                            activation="gelu", params=p)
    assert ids.shape == (3, max(max_len, p_len)) and ids.dtype.kind in "iu"
    assert np.array_equal(ids[:, :p_len], prompt)
    for row in ids:
        gen = list(row[p_len:])
        if 2 in gen:
            assert all(v == 0 for v in gen[gen.index(2) + 1:]), row
        assert all(0 <= v < 10 for v in gen)


@given(seed=seeds, cfg=configs, t=st.integers(1, 6))
def test_decoder_only_tied_head_equals_untied_head_with_the_table_transposed(ops, seed, cfg, t):
    """GPT-2's tie (issue 25): tie_embeddings=True without lm_head.* gives the logits of the
    untied model whose lm_head.w is embed.table^T and which has no bias."""
    (d, h), norm, n = cfg
    r = np.random.default_rng(seed)
    p = {k: v for k, v in lm(r, n, d, 10, 8, norm).items() if not k.startswith("lm_head.")}
    ids = r.integers(0, 10, (2, t))
    ids[:, 0] = 1 + ids[:, 0] % 9  # the first token is never the pad id
    kw = dict(pad_id=0, num_layers=n, num_heads=h, norm=norm, activation="gelu_tanh")
    tied = ops.decoder_only(ids=ids, tie_embeddings=True, params=p, **kw)
    untied = ops.decoder_only(ids=ids, params={**p, "lm_head.w": p["embed.table"].T.copy()},
                              **kw)
    ops.assert_close(tied, untied, scale=4)
