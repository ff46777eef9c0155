"""Planted bugs in additive/Luong attention, self-attention and multi-head attention
that the vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant, rejections


def _get(params, name):
    return None if params is None or name not in params else np.asarray(params[name])


def _lin(x, params, w, b, *, use_bias=True):
    y = x @ _get(params, w)
    bias = _get(params, b)
    return y if bias is None or not use_bias else y + bias


def _contiguous(x, heads):
    b, t, width = x.shape
    return x.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3)


def _interleaved(x, heads):
    """Head h takes columns h::H (a reshape to (B, T, K, H))."""
    b, t, width = x.shape
    return x.reshape(b, t, width // heads, heads).transpose(0, 3, 1, 2)


def make_mha(*, split=_contiguous, swap_qk=False, scale="k", output_bias=True, average=False,
             merge=None):
    def broken(query, key, value, mask=None, *, num_heads, params, num_kv_heads=None):
        wq, bq, wk, bk = ("w_k", "b_k", "w_q", "b_q") if swap_qk else ("w_q", "b_q", "w_k", "b_k")
        h_kv = num_heads if num_kv_heads is None else num_kv_heads
        group = num_heads // h_kv  # grouped-query attention done right: only the bug differs
        q = split(_lin(query, params, wq, bq), num_heads)
        k = np.repeat(split(_lin(key, params, wk, bk), h_kv), group, axis=1)
        v = np.repeat(split(_lin(value, params, "w_v", "b_v"), h_kv), group, axis=1)
        c = {"k": None, "none": 1.0, "d": 1.0 / np.sqrt(query.shape[-1])}[scale]
        out, w = attention.sdpa(q, k, v, mask, scale=c)
        b, h, t, vw = out.shape
        concat = (merge or (lambda o: o.transpose(0, 2, 1, 3).reshape(b, t, h * vw)))(out)
        y = _lin(concat, params, "w_o", "b_o", use_bias=output_bias)
        if average:
            w = np.broadcast_to(w.mean(axis=1, keepdims=True), w.shape)
        return y, w
    return broken


MHA_MUTANTS = {
    "interleaved_heads": make_mha(split=_interleaved),
    "query_key_projections_swapped": make_mha(swap_qk=True),
    "missing_scale": make_mha(scale="none"),
    "scale_1_over_sqrt_d_model": make_mha(scale="d"),
    "missing_output_bias": make_mha(output_bias=False),
    "weights_averaged_over_heads": make_mha(average=True),
    "heads_concatenated_in_reverse": make_mha(
        merge=lambda o: o[:, ::-1].transpose(0, 2, 1, 3).reshape(o.shape[0], o.shape[2], -1)),
}


@pytest.mark.parametrize("name", sorted(MHA_MUTANTS))
def test_mha_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(mha=MHA_MUTANTS[name]), "mha")


# -- mha with num_kv_heads (grouped-query attention) ------------------------------


def make_gqa_mha(expand_kv):
    """An mha whose projected K, V (B, S, H_kv*K) become H heads by ``expand_kv(x, H, H_kv)``
    (B, H, S, K) instead of query head h reading kv head h // (H / H_kv)."""
    def broken(query, key, value, mask=None, *, num_heads, params, num_kv_heads=None):
        h_kv = num_heads if num_kv_heads is None else num_kv_heads
        q = _contiguous(_lin(query, params, "w_q", "b_q"), num_heads)  # (B, H, T, K)
        k = expand_kv(_lin(key, params, "w_k", "b_k"), num_heads, h_kv)  # (B, H, S, K)
        v = expand_kv(_lin(value, params, "w_v", "b_v"), num_heads, h_kv)  # (B, H, S, V)
        out, w = attention.sdpa(q, k, v, mask)
        b, h, t, vw = out.shape
        return _lin(out.transpose(0, 2, 1, 3).reshape(b, t, h * vw), params, "w_o", "b_o"), w
    return broken


