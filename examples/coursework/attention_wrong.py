"""The Annotated-Transformer way: ``masked_fill(mask == 0, -1e9)``. Looks right
on unmasked inputs, but a fully masked row becomes the *uniform* average of
``v`` instead of zeros, and this one scales by sqrt(d_model) of a multi-head
layer... no: by the value width. Run

    attnspec check examples/coursework/attention_wrong.py:scaled_dot_product_attention \
        --component sdpa

to see exactly which vectors catch it and where.
"""

import numpy as np


def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = value.shape[-1]  # bug: the scale uses the value width, not the key width
    scores = query @ np.swapaxes(key, -1, -2) / np.sqrt(d_k)
    if mask is not None:
        scores = np.where(mask == 0, -1e9, scores)  # bug: fully masked rows -> uniform
    scores = scores - scores.max(axis=-1, keepdims=True)
    p_attn = np.exp(scores)
    p_attn = p_attn / p_attn.sum(axis=-1, keepdims=True)
    return p_attn @ value, p_attn
