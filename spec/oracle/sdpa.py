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

from .core import (
    add,
    fsum_axes,
    matmul,
    mpa,
    rows,
    softmax,
    softmax_backward_row,
    transpose_last,
    unbroadcast,
    weighted_sum,
)
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


def sdpa_vjp(cot, q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """W = softmax(S), S = C tanh(s / C) + bias (no cap: S = s + bias), s = c q k^T, O = W v;
    with cotangents dO and dW:
        dW' = dO v^T + dW                       (..., T, S)
        dS  = W * (dW' - rowsum(dW' * W))       (softmax backward)
        ds  = dS * (1 - tanh^2(s / C))          (softcap backward; no cap: ds = dS)
        dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS (summed to bias's shape)
    With num_kv_heads (GQA), k and v are repeated to every query head of their group first,
    so dk and dv of a kv head are summed over the H / H_kv query heads of its group.
    """
    q, k, v = mpa(q), mpa(k), mpa(v)
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))  # (..., H, S, .)
    w = sdpa(q, k, v, mask=mask, bias=bias, scale=scale, softcap=softcap)["weights"]
    full = batch_shape(q, k, v)
    dO = np.broadcast_to(mpa(cot["output"]), full + (q.shape[-2], v.shape[-1]))
    dWt = matmul(dO, transpose_last(np.broadcast_to(v, full + v.shape[-2:])))
    if "weights" in cot:
        dWt = dWt + mpa(cot["weights"])
    dS = np.empty(w.shape, dtype=object)
    for idx, row in rows(w):
        dS[idx] = softmax_backward_row(row, list(dWt[idx]))
    return scores_backward(dS, w, dO, q, k, v, (k_in, v_in), bias=bias, scale=scale,
                           num_kv_heads=num_kv_heads, softcap=softcap), {}


def scores_backward(dS, w, dO, q, k, v, kv_in, *, bias, scale, num_kv_heads, softcap) -> dict:
    """From dS (the gradient of the capped, biased scores) and dO to the input gradients,
    shared by every attention whose weights W multiply v (sdpa, sdpa_lse, sdpa_sinks):
        ds = dS * (1 - tanh^2(s / C)) (no cap: ds = dS),
        dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS (summed to bias's shape);
    k and v are the repeated ones under GQA, ``kv_in`` the given ones (dk, dv of a kv head
    summed over its group of query heads)."""
    full = batch_shape(q, k, v)
    ds = dS
    if softcap is not None:
        cap = mpmath.mpf(softcap)
        s = np.broadcast_to(scores_of(q, k, scale), w.shape)
        ds = dS * np.vectorize(lambda e: 1 - mpmath.tanh(e / cap) ** 2, otypes=[object])(s)
    c = 1 / mpmath.sqrt(q.shape[-1]) if scale is None else mpmath.mpf(scale)
    kb = np.broadcast_to(k, full + k.shape[-2:])
    qb = np.broadcast_to(q, full + q.shape[-2:])
    grads = {"q": unbroadcast(matmul(ds, kb) * c, q.shape),                 # (..., T, K)
             "k": unbroadcast(matmul(transpose_last(ds), qb) * c, k.shape),  # (..., S, K)
             "v": unbroadcast(matmul(transpose_last(w), dO), v.shape)}       # (..., S, V)
    if num_kv_heads is not None:
        for name, x in zip(("k", "v"), kv_in):  # (..., H, S, .) -> (..., H_kv, S, .)
            g = grads[name]
            g = g.reshape(g.shape[:-3] + (x.shape[-3], g.shape[-3] // x.shape[-3]) + g.shape[-2:])
            grads[name] = fsum_axes(g, (-3,))
    if bias is not None:
        grads["bias"] = unbroadcast(dS, np.shape(bias))
    return grads


VJPS = {"sdpa": sdpa_vjp}
