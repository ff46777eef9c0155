"""Invariants of Gemma's RoPE scaling (gemma_layer's and gemma_decoder_only's rope_scaling,
spec/components/gemma.md#rope-scaling-rope_scaling). Each test name is the invariant;
parameters are random (NumPy generator seeded by hypothesis)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
# (D, H, H_kv, K): GQA, MQA, H_kv = H; K = 4 (two frequency pairs) or 8
heads = st.sampled_from([(8, 2, 1, 4), (16, 2, 1, 8), (16, 4, 2, 4), (8, 2, 2, 4)])
windows = st.sampled_from([None, 1, 2, 3])
bases = st.sampled_from([100.0, 10000.0, 1000000.0])


def scaling_of(rule, factor, k, l0=4):
    """rope_scaling of ``rule`` with ``factor`` and L0 = ``l0`` (small: positions pass it;
    dynamic scales once seq_len > L0 whatever the factor, so factor one needs seq_len <= L0;
    longrope's attention factor is 1 with "factor" 1)."""
    return {"linear": {"rope_type": "linear", "factor": factor},
            "dynamic": {"rope_type": "dynamic", "factor": factor, "max_position_embeddings": l0},
            "yarn": {"rope_type": "yarn", "factor": factor,
                     "original_max_position_embeddings": l0},
            "llama3": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 4 * l0},
            "longrope": {"rope_type": "longrope", "factor": factor,
                         "original_max_position_embeddings": l0,
                         "short_factor": [1.0] * (k // 2),
                         "long_factor": [factor] * (k // 2)}}[rule]


rules = st.sampled_from(["linear", "dynamic", "yarn", "llama3", "longrope"])


def layer(r, d, h, h_kv, k, f, qk_norm):
    w = lambda *s: r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5  # noqa: E731
    g = lambda n: r.uniform(-0.25, 0.25, n)  # noqa: E731  (Gemma's w of 1 + w)
    p = {"input_norm.gamma": g(d), "attn.w_q": w(d, h * k), "attn.w_k": w(d, h_kv * k),
         "attn.w_v": w(d, h_kv * k), "attn.w_o": w(h * k, d), "post_attn_norm.gamma": g(d),
         "pre_ffn_norm.gamma": g(d), "ffn.w_gate": w(d, f), "ffn.w_up": w(d, f),
         "ffn.w_down": w(f, d), "post_ffn_norm.gamma": g(d)}
    if qk_norm:
        p.update({"attn.q_norm.gamma": g(k), "attn.k_norm.gamma": g(k)})
    return p


def model(r, n, d, h, h_kv, k, vocab, qk_norm):
    p = {"embed.table": r.uniform(-1, 1, (vocab, d)), "norm.gamma": r.uniform(-0.25, 0.25, d)}
    for i in range(n):
        p.update({f"layers.{i}.{key}": v
                  for key, v in layer(r, d, h, h_kv, k, 2 * d, qk_norm).items()})
    return p


@given(seed=seeds, cfg=heads, window=windows, base=bases, qk_norm=st.booleans(),
       rule=rules, offset=st.integers(0, 30), t=st.integers(1, 6))
def test_gemma_layer_rope_scaling_with_factor_one_equals_no_scaling(
        ops, seed, cfg, window, base, qk_norm, rule, offset, t):
    """linear, dynamic, yarn, llama3 and longrope with factor 1 are the default RoPE (yarn's
    and longrope's attention factor is 1 at factor 1)."""
    d, h, h_kv, k = cfg
    r = np.random.default_rng(seed)
    p = layer(r, d, h, h_kv, k, 2 * d, qk_norm)
    x = r.uniform(-1, 1, (2, t, d))
    kw = dict(num_heads=h, num_kv_heads=h_kv, window=window, rope_base=base, offset=offset,
              qk_norm=qk_norm, params=p)
    scaling = scaling_of(rule, 1.0, k, l0=64)  # dynamic: seq_len = offset + T <= 36 < 64
    ops.assert_close(ops.gemma_layer(x=x, rope_scaling=scaling, **kw),
                     ops.gemma_layer(x=x, **kw), scale=4)


@given(seed=seeds, cfg=heads, window=windows, qk_norm=st.booleans(), rule=rules,
       factor=st.sampled_from([2.0, 8.0]), t=st.integers(2, 7))
def test_gemma_model_rope_scaling_touches_the_global_layers_only(
        ops, seed, cfg, window, qk_norm, rule, factor, t):
    """With N = 2, layer 0 (local) is the same with and without rope_scaling, and layer 1
    (global) is gemma_layer with the scaling applied to layer 0's output; with N = 1 (no
    global layer) the scaling changes nothing."""
    d, h, h_kv, k = cfg
    r = np.random.default_rng(seed)
    p = model(r, 2, d, h, h_kv, k, 10, qk_norm)
    ids = r.integers(1, 10, (2, t))
    scaling = scaling_of(rule, factor, k)
    kw = dict(pad_id=0, num_heads=h, num_kv_heads=h_kv, window=window, qk_norm=qk_norm,
              rope_base=1000.0, rope_local_base=100.0)
    logits, inter = ops.gemma_decoder_only(ids=ids, num_layers=2, rope_scaling=scaling,
                                           params=p, trace=True, **kw)
    _, plain = ops.gemma_decoder_only(ids=ids, num_layers=2, params=p, trace=True, **kw)
    ops.assert_close(inter["layers.0.residual2.output"], plain["layers.0.residual2.output"])
    h1 = ops.gemma_layer(x=np.asarray(inter["layers.0.residual2.output"], np.float64),
                         num_heads=h, num_kv_heads=h_kv, qk_norm=qk_norm, rope_base=1000.0,
                         rope_scaling=scaling,
                         params={key[len("layers.1."):]: v for key, v in p.items()
                                 if key.startswith("layers.1.")})
    ops.assert_close(inter["layers.1.residual2.output"], h1, scale=4)
    one = {key: v for key, v in p.items() if not key.startswith("layers.1.")}
    ops.assert_close(ops.gemma_decoder_only(ids=ids, num_layers=1, rope_scaling=scaling,
                                            params=one, **kw),
                     ops.gemma_decoder_only(ids=ids, num_layers=1, params=one, **kw))
