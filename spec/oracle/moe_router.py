"""The mixture-of-experts router (Mixtral, Qwen-MoE, OLMoE; DeepSeek-V3's sigmoid router):

    p = softmax(x) or sigmoid(x)                      # (N, E) scores
    s = p + b                                          # selection scores (b: correction bias)
    g_m = sum of the two largest s in group m          # when n_group > 1 (group_score
                                                       # "sum_top2", DeepSeek-V3's)
        = the largest s in group m                     # group_score "max" (DeepSeek-V2's
                                                       # group_limited_greedy)
    G = the topk_group groups of largest g_m           # ties: lowest group id
    I = the top_k experts of largest s within G        # ties: lowest expert id; I ordered by
                                                       # s descending, then id ascending
    w_j = p_{I_j}                                      # the bias never enters the weights
    w_j = w_j / (sum_i w_i + eps)                      # when renormalize
    w_j = routed_scaling_factor w_j
"""

import mpmath
import numpy as np

from .core import mpa, softmax_backward_row, softmax_row


def _scores(row, scoring):
    if scoring == "softmax":
        return softmax_row(row)
    return [1 / (1 + mpmath.exp(-e)) for e in row]


def _ranked(values, candidates):
    """candidates sorted by value descending, ties by the lowest id."""
    return sorted(candidates, key=lambda j: (-values[j], j))


def select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    e = len(s)
    size = e // n_group
    groups = range(n_group)
    if n_group > 1:
        best = 2 if group_score == "sum_top2" else 1
        g = [sum(sorted(s[m * size:(m + 1) * size], reverse=True)[:best]) for m in groups]
        groups = _ranked(g, range(n_group))[:topk_group]
    allowed = [j for m in groups for j in range(m * size, (m + 1) * size)]
    return _ranked(s, allowed)[:top_k]


def _route(x, b, top_k, scoring, n_group, topk_group, group_score="sum_top2"):
    x = mpa(x)
    b = [mpmath.mpf(0)] * x.shape[-1] if b is None else list(mpa(b))
    for n in range(x.shape[0]):
        p = _scores(list(x[n]), scoring)
        idx = select([pj + bj for pj, bj in zip(p, b)], top_k, n_group, topk_group, group_score)
        yield n, p, idx


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
    x = mpa(logits)
    w = np.empty((x.shape[0], top_k), dtype=object)
    ids = np.zeros((x.shape[0], top_k), dtype=np.int64)
    c = mpmath.mpf(routed_scaling_factor)
    for n, p, idx in _route(x, correction_bias, top_k, scoring, n_group, topk_group,
                            group_score):
        kept = [p[j] for j in idx]
        total = mpmath.fsum(kept) + mpmath.mpf(eps) if renormalize else mpmath.mpf(1)
        w[n] = [c * k / total for k in kept]
        ids[n] = idx
    return {"weights": w, "indices": ids}


def moe_router_vjp(cot, logits, correction_bias=None, *, top_k, scoring="softmax",
                   renormalize=False, eps=1e-20, n_group=1, topk_group=1,
                   routed_scaling_factor=1.0, group_score="sum_top2"):
    """Through the kept scores only (the indices are piecewise constant):
    g = c dw;  renormalised, dp_{I_j} = g_j / (S + eps) - sum_i g_i p_{I_i} / (S + eps)^2;
    softmax: dx = p (dp - sum_j dp_j p_j);  sigmoid: dx = dp p (1 - p);  d bias = 0."""
    x = mpa(logits)
    dw = mpa(cot["weights"])
    dx = np.empty(x.shape, dtype=object)
    c = mpmath.mpf(routed_scaling_factor)
    for n, p, idx in _route(x, correction_bias, top_k, scoring, n_group, topk_group,
                            group_score):
        g = [c * d for d in dw[n]]
        dp = [mpmath.mpf(0)] * len(p)
        kept = [p[j] for j in idx]
        if renormalize:
            total = mpmath.fsum(kept) + mpmath.mpf(eps)
            inner = mpmath.fdot(g, kept) / (total * total)
            g = [gj / total - inner for gj in g]
        for gj, j in zip(g, idx):
            dp[j] += gj
        if scoring == "softmax":
            dx[n] = softmax_backward_row(p, dp)
        else:
            dx[n] = [d * pj * (1 - pj) for d, pj in zip(dp, p)]
    grads = {"logits": dx}
    if correction_bias is not None:
        grads["correction_bias"] = np.full(np.shape(correction_bias), mpmath.mpf(0), dtype=object)
    return grads, {}


VJPS = {"moe_router": moe_router_vjp}
