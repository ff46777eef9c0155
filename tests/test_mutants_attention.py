"""Planted bugs in masks, sdpa, topk_attention and attention_entropy that the vectors
must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant, rejections

# -- masks ---------------------------------------------------------------------


def causal_top_left(*, t, s):
    """torch.tril(ones(T, S)): query i sees keys j <= i (top-left alignment)."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None]


def causal_strict(*, t, s):
    """Off by one: the diagonal excluded (j < i + S - T)."""
    return np.arange(s)[None, :] < np.arange(t)[:, None] + (s - t)


def causal_plus_one(*, t, s):
    """Off by one the other way: one future key visible."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t) + 1


def padding_inverted(ids, *, pad_id):
    return ~attention.padding_mask(ids, pad_id=pad_id)


def padding_unbatched(ids, *, pad_id):
    """(B, S) instead of (B, 1, 1, S)."""
    return attention.padding_mask(ids, pad_id=pad_id)[:, 0, 0, :]


def combined_top_left(ids, *, pad_id, t, num_heads=1, causal=True):
    keep = attention.combined_mask(ids, pad_id=pad_id, t=t, num_heads=num_heads, causal=False)
    if causal:
        keep = keep & causal_top_left(t=t, s=keep.shape[-1])
    return keep


def combined_no_causal(ids, *, pad_id, t, num_heads=1, causal=True):
    return attention.combined_mask(ids, pad_id=pad_id, t=t, num_heads=num_heads, causal=False)


def combined_no_padding(ids, *, pad_id, t, num_heads=1, causal=True):
    return attention.combined_mask(np.ones_like(ids), pad_id=0, t=t, num_heads=num_heads,
                                   causal=causal)


def combined_one_head(ids, *, pad_id, t, num_heads=1, causal=True):
    """Heads left as a broadcast dimension of size 1."""
    return attention.combined_mask(ids, pad_id=pad_id, t=t, num_heads=1, causal=causal)


@pytest.mark.parametrize("broken", [causal_top_left, causal_strict, causal_plus_one],
                         ids=lambda f: f.__name__)
def test_causal_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(causal_mask=broken), "masks")


@pytest.mark.parametrize("broken", [padding_inverted, padding_unbatched],
                         ids=lambda f: f.__name__)
def test_padding_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(padding_mask=broken), "masks")


@pytest.mark.parametrize("broken", [combined_top_left, combined_no_causal, combined_no_padding,
                                    combined_one_head], ids=lambda f: f.__name__)
def test_combined_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(combined_mask=broken), "masks")


def window_top_left(*, t, s, window):
    """The band aligned at the top left (query i at position i), wrong with a cache."""
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return (j <= i) & (j > i - window)


def window_plus_one(*, t, s, window):
    """q - k <= window: window + 1 keys (FlexAttention's sliding_window example)."""
    return attention.sliding_window_mask(t=t, s=s, window=window + 1)


def window_symmetric(*, t, s, window):
    """|q - k| < window: a local band that also looks ahead (not causal)."""
    p, j = np.arange(t)[:, None] + (s - t), np.arange(s)[None, :]
    return np.abs(p - j) < window


def window_ignored(*, t, s, window):
    """The plain causal mask: the window dropped."""
    return attention.causal_mask(t=t, s=s)


@pytest.mark.parametrize("broken", [window_top_left, window_plus_one, window_symmetric,
                                    window_ignored], ids=lambda f: f.__name__)
def test_sliding_window_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(sliding_window_mask=broken), "masks")


def softcap_hard_clip(x, *, cap):
    return np.clip(x, -cap, cap)


def softcap_no_division(x, *, cap):
    return cap * np.tanh(x)


def softcap_no_scaling(x, *, cap):
    return np.tanh(x / cap)


def softcap_gemma_default(x, *, cap):
    """Gemma 2's attention cap 50 whatever cap is asked."""
    return attention.softcap(x, cap=50.0)


@pytest.mark.parametrize("broken", [softcap_hard_clip, softcap_no_division, softcap_no_scaling,
                                    softcap_gemma_default], ids=lambda f: f.__name__)
def test_softcap_mutant_is_rejected(broken):
    assert_rejected(mutant(softcap=broken), "softcap")


