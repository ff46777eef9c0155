"""Scaled dot-product attention as a student might paste it from a tutorial
notebook (NumPy). This one follows the spec: 1/sqrt(d_k) scale, boolean mask
with True = may attend, and a row with nothing to attend to gives zeros; the
edges too (no keys, +inf scores, NaN in masked keys: see spec/components/sdpa.md).

    attnspec check examples/coursework/attention_correct.py:scaled_dot_product_attention \
        --component sdpa
"""

import numpy as np


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def scaled_dot_product_attention(q, k, v, mask=None, bias=None, scale=None):
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / np.sqrt(d_k)
    scores = scale * (q @ np.swapaxes(k, -1, -2))
    if bias is not None:
        scores = scores + bias
    keep = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    keep = keep & (scores != -np.inf)
    # +inf scores share their row equally (the limit of the softmax); NaN stays NaN
    top = keep & (scores == np.inf)
    live = np.where(top.any(axis=-1, keepdims=True), top, keep)
    scores = np.where(live, np.where(top, 0.0, scores), -np.inf)
    # a fully masked row: every score is -inf; keep it finite, zero it below
    row_max = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
    row_max = np.where(np.isfinite(row_max) | np.isnan(row_max), row_max, 0.0)
    e = np.where(live, np.exp(scores - row_max), 0.0)
    total = np.sum(e, axis=-1, keepdims=True)
    weights = np.where(keep, e / np.where(total == 0, 1.0, total), 0.0)
    # a key of weight 0 is left out of the sum, not multiplied: 0 * NaN would be NaN
    terms = weights[..., :, :, None] * v[..., None, :, :]
    return np.sum(np.where(weights[..., None] != 0, terms, 0.0), axis=-2), weights