def _kv_modulo(x, heads, kv_heads):
    """Query head h reads kv head h % H_kv (np.tile / torch's repeat: [h0, h1, h0, h1])."""
    return np.tile(_contiguous(x, kv_heads), (1, heads // kv_heads, 1, 1))


def _kv_repeat_columns(x, heads, kv_heads):
    """The repeat along the wrong axis: each column of (B, S, H_kv*K) repeated H / H_kv
    times (repeat_interleave on the feature axis), then split into H heads."""
    return _contiguous(np.repeat(x, heads // kv_heads, axis=-1), heads)


def _kv_first_head(x, heads, kv_heads):
    """Every query head reads kv head 0."""
    return np.repeat(_contiguous(x, kv_heads)[:, :1], heads, axis=1)


GQA_MHA_MUTANTS = {
    "kv_head_h_mod_h_kv": make_gqa_mha(_kv_modulo),
    "kv_repeated_along_the_feature_axis": make_gqa_mha(_kv_repeat_columns),
    "every_head_reads_kv_head_0": make_gqa_mha(_kv_first_head),
}


@pytest.mark.parametrize("name", sorted(GQA_MHA_MUTANTS))
def test_mha_gqa_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(mha=GQA_MHA_MUTANTS[name]), "mha")


def make_self_attention(*, swap_qk=False, mode="k", ignore=()):
    def broken(x, mask=None, *, scale=None, params):
        wq, bq, wk, bk = ("w_k", "b_k", "w_q", "b_q") if swap_qk else ("w_q", "b_q", "w_k", "b_k")
        q, k, v = (_lin(x, params, w, b, use_bias=b not in ignore)
                   for w, b in ((wq, bq), (wk, bk), ("w_v", "b_v")))
        if scale is None:
            scale = {"k": None, "none": 1.0, "d": 1.0 / np.sqrt(x.shape[-1])}[mode]
        return attention.sdpa(q, k, v, mask, scale=scale)
    return broken


SELF_ATTENTION_MUTANTS = {
    "query_key_projections_swapped": make_self_attention(swap_qk=True),
    "missing_scale": make_self_attention(mode="none"),
    "scale_1_over_sqrt_d_model": make_self_attention(mode="d"),
    "query_bias_ignored": make_self_attention(ignore=("b_q",)),
    "value_bias_ignored": make_self_attention(ignore=("b_v",)),
}


@pytest.mark.parametrize("name", sorted(SELF_ATTENTION_MUTANTS))
def test_self_attention_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(self_attention=SELF_ATTENTION_MUTANTS[name]), "self_attention")


def _align(query, keys, values, mask, scores):
    from attnspec.backends.numpy.alignment import _attend

    return _attend(scores, keys if values is None else values, mask)


def additive_weights_swapped(query, keys, values=None, mask=None, *, params):
    """w_q applied to the keys and w_k to the query."""
    e = np.tanh((query @ params["w_k"])[:, :, None] + (keys @ params["w_q"])[:, None]) \
        @ params["v"]
    return _align(query, keys, values, mask, e)


def additive_without_tanh(query, keys, values=None, mask=None, *, params):
    e = ((query @ params["w_q"])[:, :, None] + (keys @ params["w_k"])[:, None]) @ params["v"]
    return _align(query, keys, values, mask, e)


def additive_scaled(query, keys, values=None, mask=None, *, params):
    """A 1/sqrt(A) scale borrowed from dot-product attention."""
    e = np.tanh((query @ params["w_q"])[:, :, None] + (keys @ params["w_k"])[:, None]) \
        @ params["v"]
    return _align(query, keys, values, mask, e / np.sqrt(params["v"].shape[0]))


def _luong(*, transpose_w=False, concat_kq=False, dot_scale=False):
    def broken(query, keys, values=None, mask=None, *, score="dot", params=None):
        kt = np.swapaxes(keys, -1, -2)
        if score == "dot":
            e = query @ kt / (np.sqrt(query.shape[-1]) if dot_scale else 1.0)
        elif score == "general":
            w = params["w"]
            e = query @ (w.T if transpose_w else w) @ kt
        else:
            w, v, d_q = params["w"], params["v"], query.shape[-1]
            if concat_kq:  # [k; q] W: the top rows of W meet the keys
                d_k = keys.shape[-1]
                qp, kp = query @ w[d_k:], keys @ w[:d_k]
            else:
                qp, kp = query @ w[:d_q], keys @ w[d_q:]
            e = np.tanh(qp[:, :, None] + kp[:, None]) @ v
        return _align(query, keys, values, mask, e)
    return broken


ALIGNMENT_MUTANTS = {
    ("additive_attention", "w_q_w_k_swapped"): additive_weights_swapped,
    ("additive_attention", "without_tanh"): additive_without_tanh,
    ("additive_attention", "scaled_like_sdpa"): additive_scaled,
    ("luong_attention", "general_w_transposed"): _luong(transpose_w=True),
    ("luong_attention", "concat_order_k_q"): _luong(concat_kq=True),
    ("luong_attention", "dot_scaled_by_sqrt_d"): _luong(dot_scale=True),
}


@pytest.mark.parametrize("key", sorted(ALIGNMENT_MUTANTS), ids=lambda k: f"{k[0]}-{k[1]}")
def test_alignment_mutant_is_rejected(key):
    component, _ = key
    with np.errstate(all="ignore"):
        assert_rejected(mutant(**{component: ALIGNMENT_MUTANTS[key]}), component)


@pytest.mark.parametrize("component", ["mha", "self_attention", "additive_attention",
                                       "luong_attention"])
def test_correct_backend_is_not_rejected(component):
    fails = rejections(mutant(), component)
    assert fails == dict.fromkeys(fails, 0)
