"""The mixture-of-experts layer (Mixtral, Qwen2-MoE, DeepSeek-V3) and its load-balancing loss
(Switch Transformer, as transformers' load_balancing_loss_func computes it):

    z = x W_router                                         # (N, E) router logits
    w, I = moe_router(z, b; top_k, ...)                    # (N, k) weights, expert ids
    FFN_e(x) = (silu(x W_gate[e]) * (x W_up[e])) W_down[e] # SwiGLU, expert e
    y_n = sum_j w_nj FFN_{I_nj}(x_n)                       # the weight after the expert
          + sigma(x_n W_shared_gate) FFN_shared(x_n)       # Qwen2-MoE (DeepSeek: no gate)

    aux = E sum_e f_e P_e,   f_e = (1/M) sum_{l,n} m_n [e in I_ln],
                             P_e = (1/M) sum_{l,n} m_n softmax(z_ln)_e,   M = L sum_n m_n
"""

import mpmath
import numpy as np

from .core import matmul, mpa, softmax_backward_row, softmax_row, transpose_last, zeros
from .gated_feedforward import gated_feedforward, gated_feedforward_vjp
from .moe_router import moe_router, moe_router_vjp, select

GLU = ("w_gate", "w_up", "w_down")


def _expert(params, e):
    return {n: mpa(params[f"experts.{n}"])[e] for n in GLU}


def _shared(params):
    return {n: params[f"shared.{n}"] for n in GLU} if "shared.w_gate" in params else None


def _sigmoid(a):
    return 1 / (1 + mpmath.exp(-a))


def _forward(x, params, router):
    x = mpa(x)                                                    # (N, D)
    wr = mpa(params["router.w"])                                  # (D, E)
    z = matmul(x, wr)                                             # (N, E)
    r = moe_router(z, params.get("router.correction_bias"), **router)
    outs = [gated_feedforward(x, params=_expert(params, e))["y"] for e in range(wr.shape[1])]
    return x, z, r["weights"], r["indices"], outs


def moe(x, *, params, **router):
    x, z, w, idx, outs = _forward(x, params, router)
    y = zeros(x.shape)
    for n in range(x.shape[0]):
        for j in range(idx.shape[1]):
            y[n] = y[n] + w[n, j] * outs[idx[n, j]][n]
    shared = _shared(params)
    if shared is not None:
        s = gated_feedforward(x, params=shared)["y"]              # (N, D)
        if "shared_gate.w" in params:
            g = matmul(x, mpa(params["shared_gate.w"]))           # (N, 1)
            s = s * np.vectorize(_sigmoid, otypes=[object])(g)
        y = y + s
    return {"y": y, "router_logits": z}


def moe_vjp(cot, x, *, params, **router):
    """Expert e's cotangent dy_e[n] = sum_j [I_nj = e] w_nj dy_n (then the SwiGLU VJP);
    dw_nj = <dy_n, FFN_{I_nj}(x_n)>, through the router's VJP into dz (plus z's own
    cotangent); dx += dz W_router^T, dW_router = x^T dz. Shared, gate g = sigma(x W_sg):
    ds = g dy, dg = <dy, s>, du = dg g (1 - g), dW_sg = x^T du, dx += du W_sg^T."""
    x, z, w, idx, outs = _forward(x, params, router)
    dy = mpa(cot["y"])
    n_tok, e_count = z.shape
    dx, grads = zeros(x.shape), {}
    for e in range(e_count):
        dy_e = zeros(x.shape)
        for n in range(n_tok):
            for j in range(idx.shape[1]):
                if idx[n, j] == e:
                    dy_e[n] = dy_e[n] + w[n, j] * dy[n]
        gi, gp = gated_feedforward_vjp({"y": dy_e}, x, params=_expert(params, e))
        dx = dx + gi["x"]
        for name in GLU:
            grads.setdefault(f"experts.{name}", np.empty(mpa(params[f"experts.{name}"]).shape,
                                                         dtype=object))[e] = gp[name]
    dw = np.empty(w.shape, dtype=object)
    for n in range(n_tok):
        for j in range(idx.shape[1]):
            dw[n, j] = mpmath.fdot(dy[n], outs[idx[n, j]][n])
    bias = params.get("router.correction_bias")
    rg, _ = moe_router_vjp({"weights": dw}, z, bias, **router)
    dz = rg["logits"] + (mpa(cot["router_logits"]) if "router_logits" in cot else zeros(z.shape))
    wr = mpa(params["router.w"])
    dx = dx + matmul(dz, transpose_last(wr))
    grads["router.w"] = matmul(transpose_last(x), dz)
    if bias is not None:
        grads["router.correction_bias"] = zeros(np.shape(bias))
    shared = _shared(params)
    if shared is not None:
        ds = dy
        if "shared_gate.w" in params:
            wg = mpa(params["shared_gate.w"])                     # (D, 1)
            s = gated_feedforward(x, params=shared)["y"]
            g = np.vectorize(_sigmoid, otypes=[object])(matmul(x, wg))  # (N, 1)
            ds = dy * g
            du = np.empty(g.shape, dtype=object)
            for n in range(n_tok):
                du[n, 0] = mpmath.fdot(dy[n], s[n]) * g[n, 0] * (1 - g[n, 0])
            grads["shared_gate.w"] = matmul(transpose_last(x), du)
            dx = dx + matmul(du, transpose_last(wg))
        gi, gp = gated_feedforward_vjp({"y": ds}, x, params=shared)
        dx = dx + gi["x"]
        grads.update({f"shared.{k}": v for k, v in gp.items()})
    return {"x": dx}, grads


def _aux_parts(router_logits, mask, top_k):
    z = mpa(router_logits)                                        # (L, N, E)
    layers, n_tok, e_count = z.shape
    m = [1] * n_tok if mask is None else [1 if bool(v) else 0 for v in np.asarray(mask)]
    total = mpmath.mpf(layers * sum(m))
    f, probs = [mpmath.mpf(0)] * e_count, {}
    big_p = [mpmath.mpf(0)] * e_count
    for ln in np.ndindex(layers, n_tok):
        p = softmax_row(list(z[ln]))
        probs[ln] = p
        if not m[ln[1]]:
            continue
        for e in select(p, top_k, 1, 1):
            f[e] += 1 / total
        big_p = [a + pe / total for a, pe in zip(big_p, p)]
    return z, m, total, f, big_p, probs


def moe_aux_loss(router_logits, mask=None, *, top_k):
    _, _, _, f, big_p, _ = _aux_parts(router_logits, mask, top_k)
    loss = len(f) * mpmath.fdot(f, big_p)
    return {"loss": np.array(loss, dtype=object)}


def moe_aux_loss_vjp(cot, router_logits, mask=None, *, top_k):
    """f is piecewise constant: dP_e = c E f_e, dz_ln = (m_n / M) softmax_backward(p_ln, dP)."""
    z, m, total, f, _, probs = _aux_parts(router_logits, mask, top_k)
    c = mpa(cot["loss"]).reshape(())[()]
    d_big_p = [c * len(f) * fe for fe in f]
    dz = np.empty(z.shape, dtype=object)
    for ln, p in probs.items():
        dz[ln] = [g * m[ln[1]] / total for g in softmax_backward_row(p, d_big_p)]
    return {"router_logits": dz}, {}


VJPS = {"moe": moe_vjp, "moe_aux_loss": moe_aux_loss_vjp}