# -- sdpa ----------------------------------------------------------------------


def _sdpa(q, k, v, mask=None, bias=None, *, scale, axis=-1, fill=None, bias_scaled=False,
          post_scale=None):
    """A configurable, deliberately simple sdpa to plant bugs in."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2)
    if bias is not None and bias_scaled:
        scores = scores + bias
    scores = scores * scale
    if bias is not None and not bias_scaled:
        scores = scores + bias
    if mask is not None and fill is not None:
        scores = np.where(mask, scores, fill)
        mask = None
    if mask is not None:
        mask = np.broadcast_to(mask, np.broadcast_shapes(np.shape(mask), scores.shape))
        scores = np.broadcast_to(scores, mask.shape)
    w = attention.softmax(scores, mask, axis=axis)
    if post_scale is not None:
        w = w * post_scale
    return w @ v, w


def _default(q, scale):
    return 1 / np.sqrt(np.shape(q)[-1]) if scale is None else scale


def sdpa_no_scale(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=1.0 if scale is None else scale)


def sdpa_scale_one_over_k(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=1 / np.shape(q)[-1] if scale is None else scale)


def sdpa_scale_sqrt_v(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=1 / np.sqrt(np.shape(v)[-1]) if scale is None
                 else scale)


def sdpa_scale_sqrt_d(q, k, v, mask=None, bias=None, *, scale=None):
    """Divides by sqrt(H*K), the model width, when q is (B, H, T, K)."""
    heads = np.shape(q)[-3] if np.ndim(q) >= 4 else 1
    return _sdpa(q, k, v, mask, bias,
                 scale=1 / np.sqrt(heads * np.shape(q)[-1]) if scale is None else scale)


def sdpa_scale_after_softmax(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=1.0, post_scale=_default(q, scale))


def sdpa_ignores_scale_attribute(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=_default(q, None))


def sdpa_bias_scaled(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=_default(q, scale), bias_scaled=True)


def sdpa_wrong_axis(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, mask, bias, scale=_default(q, scale), axis=-2)


def sdpa_inverted_mask(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, None if mask is None else ~np.asarray(mask), bias,
                 scale=_default(q, scale))


def sdpa_ignores_mask(q, k, v, mask=None, bias=None, *, scale=None):
    return _sdpa(q, k, v, None, bias, scale=_default(q, scale))


def sdpa_fill_minus_1e9(q, k, v, mask=None, bias=None, *, scale=None):
    """The Annotated Transformer: masked_fill(mask == 0, -1e9) -> fully masked row uniform."""
    return _sdpa(q, k, v, mask, bias, scale=_default(q, scale), fill=-1e9)


def sdpa_no_max_subtraction(q, k, v, mask=None, bias=None, *, scale=None):
    out, w = _sdpa(q, k, v, mask, bias, scale=_default(q, scale))
    s = (np.asarray(q) @ np.swapaxes(np.asarray(k), -1, -2)) * _default(q, scale)
    e = np.exp(s) * (w > 0)
    w = e / e.sum(axis=-1, keepdims=True)
    return w @ np.asarray(v), w


def sdpa_multiplies_masked_values(q, k, v, mask=None, bias=None, *, scale=None):
    """weights @ v: a masked key's NaN value times its weight 0 is NaN in the output."""
    _, w = attention.sdpa(q, k, v, mask, bias, scale=scale)
    return w @ np.asarray(v), w


def sdpa_mask_as_minus_inf_bias(q, k, v, mask=None, bias=None, *, scale=None):
    """The mask added as a -inf bias: a NaN score at a masked key stays NaN (NaN - inf)."""
    fill = 0.0 if mask is None else np.where(mask, 0.0, -np.inf)
    extra = fill if bias is None else np.asarray(bias) + fill
    return attention.sdpa(q, k, v, None, np.broadcast_to(extra, np.shape(extra)).astype(
        np.asarray(q).dtype) if np.ndim(extra) else None, scale=scale)


def sdpa_nan_to_num(q, k, v, mask=None, bias=None, *, scale=None):
    """NaN outputs replaced by 0 (nan_to_num): a kept NaN no longer propagates."""
    out, w = attention.sdpa(q, k, v, mask, bias, scale=scale)
    return np.nan_to_num(out, nan=0.0), np.nan_to_num(w, nan=0.0)


