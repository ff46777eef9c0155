"""Single-head self-attention: project one sequence three ways, then sdpa.

    Q = x W_Q + b_Q,  K = x W_K + b_K,  V = x W_V + b_V   (each bias optional)
    output, weights = sdpa(Q, K, V, mask, scale)          scale None -> 1/sqrt(K)
"""

from .mha import project


def self_attention(x, mask=None, scale=None, params=None):
    from .sdpa import sdpa

    params = params or {}
    q = project(x, params, "w_q", "b_q")  # (B, T, K)
    k = project(x, params, "w_k", "b_k")  # (B, T, K)
    v = project(x, params, "w_v", "b_v")  # (B, T, V)
    r = sdpa(q, k, v, mask=mask, scale=scale)
    return {"output": r["output"], "weights": r["weights"]}
