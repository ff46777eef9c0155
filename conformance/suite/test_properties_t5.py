"""Invariants of t5_model, T5 on token ids (issue 25; hypothesis). Each test name is the
invariant: the tied head is the untied one with W = shared^T D^-0.5; the model is the shared
embedding, t5_encoder, t5_decoder and the head called by hand; a logit sees no later target
token."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
V = 11
configs = st.tuples(st.sampled_from([(8, 2), (12, 3), (8, 4)]), st.integers(1, 2),
                    st.sampled_from(["relu", "gated-gelu"]))


def _stack(r, kind, n, d, h, ff):
    subs = ["attn"] if kind == "encoder" else ["self_attn", "cross_attn"]
    norms = {"attn": "attn_norm", "self_attn": "self_norm", "cross_attn": "cross_norm"}
    p = {}
    for i in range(n):
        for s in subs:
            p[f"layers.{i}.{norms[s]}.gamma"] = r.uniform(0.5, 1.5, d)
            for w in ("w_q", "w_k", "w_v", "w_o"):
                p[f"layers.{i}.{s}.{w}"] = r.uniform(-.5, .5, (d, d))
        p[f"layers.{i}.ffn_norm.gamma"] = r.uniform(0.5, 1.5, d)
        for w in (["w_gate", "w_up"] if ff == "gated-gelu" else ["w_up"]):
            p[f"layers.{i}.ffn.{w}"] = r.uniform(-.5, .5, (d, 2 * d))
        p[f"layers.{i}.ffn.w_down"] = r.uniform(-.5, .5, (2 * d, d))
    p[f"layers.0.{subs[0]}.rel_bias.table"] = r.uniform(-2, 2, (8, h))
    p["final_norm.gamma"] = r.uniform(0.5, 1.5, d)
    return p


def _model(r, cfg):
    (d, h), n, ff = cfg
    p = {"shared.table": r.uniform(-1, 1, (V, d))}
    for kind in ("encoder", "decoder"):
        p.update({f"{kind}.{k}": v for k, v in _stack(r, kind, n, d, h, ff).items()})
    return p


def _sub(p, prefix):
    return {k[len(prefix) + 1:]: v for k, v in p.items() if k.startswith(prefix + ".")}


def _data(r, s, t):
    """Two source rows (row 1 padded after 1) and two target rows starting with the pad id
    (T5's decoder start token)."""
    src = r.integers(2, V, (2, s))
    src[1, 1:] = 0
    tgt = r.integers(2, V, (2, t))
    tgt[:, 0] = 0
    return src, tgt


def _stacks(cfg):
    (_, h), n, ff = cfg
    return dict(num_layers=n, num_heads=h, num_buckets=8, max_distance=16, feed_forward=ff)


@given(seed=seeds, cfg=configs, s=st.integers(1, 5), t=st.integers(1, 5))
def test_tied_head_equals_untied_head_with_w_the_shared_table_transposed_times_rsqrt_d(
        ops, seed, cfg, s, t):
    r = np.random.default_rng(seed)
    p = _model(r, cfg)
    src, tgt = _data(r, s, t)
    d = p["shared.table"].shape[1]
    tied = ops.t5_model(src_ids=src, tgt_ids=tgt, pad_id=0, params=p, **_stacks(cfg))
    untied = ops.t5_model(src_ids=src, tgt_ids=tgt, pad_id=0, tie_embeddings=False,
                          params={**p, "lm_head.w": p["shared.table"].T / np.sqrt(d)},
                          **_stacks(cfg))
    ops.assert_close(tied, untied, scale=2)


@given(seed=seeds, cfg=configs, s=st.integers(1, 5), t=st.integers(1, 5),
       tie=st.booleans())
def test_model_equals_shared_embedding_then_encoder_decoder_and_head_called_by_hand(
        ops, seed, cfg, s, t, tie):
    """e = shared[ids] (NumPy); memory = t5_encoder(e_src, src != pad); h =
    t5_decoder(e_tgt, memory, no self_mask, src != pad); logits = h shared^T D^-0.5 (tied)
    or h lm_head.w (NumPy)."""
    r = np.random.default_rng(seed)
    p = _model(r, cfg)
    d = p["shared.table"].shape[1]
    if not tie:
        p["lm_head.w"] = r.uniform(-1, 1, (d, V))
    src, tgt = _data(r, s, t)
    keep = (src != 0)[:, None, None, :]
    table = p["shared.table"]
    memory = ops.t5_encoder(x=table[src], mask=keep, params=_sub(p, "encoder"), **_stacks(cfg))
    h = ops.t5_decoder(x=table[tgt], memory=memory, memory_mask=keep,
                       params=_sub(p, "decoder"), **_stacks(cfg))
    h = np.asarray(h, np.float64)
    want = h @ table.T / np.sqrt(d) if tie else h @ p["lm_head.w"]
    got = ops.t5_model(src_ids=src, tgt_ids=tgt, pad_id=0, tie_embeddings=tie, params=p,
                       **_stacks(cfg))
    ops.assert_close(got, want, scale=4)


@given(seed=seeds, cfg=configs, t=st.integers(2, 5), data=st.data())
def test_logits_at_a_target_position_do_not_depend_on_later_target_tokens(
        ops, seed, cfg, t, data):
    r = np.random.default_rng(seed)
    p = _model(r, cfg)
    src, tgt = _data(r, 4, t)
    j = data.draw(st.integers(1, t - 1))
    other = tgt.copy()
    other[:, j:] = r.integers(2, V, (2, t - j))
    a = ops.t5_model(src_ids=src, tgt_ids=tgt, pad_id=0, params=p, **_stacks(cfg))
    b = ops.t5_model(src_ids=src, tgt_ids=other, pad_id=0, params=p, **_stacks(cfg))
    ops.assert_close(np.asarray(a)[:, :j], np.asarray(b)[:, :j])
