"""Scaled dot-product attention as a student might paste it from a tutorial
notebook (NumPy). This one follows the spec: 1/sqrt(d_k) scale, boolean mask
with True = may attend, and a row with nothing to attend to gives zeros.

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
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    # a fully masked row: every score is -inf; keep it finite, zero it below
    row_max = np.max(scores, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.exp(scores - row_max)
    total = np.sum(e, axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ v, weights