SDPA_MUTANTS = [sdpa_multiplies_masked_values, sdpa_mask_as_minus_inf_bias, sdpa_nan_to_num,
                sdpa_no_scale, sdpa_scale_one_over_k, sdpa_scale_sqrt_v, sdpa_scale_sqrt_d,
                sdpa_scale_after_softmax, sdpa_ignores_scale_attribute, sdpa_bias_scaled,
                sdpa_wrong_axis, sdpa_inverted_mask, sdpa_ignores_mask, sdpa_fill_minus_1e9,
                sdpa_no_max_subtraction]


@pytest.mark.parametrize("broken", SDPA_MUTANTS, ids=lambda f: f.__name__)
def test_sdpa_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(sdpa=broken), "sdpa")


# -- topk_attention ------------------------------------------------------------


def _topk(q, k, v, mask=None, *, top_k, scale=None, reverse_ties=False, mask_after=False,
          extra=0, scale_fn=None):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    c = (scale_fn(q) if scale_fn else _default(q, None)) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * c
    full = np.broadcast_shapes(s.shape, np.shape(v)[:-2] + s.shape[-2:])
    s = np.broadcast_to(s, full)
    allowed = np.ones(full, bool) if mask is None else np.broadcast_to(mask, full)
    ranked = np.where(allowed | mask_after, s, -np.inf)
    if reverse_ties:  # stable sort of the reversed keys: equal scores keep the higher index
        order = np.argsort(-ranked[..., ::-1], axis=-1, kind="stable")
        order = full[-1] - 1 - order
    else:
        order = np.argsort(-ranked, axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(full[-1]), axis=-1)
    w = attention.softmax(s, allowed & (rank < top_k + extra))
    return w @ v, w


def topk_reversed_ties(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, mask, top_k=top_k, scale=scale, reverse_ties=True)


def topk_select_before_mask(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, mask, top_k=top_k, scale=scale, mask_after=True)


def topk_off_by_one(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, mask, top_k=top_k, scale=scale, extra=1)


def topk_no_scale(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, mask, top_k=top_k, scale=scale, scale_fn=lambda q: 1.0)


def topk_scale_ignored(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, mask, top_k=top_k, scale=None)


def topk_inverted_mask(q, k, v, mask=None, *, top_k, scale=None):
    return _topk(q, k, v, None if mask is None else ~np.asarray(mask), top_k=top_k, scale=scale)


def topk_plain_sdpa(q, k, v, mask=None, *, top_k, scale=None):
    """Ignores top_k altogether."""
    return attention.sdpa(q, k, v, mask, scale=scale)


def topk_ties_attribute_ignored(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    return attention.topk_attention(q, k, v, mask, top_k=top_k, scale=scale)


def topk_always_keep_all(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    """The Explicit Sparse Transformer code's >= k-th rule where the default is asked for."""
    return attention.topk_attention(q, k, v, mask, top_k=top_k, scale=scale, ties="keep_all")


def topk_multiplies_masked_values(q, k, v, mask=None, *, top_k, scale=None, ties="lower_index"):
    _, w = attention.topk_attention(q, k, v, mask, top_k=top_k, scale=scale, ties=ties)
    return w @ np.asarray(v), w


@pytest.mark.parametrize("broken", [topk_ties_attribute_ignored, topk_always_keep_all,
                                    topk_multiplies_masked_values])
def test_topk_attention_edge_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(topk_attention=broken), "topk_attention")


@pytest.mark.parametrize("broken", [topk_reversed_ties, topk_select_before_mask,
                                    topk_off_by_one, topk_no_scale, topk_scale_ignored,
                                    topk_inverted_mask, topk_plain_sdpa],
                         ids=lambda f: f.__name__)
def test_topk_attention_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(topk_attention=broken), "topk_attention")


# -- attention_entropy ---------------------------------------------------------


def entropy_log2(weights, *, axis=-1):
    return attention.attention_entropy(weights, axis=axis) / np.log(2)


def entropy_no_sign(weights, *, axis=-1):
    return -attention.attention_entropy(weights, axis=axis)


def entropy_nan_at_zero(weights, *, axis=-1):
    w = np.asarray(weights)
    return -np.sum(w * np.log(w), axis=axis)


