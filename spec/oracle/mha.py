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

from .core import add, cotangent, linear_vjp, matmul, mpa, zeros
from .sdpa import sdpa, sdpa_vjp


def project(x, params, w, b):
    """x W + b over the last axis (b absent: no bias)."""
    y = matmul(mpa(x), mpa(params[w]))
    return add(y, mpa(params[b])) if b in params else y


def mha(query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
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


def project_vjp(x, params, w, b, dy, grads):
    """Adds dW (and db, if the bias exists) of y = x W + b to ``grads``; returns dx."""
    dx, grads[w], db = linear_vjp(x, params[w], dy)
    if b in params:
        grads[b] = db
    return dx


def mha_vjp(cot, query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
    """Q = query W_q + b_q, K = key W_k + b_k, V = value W_v + b_v, head h reads columns
    h*K:(h+1)*K of Q and those of kv head g = h // (H / H_kv) of K and V,
    O = concat_h(sdpa(Q_h, K_g, V_g)) W_o + b_o:
        dconcat = dO W_o^T,  dW_o = concat^T dO,  db_o = sum dO
        dQ_h, dK_g, dV_g from sdpa's backward of head h (dK_g, dV_g summed over g's heads)
        dquery = dQ W_q^T,  dW_q = query^T dQ,  db_q = sum dQ   (key, value alike)
    """
    params = {n: mpa(a) for n, a in (params or {}).items()}
    h_count = int(num_heads)
    group = h_count // (h_count if num_kv_heads is None else int(num_kv_heads))
    q_all = project(query, params, "w_q", "b_q")  # (B, T, H*K)
    k_all = project(key, params, "w_k", "b_k")  # (B, S, H_kv*K)
    v_all = project(value, params, "w_v", "b_v")  # (B, S, H_kv*V)
    k_w, v_w = q_all.shape[-1] // h_count, v_all.shape[-1] * group // h_count
    b, t, s = q_all.shape[0], q_all.shape[1], k_all.shape[1]
    head_mask = None if mask is None else np.broadcast_to(np.asarray(mask), (b, h_count, t, s))
    concat = zeros((b, t, h_count * v_w))
    for h in range(h_count):
        g = h // group
        concat[:, :, h * v_w:(h + 1) * v_w] = sdpa(
            q_all[:, :, h * k_w:(h + 1) * k_w], k_all[:, :, g * k_w:(g + 1) * k_w],
            v_all[:, :, g * v_w:(g + 1) * v_w],
            mask=None if head_mask is None else head_mask[:, h])["output"]
    grads = {}
    d_o = params["w_o"].shape[-1]
    dconcat = project_vjp(concat, params, "w_o", "b_o", cotangent(cot, "output", (b, t, d_o)), grads)
    dq_all, dk_all, dv_all = zeros(q_all.shape), zeros(k_all.shape), zeros(v_all.shape)
    for h in range(h_count):
        g = h // group
        qs, ks, vs = (slice(h * k_w, (h + 1) * k_w), slice(g * k_w, (g + 1) * k_w),
                      slice(g * v_w, (g + 1) * v_w))
        c = {"output": dconcat[:, :, h * v_w:(h + 1) * v_w]}
        if "weights" in cot:
            c["weights"] = mpa(cot["weights"])[:, h]
        gh, _ = sdpa_vjp(c, q_all[:, :, qs], k_all[:, :, ks], v_all[:, :, vs],
                         mask=None if head_mask is None else head_mask[:, h])
        dq_all[:, :, qs] = gh["q"]
        dk_all[:, :, ks] = dk_all[:, :, ks] + gh["k"]  # a kv head: the sum over its group
        dv_all[:, :, vs] = dv_all[:, :, vs] + gh["v"]
    dx = {"query": project_vjp(query, params, "w_q", "b_q", dq_all, grads),
          "key": project_vjp(key, params, "w_k", "b_k", dk_all, grads),
          "value": project_vjp(value, params, "w_v", "b_v", dv_all, grads)}
    return dx, grads


VJPS = {"mha": mha_vjp}
