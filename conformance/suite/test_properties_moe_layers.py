"""Invariants of the mixture-of-experts decoder layers (mixtral_layer, deepseek_layer,
spec/components/moe_layers.md). Each test name is the invariant; parameters are random (NumPy
generator seeded by hypothesis)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

seeds = st.integers(0, 2**32 - 1)
GLU = ("w_gate", "w_up", "w_down")


def _w(r, *s):
    return r.uniform(-1, 1, s) / np.sqrt(s[0]) * 1.5


def attention(r, d, h, h_kv):
    k = d // h
    return {"attn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d), "attn.w_q": _w(r, d, h * k),
            "attn.w_k": _w(r, d, h_kv * k), "attn.w_v": _w(r, d, h_kv * k),
            "attn.w_o": _w(r, h * k, d), "ffn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d)}


def experts(r, d, e, f):
    return {"moe.router.w": _w(r, d, e), "moe.experts.w_gate": _w(r, e, d, f) * np.sqrt(e / d),
            "moe.experts.w_up": _w(r, e, d, f) * np.sqrt(e / d),
            "moe.experts.w_down": _w(r, e, f, d) * np.sqrt(e / f)}


def mla(r, d, h, dn, dr, dv, rank):
    return {"attn.w_q": _w(r, d, h * (dn + dr)), "attn.w_kv_a": _w(r, d, rank + dr),
            "attn.kv_norm.gamma": 1 + r.uniform(-0.25, 0.25, rank),
            "attn.w_kv_b": _w(r, rank, h * (dn + dv)), "attn.w_o": _w(r, h * dv, d),
            "attn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d),
            "ffn_norm.gamma": 1 + r.uniform(-0.25, 0.25, d)}


@given(seed=seeds, e=st.integers(2, 5), t=st.integers(1, 5), window=st.sampled_from([None, 2]))
def test_mixtral_layer_routing_every_token_to_one_expert_equals_llama_layer_with_its_ffn(
        ops, seed, e, t, window):
    """A zero router ties every expert; top 1 renormalised picks the lowest id, expert 0, with
    weight 1 (the spec's tie rule): the layer is llama_layer with expert 0 as its SwiGLU."""
    r = np.random.default_rng(seed)
    d, h, h_kv, f = 8, 2, 1, 6
    p = {**attention(r, d, h, h_kv), **experts(r, d, e, f)}
    p["moe.router.w"] = np.zeros((d, e))
    x = r.uniform(-1, 1, (2, t, d))
    dense = {k: v for k, v in p.items() if not k.startswith("moe.")}
    dense.update({f"ffn.{n}": p[f"moe.experts.{n}"][0] for n in GLU})
    kw = dict(num_heads=h, num_kv_heads=h_kv, window=window)
    ops.assert_close(ops.mixtral_layer(x=x, top_k=1, renormalize=True, params=p, **kw),
                     ops.llama_layer(x=x, params=dense, **kw), scale=2)


@given(seed=seeds, e=st.integers(2, 5), t=st.integers(1, 4), bias=st.booleans())
def test_mixtral_layer_permuting_experts_with_router_columns_changes_nothing(
        ops, seed, e, t, bias):
    """Every expert on every token (top_k = E: no selection to tie), experts permuted along
    their first axis and the router's columns alike: y is unchanged."""
    r = np.random.default_rng(seed)
    d, h, h_kv, f = 8, 2, 2, 4
    p = {**attention(r, d, h, h_kv), **experts(r, d, e, f)}
    if bias:
        p.update({f"attn.b_{c}": r.uniform(-0.5, 0.5, d) for c in "qkv"})
    perm = r.permutation(e)
    q = dict(p, **{"moe.router.w": p["moe.router.w"][:, perm]},
             **{f"moe.experts.{n}": p[f"moe.experts.{n}"][perm] for n in GLU})
    x = r.uniform(-1, 1, (2, t, d))
    kw = dict(num_heads=h, top_k=e, renormalize=False, attention_bias=bias)
    ops.assert_close(ops.mixtral_layer(x=x, params=q, **kw),
                     ops.mixtral_layer(x=x, params=p, **kw), scale=2)


@given(seed=seeds, e=st.sampled_from([2, 4]), t=st.integers(1, 4))
def test_deepseek_layer_permuting_experts_with_router_columns_and_bias_changes_nothing(
        ops, seed, e, t):
    """The same for DeepSeek-V3's sigmoid router with its correction bias permuted too."""
    r = np.random.default_rng(seed)
    d = 8
    p = {**mla(r, d, 2, 2, 2, 2, 4), **experts(r, d, e, 4),
         "moe.router.correction_bias": r.uniform(-0.5, 0.5, e)}
    perm = r.permutation(e)
    q = dict(p, **{"moe.router.w": p["moe.router.w"][:, perm],
                   "moe.router.correction_bias": p["moe.router.correction_bias"][perm]},
             **{f"moe.experts.{n}": p[f"moe.experts.{n}"][perm] for n in GLU})
    x = r.uniform(-1, 1, (1, t, d))
    kw = dict(num_heads=2, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2, top_k=e,
              routed_scaling_factor=1.5)
    ops.assert_close(ops.deepseek_layer(x=x, params=q, **kw),
                     ops.deepseek_layer(x=x, params=p, **kw), scale=2)


@given(seed=seeds, t=st.integers(1, 4))
def test_deepseek_layer_with_one_expert_and_top_1_equals_its_dense_ffn(ops, seed, t):
    """One routed expert, top 1, renormalised (weight exactly 1): the MoE layer equals the dense
    layer whose ffn.* is that expert."""
    r = np.random.default_rng(seed)
    d = 8
    p = {**mla(r, d, 2, 2, 2, 2, 4), **experts(r, d, 1, 6)}
    dense = {k: v for k, v in p.items() if not k.startswith("moe.")}
    dense.update({f"ffn.{n}": p[f"moe.experts.{n}"][0] for n in GLU})
    x = r.uniform(-1, 1, (2, t, d))
    kw = dict(num_heads=2, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)
    ops.assert_close(ops.deepseek_layer(x=x, params=p, top_k=1, **kw),
                     ops.deepseek_layer(x=x, params=dense, **kw), scale=2)