def entropy_last_axis(weights, *, axis=-1):
    return attention.attention_entropy(weights, axis=-1)


def entropy_renormalised(weights, *, axis=-1):
    w = np.asarray(weights)
    total = w.sum(axis=axis, keepdims=True)
    return attention.attention_entropy(w / np.where(total > 0, total, 1), axis=axis)


@pytest.mark.parametrize("broken", [entropy_log2, entropy_no_sign, entropy_nan_at_zero,
                                    entropy_last_axis, entropy_renormalised],
                         ids=lambda f: f.__name__)
def test_attention_entropy_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(attention_entropy=broken), "attention_entropy")


# -- sdpa with num_kv_heads (grouped-query attention) ----------------------------


def _gqa(kv_index):
    """An sdpa whose query head h reads kv head kv_index(h, H, H_kv)."""
    def broken(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None):
        if num_kv_heads is not None:
            h = np.shape(q)[-3]
            idx = [kv_index(i, h, num_kv_heads) for i in range(h)]
            k, v = np.take(k, idx, axis=-3), np.take(v, idx, axis=-3)
        return attention.sdpa(q, k, v, mask, bias, scale=scale)
    return broken


gqa_modulo = _gqa(lambda i, h, h_kv: i % h_kv)  # k.repeat(...) / tile instead of interleave
gqa_first_kv_head = _gqa(lambda i, h, h_kv: 0)
gqa_reversed_groups = _gqa(lambda i, h, h_kv: h_kv - 1 - i // (h // h_kv))


@pytest.mark.parametrize("broken", [gqa_modulo, gqa_first_kv_head, gqa_reversed_groups],
                         ids=lambda f: f.__name__)
def test_sdpa_gqa_mutant_is_rejected(broken):
    assert_rejected(mutant(sdpa=broken), "sdpa")


# -- sdpa with softcap (logit soft-capping) ----------------------------------------


def _capped_sdpa(order, outer=True):
    """An sdpa with softcap c applied at ``order``: "bias" (to scale s + bias), "mask" (after
    filling masked scores with -inf: they become -c), "scale" (to q k^T, then scaled);
    outer=False: tanh(s / c) without the outer c."""
    def broken(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
        if num_kv_heads is not None:
            k, v = attention.repeat_kv(q, k, v, num_kv_heads)
        c = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        if softcap is None:
            return attention.sdpa(q, k, v, mask, bias, scale=c)

        def cap(x):
            return softcap * np.tanh(x / softcap) if outer else np.tanh(x / softcap)
        s = q @ np.swapaxes(k, -1, -2)  # (..., T, S)
        s = cap(s) * c if order == "scale" else s * c
        if order == "right":
            s = cap(s)
        if bias is not None:
            s = s + bias
        if order == "bias":
            s = cap(s)
        if order == "mask" and mask is not None:
            s, mask = cap(np.where(mask, s, -np.inf)), None
        elif order == "mask":
            s = cap(s)
        w = attention.softmax(s, mask)
        return attention.weighted_sum(w, v), w
    return broken


SOFTCAP_SDPA_MUTANTS = {
    "softcap_after_the_bias": _capped_sdpa("bias"),
    "softcap_after_the_mask": _capped_sdpa("mask"),
    "softcap_before_the_scale": _capped_sdpa("scale"),
    "softcap_tanh_without_the_outer_c": _capped_sdpa("right", outer=False),
    "softcap_ignored": _capped_sdpa("none"),
}


@pytest.mark.parametrize("name", sorted(SOFTCAP_SDPA_MUTANTS))
def test_sdpa_softcap_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(sdpa=SOFTCAP_SDPA_MUTANTS[name]), "sdpa")


def test_sdpa_softcap_mutant_sketch_is_correct_in_the_right_order():
    """The sketch the softcap mutants are planted in passes every sdpa vector when the cap
    is where the spec puts it: each mutant fails only by its planted bug."""
    with np.errstate(all="ignore"):
        assert set(rejections(mutant(sdpa=_capped_sdpa("right")), "sdpa").values()) == {0}


@pytest.mark.parametrize("component", ["masks", "sdpa", "topk_attention", "attention_entropy",
                                       "softcap"])
def test_correct_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}
