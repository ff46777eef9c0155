"""Alignment-model attention of the RNN era: additive (Bahdanau) and Luong."""

from __future__ import annotations

import numpy as np

from .. import _checks as check
from . import _core
from .attention import softmax, softmax_backward, weighted_sum

SCORES = ("dot", "general", "concat")


def _tanh_score(q_proj, k_proj, v):
    """e[b, t, s] = v . tanh(q_proj[b, t] + k_proj[b, s])."""
    return np.tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :]) @ v  # (B, T, S)


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
        scores = query @ np.swapaxes(keys, -1, -2)  # (B, T, S)
    elif score == "general":
        w = check.param(_core, p, "w", (d_q, d_k), query, "query")
        scores = (query @ w) @ np.swapaxes(keys, -1, -2)  # (B, T, S)
    else:
        w = check.param(_core, p, "w", (d_q + d_k, None), query, "query")
        v = check.param(_core, p, "v", (w.shape[1],), query, "query")
        scores = _tanh_score(query @ w[:d_q], keys @ w[d_q:], v)  # [q; k] W = q W_top + k W_bot
    return _attend(scores, values, mask)


# -- backward (vector-Jacobian products) ---------------------------------------------------

# weights = softmax(e) (masked), context = weights values; with cotangents dC (and dW):
#   dW' = dC values^T + dW,  de = W * (dW' - rowsum(dW' * W)),  dvalues = W^T dC
def _attend_vjp(cotangents, scores, values, mask):
    context, w = _attend(scores, values, mask)  # (B, T, Dv), (B, T, S)
    dC = cotangents.get("context")
    dC = np.zeros_like(context) if dC is None else np.asarray(dC, dtype=w.dtype)
    dW = dC @ np.swapaxes(values, -1, -2)  # (B, T, S)
    if "weights" in cotangents:
        dW = dW + np.asarray(cotangents["weights"], dtype=w.dtype)
    return softmax_backward(w, dW), np.swapaxes(w, -1, -2) @ dC  # (B, T, S), (B, S, Dv)


# e[b,t,s] = v . h, h = tanh(u), u = q_proj[b,t] + k_proj[b,s]   (q_proj = q W_q, k_proj = k W_k):
#   dv = sum_{b,t,s} de h,  du = de v (1 - h^2),  dq_proj = sum_s du,  dk_proj = sum_t du,
#   dq = dq_proj W_q^T,  dW_q = sum_b q^T dq_proj   (k alike)
def _tanh_score_vjp(query, keys, w_q, w_k, v, de):
    h = np.tanh((query @ w_q)[:, :, None, :] + (keys @ w_k)[:, None, :, :])  # (B, T, S, A)
    du = de[..., None] * v * (1 - h * h)  # (B, T, S, A)
    dq_proj, dk_proj = du.sum(axis=2), du.sum(axis=1)  # (B, T, A), (B, S, A)
    dv = np.einsum("bts,btsa->a", de, h)
    dw_q = np.einsum("bti,bta->ia", query, dq_proj)
    dw_k = np.einsum("bsj,bsa->ja", keys, dk_proj)
    return dq_proj @ w_q.T, dk_proj @ w_k.T, dw_q, dw_k, dv


def _with_values(dq, dk, dvalues, values_given: bool) -> dict:
    """values omitted means values = keys: keys' gradient gets dvalues too."""
    if values_given:
        return {"query": dq, "keys": dk, "values": dvalues}
    return {"query": dq, "keys": dk + dvalues}


def additive_attention_vjp(cotangents, query, keys, values=None, mask=None, *, params):
    additive_attention(query, keys, values, mask, params=params)  # the forward's checks
    given = values is not None
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    w_q, w_k, v = (np.asarray(params[n], dtype=query.dtype) for n in ("w_q", "w_k", "v"))
    de, dvalues = _attend_vjp(cotangents, _tanh_score(query @ w_q, keys @ w_k, v), values, mask)
    dq, dk, dw_q, dw_k, dv = _tanh_score_vjp(query, keys, w_q, w_k, v, de)
    return _with_values(dq, dk, dvalues, given), {"w_q": dw_q, "w_k": dw_k, "v": dv}


# dot:     e = q k^T:             dq = de k,  dk = de^T q
# general: e = q W k^T:           dq = de k W^T,  dk = de^T q W,  dW = sum_b q^T de k
# concat:  e = v . tanh([q; k] W): additive's backward with W_q, W_k the top and bottom of W
def luong_attention_vjp(cotangents, query, keys, values=None, mask=None, *, score="dot",
                        params=None):
    luong_attention(query, keys, values, mask, score=score, params=params)  # the checks
    given = values is not None
    query, keys, values, mask = check.alignment_inputs(_core, query, keys, values, mask)
    p = {n: np.asarray(a, dtype=query.dtype) for n, a in (params or {}).items()}
    kt = np.swapaxes(keys, -1, -2)
    d_q, grads = query.shape[-1], {}
    if score == "dot":
        de, dvalues = _attend_vjp(cotangents, query @ kt, values, mask)
        dq, dk = de @ keys, np.swapaxes(de, -1, -2) @ query
    elif score == "general":
        de, dvalues = _attend_vjp(cotangents, (query @ p["w"]) @ kt, values, mask)
        dek = de @ keys  # (B, T, Dk)
        dq, dk = dek @ p["w"].T, np.swapaxes(de, -1, -2) @ (query @ p["w"])
        grads["w"] = np.einsum("bti,btj->ij", query, dek)
    else:
        w_q, w_k = p["w"][:d_q], p["w"][d_q:]
        scores = _tanh_score(query @ w_q, keys @ w_k, p["v"])
        de, dvalues = _attend_vjp(cotangents, scores, values, mask)
        dq, dk, dw_q, dw_k, dv = _tanh_score_vjp(query, keys, w_q, w_k, p["v"], de)
        grads = {"w": np.concatenate([dw_q, dw_k], axis=0), "v": dv}
    return _with_values(dq, dk, dvalues, given), grads
