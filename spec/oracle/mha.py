"""Multi-head attention, straight from the definition (Vaswani et al. 2017, §3.2.2).

    Q = query W_q + b_q   (B, T, H*K)      head h owns columns h*K:(h+1)*K
    K = key   W_k + b_k   (B, S, H*K)
    V = value W_v + b_v   (B, S, H*V)
    head_h = sdpa(Q[..., h*K:(h+1)*K], K[..., h*K:(h+1)*K], V[..., h*V:(h+1)*V], mask)
    output = concat_h(head_h) W_o + b_o   (B, T, Do)
    weights[b, h] = the softmax weights of head h   (B, H, T, S)

Each head is its own call of the sdpa oracle (scale 1/sqrt(K)); the heads are
cut out of the fused projections by explicit column ranges, not by reshapes.
"""

import numpy as np

from .core import add, matmul, mpa, zeros


def project(x, params, w, b):
    """x W + b over the last axis (b absent: no bias)."""
    y = matmul(mpa(x), mpa(params[w]))
    return add(y, mpa(params[b])) if b in params else y


def mha(query, key, value, mask=None, num_heads=1, params=None):
    from .sdpa import sdpa

    params = params or {}
    h_count = int(num_heads)
    q_all = project(query, params, "w_q", "b_q")  # (B, T, H*K)
    k_all = project(key, params, "w_k", "b_k")  # (B, S, H*K)
    v_all = project(value, params, "w_v", "b_v")  # (B, S, H*V)
    k_w, v_w = q_all.shape[-1] // h_count, v_all.shape[-1] // h_count
    b, t, s = q_all.shape[0], q_all.shape[1], k_all.shape[1]
    head_mask = None if mask is None else np.broadcast_to(np.asarray(mask), (b, h_count, t, s))
    concat = zeros((b, t, h_count * v_w))
    weights = zeros((b, h_count, t, s))
    for h in range(h_count):
        qh = q_all[:, :, h * k_w:(h + 1) * k_w]
        kh = k_all[:, :, h * k_w:(h + 1) * k_w]
        vh = v_all[:, :, h * v_w:(h + 1) * v_w]
        r = sdpa(qh, kh, vh, mask=None if head_mask is None else head_mask[:, h])
        concat[:, :, h * v_w:(h + 1) * v_w] = r["output"]
        weights[:, h] = r["weights"]
    output = project(concat, params, "w_o", "b_o")  # (B, T, Do)
    return {"output": output, "weights": weights}
