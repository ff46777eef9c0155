"""Alignment-model attention of the RNN era: additive (Bahdanau) and Luong.

The checks run in Python on shapes; the arithmetic of each function is one ``jax.jit``
(``_additive``, ``_luong``), as in attention.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks as check
from . import _core, buckets
from ._core import weighted_sum
from .attention import _softmax_core

SCORES = ("dot", "general", "concat")


def _tanh_score(q_proj, k_proj, v):
    """e[b, t, s] = v . tanh(q_proj[b, t] + k_proj[b, s])."""
    return jnp.tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :]) @ v  # (B, T, S)


def _attend(scores, values, mask):
    """weights = masked softmax over s; context = weights values (inside a jit)."""
    weights = _softmax_core(scores, True if mask is None else mask, -1)  # (B, T, S)
    return weighted_sum(weights, values), weights  # (B, T, Dv), (B, T, S)


@jax.jit
def _additive(query, keys, values, mask, w_q, w_k, v):
    return _attend(_tanh_score(query @ w_q, keys @ w_k, v), values, mask)


@functools.partial(jax.jit, static_argnames="score")
def _luong(query, keys, values, mask, w, v, score):
    if score == "dot":
        scores = query @ jnp.swapaxes(keys, -1, -2)  # (B, T, S)
    elif score == "general":
        scores = (query @ w) @ jnp.swapaxes(keys, -1, -2)  # (B, T, S)
    else:
        d_q = query.shape[-1]  # [q; k] W = q W_top + k W_bottom
        scores = _tanh_score(query @ w[:d_q], keys @ w[d_q:], v)  # (B, T, S)
    return _attend(scores, values, mask)


def additive_attention(query, keys, values=None, mask=None, *, params):
    """Bahdanau et al. (2015): e_ts = v . tanh(q_t W_q + k_s W_k), w_t = softmax_s(e_t),
    context_t = sum_s w_ts values_s."""
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    p = check.params_of(params)
    w_q = check.param(_core, p, "w_q", (query.shape[-1], None), query, "query")
    a = w_q.shape[1]
    w_k = check.param(_core, p, "w_k", (keys.shape[-1], a), query, "query")
    v = check.param(_core, p, "v", (a,), query, "query")
    return _bucketed(_additive, query, keys, values, mask, (w_q, w_k, v), (
        lambda d_q, d_k, A: (buckets.pad(w_q, (d_q, A)), buckets.pad(w_k, (d_k, A)),
                             buckets.pad(v, (A,)))))


def _bucketed(kernel, query, keys, values, mask, weights, padded, **static):
    """kernel(query, keys, values, mask, *weights) at bucket sizes (buckets.py): batch,
    queries and keys padded (padded keys masked out), every width padded with zeros;
    ``padded(D_q, D_k, A)`` gives the weights padded to those widths (A: the attention
    width, weights[-1]'s length where there is one)."""
    (b, t, d_q), (s, d_k), d_v = query.shape, keys.shape[1:], values.shape[-1]
    a = weights[-1].shape[0] if weights and weights[-1] is not None else 1
    B, T, S, DQ, DK, DV, A = (buckets.size(n) for n in (b, t, s, d_q, d_k, d_v, a))
    if not (buckets.applies(query, keys, values, mask, *weights)
            and buckets.small((B, T, S, A), (B, S, max(DK, DV)))):
        return kernel(query, keys, values, mask, *weights, **static)
    inputs = (buckets.pad(query, (B, T, DQ)), buckets.pad(keys, (B, S, DK)),
              buckets.pad(values, (B, S, DV)), buckets.keep(mask, (b, t, s), (B, T, S)))
    context, w = kernel(*buckets.on_device(*inputs, *padded(DQ, DK, A)), **static)
    return (buckets.cut(context, slice(0, b), slice(0, t), slice(0, d_v)),
            buckets.cut(w, slice(0, b), slice(0, t), slice(0, s)))


def luong_attention(query, keys, values=None, mask=None, *, score="dot", params=None):
    """Luong et al. (2015), unscaled scores, then w_t = softmax_s(e_t), context = w values.

    dot: e_ts = q_t . k_s; general: e_ts = q_t W k_sᵀ; concat: e_ts = v . tanh([q_t; k_s] W).
    """
    score = check.choice("score", score, SCORES)
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    p = check.params_of(params)
    d_q, d_k = query.shape[-1], keys.shape[-1]
    w = v = None
    if score == "dot":
        check.same("query/key width (score='dot')",
                   **{"query.shape[-1]": d_q, "keys.shape[-1]": d_k})
    elif score == "general":
        w = check.param(_core, p, "w", (d_q, d_k), query, "query")
    else:
        w = check.param(_core, p, "w", (d_q + d_k, None), query, "query")
        v = check.param(_core, p, "v", (w.shape[1],), query, "query")

    def padded(DQ, DK, A):  # dot: no weights; general: w (D_q, D_k); concat: [q; k] rows apart
        if score == "dot":
            return None, None
        if score == "general":
            return buckets.pad(w, (DQ, DK)), None
        top, bottom = np.asarray(w)[:d_q], np.asarray(w)[d_q:]
        return (np.concatenate([buckets.pad(top, (DQ, A)), buckets.pad(bottom, (DK, A))]),
                buckets.pad(v, (A,)))
    return _bucketed(_luong, query, keys, values, mask, (w, v), padded, score=score)
