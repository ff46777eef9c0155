"""Alignment-model attention of the RNN era: additive (Bahdanau) and Luong."""

from __future__ import annotations

import mlx.core as mx

from .. import _checks as check
from . import _core
from .attention import softmax, weighted_sum

SCORES = ("dot", "general", "concat")


def _tanh_score(q_proj, k_proj, v):
    """e[b, t, s] = v . tanh(q_proj[b, t] + k_proj[b, s])."""
    return mx.tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :]) @ v  # (B, T, S)


def _attend(scores, values, mask):
    """weights = masked softmax over s; context = weights values."""
    weights = softmax(scores, mask)  # (B, T, S)
    return weighted_sum(weights, values), weights  # (B, T, Dv), (B, T, S)


def additive_attention(query, keys, values=None, mask=None, *, params):
    """Bahdanau et al. (2015): e_ts = v . tanh(q_t W_q + k_s W_k), w_t = softmax_s(e_t),
    context_t = sum_s w_ts values_s."""
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    p = check.params_of(params)
    w_q = check.param(_core, p, "w_q", (query.shape[-1], None), query, "query")
    a = w_q.shape[1]
    w_k = check.param(_core, p, "w_k", (keys.shape[-1], a), query, "query")
    v = check.param(_core, p, "v", (a,), query, "query")
    return _attend(_tanh_score(query @ w_q, keys @ w_k, v), values, mask)


def luong_attention(query, keys, values=None, mask=None, *, score="dot", params=None):
    """Luong et al. (2015), unscaled scores, then w_t = softmax_s(e_t), context = w values.

    dot: e_ts = q_t . k_s; general: e_ts = q_t W k_sᵀ; concat: e_ts = v . tanh([q_t; k_s] W).
    """
    score = check.choice("score", score, SCORES)
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    p = check.params_of(params)
    d_q, d_k = query.shape[-1], keys.shape[-1]
    if score == "dot":
        check.same("query/key width (score='dot')",
                   **{"query.shape[-1]": d_q, "keys.shape[-1]": d_k})
        scores = query @ mx.swapaxes(keys, -1, -2)  # (B, T, S)
    elif score == "general":
        w = check.param(_core, p, "w", (d_q, d_k), query, "query")
        scores = (query @ w) @ mx.swapaxes(keys, -1, -2)  # (B, T, S)
    else:
        w = check.param(_core, p, "w", (d_q + d_k, None), query, "query")
        v = check.param(_core, p, "v", (w.shape[1],), query, "query")
        scores = _tanh_score(query @ w[:d_q], keys @ w[d_q:], v)  # [q; k] W = q W_top + k W_bot
    return _attend(scores, values, mask)
