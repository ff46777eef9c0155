"""Invariants of the parallel-residual decoder-only model (parallel_decoder_only: GPT-NeoX,
Falcon; spec/components/parallel_layer.md). Each test name is the invariant; parameters are
random (NumPy generator seeded by hypothesis)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
# (D, H, H_kv, num_norms): GPT-NeoX (H_kv = H, two norms), Falcon-7B (MQA, one norm), Falcon's
# new architecture (GQA, two norms)
shapes = st.sampled_from([(8, 2, 2, 2), (16, 4, 1, 1), (16, 4, 2, 2)])


def model(r, n, d, h, h_kv, norms, vocab):
    k, f = d // h, 2 * d
    w = lambda *s: r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5  # noqa: E731
    b = lambda m: r.uniform(-0.25, 0.25, m)  # noqa: E731
    p = {"embed.table": r.uniform(-1, 1, (vocab, d))}
    for i in range(n):
        layer = {"attn_norm.gamma": 1 + b(d), "attn_norm.beta": b(d),
                 "attn.w_q": w(d, h * k), "attn.b_q": b(h * k), "attn.w_k": w(d, h_kv * k),
                 "attn.b_k": b(h_kv * k), "attn.w_v": w(d, h_kv * k), "attn.b_v": b(h_kv * k),
                 "attn.w_o": w(h * k, d), "attn.b_o": b(d), "ffn.w1": w(d, f), "ffn.b1": b(f),
                 "ffn.w2": w(f, d), "ffn.b2": b(d)}
        if norms == 2:
            layer.update({"ffn_norm.gamma": 1 + b(d), "ffn_norm.beta": b(d)})
        p.update({f"layers.{i}.{key}": v for key, v in layer.items()})
    return {**p, "final_norm.gamma": 1 + b(d), "final_norm.beta": b(d),
            "lm_head.w": r.uniform(-1, 1, (d, vocab))}


@given(seed=seeds, cfg=shapes, t=st.integers(2, 6))
def test_parallel_model_future_tokens_change_no_past_logits(ops, seed, cfg, t):
    (d, h, h_kv, norms) = cfg
    r = np.random.default_rng(seed)
    p = model(r, 2, d, h, h_kv, norms, 10)
    ids = r.integers(1, 10, (2, t))
    k = int(r.integers(1, t))
    kw = dict(pad_id=0, num_layers=2, num_heads=h, num_kv_heads=h_kv, num_norms=norms, params=p)
    logits = ops.parallel_decoder_only(ids=ids, **kw)
    ids2 = ids.copy()
    ids2[:, k:] = r.integers(1, 10, ids2[:, k:].shape)
    ops.assert_close(ops.parallel_decoder_only(ids=ids2, **kw)[:, :k], logits[:, :k], scale=4)


@given(seed=seeds, cfg=shapes, n=st.integers(1, 2), t=st.integers(1, 6))
def test_parallel_model_tied_head_equals_untied_head_holding_the_table_transposed(
        ops, seed, cfg, n, t):
    """tie_embeddings (Falcon's tie_word_embeddings): logits equal the untied model's whose
    lm_head.w is embed.table^T."""
    (d, h, h_kv, norms) = cfg
    r = np.random.default_rng(seed)
    p = model(r, n, d, h, h_kv, norms, 10)
    ids = r.integers(1, 10, (2, t))
    kw = dict(pad_id=0, num_layers=n, num_heads=h, num_kv_heads=h_kv, num_norms=norms)
    untied = {**p, "lm_head.w": p["embed.table"].T.copy()}
    tied = {k: v for k, v in p.items() if k != "lm_head.w"}
    ops.assert_close(ops.parallel_decoder_only(ids=ids, tie_embeddings=True, params=tied, **kw),
                     ops.parallel_decoder_only(ids=ids, params=untied, **kw), scale=2)
