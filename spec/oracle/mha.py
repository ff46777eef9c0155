"""Multi-head attention, straight from the definition (Vaswani et al. 2017, §3.2.2).

    Q = query W_q + b_q   (B, T, H*K)      head h owns columns h*K:(h+1)*K
    K = key   W_k + b_k   (B, S, H*K)
    V = value W_v + b_v   (B, S, H*V)
    head_h = sdpa(Q[..., h*K:(h+1)*K], K[..., h*K:(h+1)*K], V[..., h*V:(h+1)*V], mask)
    output = concat_h(head_h) W_o + b_o   (B, T, Do)
    weights[b, h] = the softmax weights of head h   (B, H, T, S)

Grouped-query attention (Ainslie et al. 2023; multi-query: Shazeer 2019): with
num_kv_heads = H_kv (None: H), W_k is (Dk, H_kv*K) and W_v (Dv, H_kv*V), and query head h
reads key/value head g = h // (H / H_kv) (contiguous groups: Llama's repeat_kv):

    head_h = sdpa(Q[..., h*K:(h+1)*K], K[..., g*K:(g+1)*K], V[..., g*V:(g+1)*V], mask)

Each head is its own call of the sdpa oracle (scale 1/sqrt(K)); the heads are
cut out of the fused projections by explicit column ranges, not by reshapes.
"""

import numpy as np

from .core import add, matmul, mpa, zeros


def project(x, params, w, b):
    """x W + b over the last axis (b absent: no bias)."""
    y = matmul(mpa(x), mpa(params[w]))
    return add(y, mpa(params[b])) if b in params else y


def mha(query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
    from .sdpa import sdpa

    params = params or {}
    h_count = int(num_heads)
    kv_count = h_count if num_kv_heads is None else int(num_kv_heads)
    group = h_count // kv_count
    q_all = project(query, params, "w_q", "b_q")  # (B, T, H*K)
    k_all = project(key, params, "w_k", "b_k")  # (B, S, H_kv*K)
    v_all = project(value, params, "w_v", "b_v")  # (B, S, H_kv*V)
    k_w, v_w = q_all.shape[-1] // h_count, v_all.shape[-1] // kv_count
    b, t, s = q_all.shape[0], q_all.shape[1], k_all.shape[1]
    head_mask = None if mask is None else np.broadcast_to(np.asarray(mask), (b, h_count, t, s))
    concat = zeros((b, t, h_count * v_w))
    weights = zeros((b, h_count, t, s))
    for h in range(h_count):
        g = h // group  # the kv head query head h reads
        qh = q_all[:, :, h * k_w:(h + 1) * k_w]
        kh = k_all[:, :, g * k_w:(g + 1) * k_w]
        vh = v_all[:, :, g * v_w:(g + 1) * v_w]
        r = sdpa(qh, kh, vh, mask=None if head_mask is None else head_mask[:, h])
        concat[:, :, h * v_w:(h + 1) * v_w] = r["output"]
        weights[:, h] = r["weights"]
    output = project(concat, params, "w_o", "b_o")  # (B, T, Do)
    return {"output": output, "weights": weights}
