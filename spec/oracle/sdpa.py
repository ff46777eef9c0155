"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1), with mask and bias.

    scores[..., i, j]  = scale * sum_k q[..., i, k] k[..., j, k] + bias[..., i, j]
    weights[..., i, :] = softmax over the keys j with mask[..., i, j] True
                         (and scores not -inf); nothing kept -> all 0
    output[..., i, :]  = sum_j weights[..., i, j] v[..., j, :]   over the j with weight != 0
                         (a masked key's value, even NaN or inf, is never multiplied in)
    scale defaults to 1 / sqrt(K), K = q.shape[-1]

Leading (batch) dimensions of q, k, v, mask and bias broadcast together.

Grouped-query attention (Ainslie et al. 2023; multi-query: Shazeer 2019): with
num_kv_heads = H_kv, axis -3 is the head axis, q has H heads and k, v have H_kv, and query
head h reads key/value head h // (H / H_kv).

Logit soft-capping (Gemma 2, Gemma Team 2024; ONNX Attention's softcap): with softcap = c,
the scaled scores are capped before the bias and the mask (the order of Gemma 2's
attention and of ONNX Attention-23), with the softcap component's equation:

    scores[..., i, j] = c tanh(scale * sum_k q[..., i, k] k[..., j, k] / c) + bias[..., i, j]
"""

import mpmath
import numpy as np

from .core import add, matmul, mpa, softmax, transpose_last, weighted_sum
from .softcap import softcap as capped


def scores_of(q, k, scale=None):
    """scale * q k^T, (..., T, S), exact."""
    q, k = mpa(q), mpa(k)
    width = q.shape[-1]
    c = 1 / mpmath.sqrt(width) if scale is None else mpmath.mpf(scale)
    return matmul(q, transpose_last(k)) * c


def batch_shape(q, k, v):
    return np.broadcast_shapes(np.shape(q)[:-2], np.shape(k)[:-2], np.shape(v)[:-2])


def repeat_kv(x, num_heads, num_kv_heads):
    """(..., H_kv, S, .) -> (..., H, S, .): head h reads kv head h // (H / H_kv)."""
    group = num_heads // num_kv_heads
    return np.take(x, [h // group for h in range(num_heads)], axis=-3)


def sdpa(q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    q, k, v = mpa(q), mpa(k), mpa(v)
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))
    scores = scores_of(q, k, scale)  # (..., T, S)
    if softcap is not None:
        scores = capped(scores, softcap)["y"]  # before the bias and the mask
    full = batch_shape(q, k, v) + scores.shape[-2:]
    scores = np.broadcast_to(scores, full)
    if bias is not None:
        scores = add(scores, mpa(bias))  # bias broadcasts to (..., T, S)
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), full)
    weights = softmax(scores, axis=-1, keep=keep)  # (..., T, S)
    output = weighted_sum(weights, v)  # (..., T, V)
    return {"output": output, "weights": weights}
