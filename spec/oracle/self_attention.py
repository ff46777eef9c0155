"""Single-head self-attention: project one sequence three ways, then sdpa.

    Q = x W_Q + b_Q,  K = x W_K + b_K,  V = x W_V + b_V   (each bias optional)
    output, weights = sdpa(Q, K, V, mask, scale)          scale None -> 1/sqrt(K)
"""

from .core import mpa
from .mha import project, project_vjp
from .sdpa import sdpa, sdpa_vjp


def self_attention(x, mask=None, scale=None, params=None):
    params = params or {}
    q = project(x, params, "w_q", "b_q")  # (B, T, K)
    k = project(x, params, "w_k", "b_k")  # (B, T, K)
    v = project(x, params, "w_v", "b_v")  # (B, T, V)
    r = sdpa(q, k, v, mask=mask, scale=scale)
    return {"output": r["output"], "weights": r["weights"]}


def self_attention_vjp(cot, x, mask=None, scale=None, params=None):
    """Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V, (O, W) = sdpa(Q, K, V):
        dQ, dK, dV from sdpa's backward;  dx = dQ W_Q^T + dK W_K^T + dV W_V^T (x feeds all
        three),  dW_Q = x^T dQ,  db_Q = sum dQ   (K, V alike)
    """
    params = {n: mpa(a) for n, a in (params or {}).items()}
    q, k, v = (project(x, params, f"w_{n}", f"b_{n}") for n in "qkv")  # (B, T, K|V)
    gs, _ = sdpa_vjp(cot, q, k, v, mask=mask, scale=scale)
    grads = {}
    dx = [project_vjp(x, params, f"w_{n}", f"b_{n}", gs[n], grads) for n in "qkv"]
    return {"x": dx[0] + dx[1] + dx[2]}, grads


VJPS = {"self_attention": self_attention_vjp}
