"""Planted bugs in sdpa_varlen's window_left / window_right (flash-attn's window_size) that
the sdpa_varlen vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant, rejections


def _band(t, s, left, right, top_left=False):
    p = np.arange(t)[:, None] + (0 if top_left else s - t)  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    keep = np.ones((t, s), dtype=bool)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep


def _varlen(mask_of):
    """An sdpa_varlen whose sequence masks, when a window side is given, come from
    mask_of(T_b, S_b, attributes, (first query row, first key row))."""
    def fn(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q, max_seqlen_k, scale=None,
           causal=False, window=None, window_left=None, window_right=None):
        attrs = dict(causal=causal, window=window, left=window_left, right=window_right)
        if window_left is None and window_right is None:  # the untouched path
            return attention.sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                         scale=scale, causal=causal, window=window)
        h, h_kv = q.shape[1], k.shape[1]
        out = np.zeros((q.shape[0], h, v.shape[2]), dtype=q.dtype)  # (total_q, H, V)
        cq, ck = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
        for (a, e), (c, d) in zip(zip(cq, cq[1:]), zip(ck, ck[1:])):
            if e == a:
                continue
            mask = mask_of(e - a, d - c, attrs, (a, c))
            o, _ = attention.sdpa(q[a:e].transpose(1, 0, 2), k[c:d].transpose(1, 0, 2),
                                  v[c:d].transpose(1, 0, 2), mask, scale=scale,
                                  num_kv_heads=None if h == h_kv else h_kv)
            out[a:e] = o.transpose(1, 0, 2)  # (T_b, H, V)
        return out
    return fn


def _effective(attrs, force_causal=True):
    left, right = attrs["left"], attrs["right"]
    if force_causal and (attrs["causal"] or attrs["window"] is not None):
        right = 0
    if attrs["window"] is not None:
        left = attrs["window"] - 1 if left is None else min(left, attrs["window"] - 1)
    return left, right


def correct(t, s, attrs, _):
    return _band(t, s, *_effective(attrs))


def right_ignored(t, s, attrs, _):
    return _band(t, s, _effective(attrs)[0], 0)


def causal_not_applied(t, s, attrs, _):
    """window_size taken as given, causal=True not forcing right = 0."""
    return _band(t, s, *_effective(attrs, force_causal=False))


def top_left(t, s, attrs, _):
    return _band(t, s, *_effective(attrs), top_left=True)


def left_plus_one(t, s, attrs, _):
    left, right = _effective(attrs)
    return _band(t, s, None if left is None else left + 1, right)


def right_plus_one(t, s, attrs, _):
    left, right = _effective(attrs)
    return _band(t, s, left, None if right is None else right + 1)


def none_as_zero(t, s, attrs, _):
    """An unbounded side (None, flash-attn's -1) read as 0."""
    left, right = _effective(attrs)
    return _band(t, s, left or 0, right or 0)


BUGS = [right_ignored, causal_not_applied, top_left, left_plus_one, right_plus_one, none_as_zero]


@pytest.mark.parametrize("broken", BUGS, ids=lambda f: f.__name__)
def test_sdpa_varlen_window_mutant_is_rejected(broken):
    assert_rejected(mutant(sdpa_varlen=_varlen(broken)), "sdpa_varlen")


def test_the_correct_sketch_passes_every_sdpa_varlen_vector():
    fails = rejections(mutant(sdpa_varlen=_varlen(correct)), "sdpa_varlen")
    assert not any(fails.values()), fails
