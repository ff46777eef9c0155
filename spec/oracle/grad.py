"""Vector-Jacobian products (backward passes) at 50 digits, one analytic formula per function.

For a function y = f(x, params) and a cotangent dy (one array per output), the VJP is
dx = (dy/dx)^T dy for every float input and dtheta = (dy/dtheta)^T dy for every parameter:
what reverse-mode autodiff returns for ``sum(y * dy)``.

Why analytic formulas and not a reverse-mode tape over mpf: the forward oracle calls
``mpmath.exp``, ``mpmath.sqrt``, ``mpmath.erf`` and ``mp.fsum`` directly on mpf values; a
tape would have to shadow those module functions (or rewrite every component on a new
number type), which changes the forward oracle that released vectors were generated with.
The formulas below are short, are the equations each component page shows, and are checked
against 50-digit central differences of the *forward* oracle in tests/test_grad_oracle.py,
so a wrong formula here cannot pass unnoticed. Every sum is ``mp.fsum``; results are
rounded once to float64 when the vector is written.

Conventions shared by the backends: relu'(0) = 0 (torch and TensorFlow); a masked or -inf
entry of a softmax has weight 0 and gets gradient 0; a gradient of an input that
broadcast is summed over the broadcast axes (back to the input's shape).
"""

from __future__ import annotations

import mpmath
import numpy as np

from .core import matmul, mp, mpa, softmax, transpose_last, zeros
from .feedforward import ACTIVATIONS


def fsum_axes(a, axes) -> np.ndarray:
    """Exact sums of an object array over ``axes`` (a tuple), keeping the others."""
    a = np.asarray(a, dtype=object)
    axes = tuple(sorted(ax % a.ndim for ax in axes))
    if not axes:
        return a
    moved = np.moveaxis(a, axes, tuple(range(-len(axes), 0)))
    keep = moved.shape[:moved.ndim - len(axes)]
    out = np.empty(keep, dtype=object)
    for idx in np.ndindex(keep):
        out[idx] = mp.fsum(moved[idx].ravel())
    return out


def unbroadcast(g, shape) -> np.ndarray:
    """The gradient of an input of ``shape`` that broadcast to ``g.shape``: sum over the
    leading axes it lacked and the axes where it had size 1."""
    g = np.asarray(g, dtype=object)
    lead = g.ndim - len(shape)
    g = fsum_axes(g, tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if ones:
        g = fsum_axes(g, ones)
        g = g.reshape(shape)
    return g.reshape(shape)


def _rows(a):
    """(..., D) -> iterator of (index, list of the row)."""
    for idx in np.ndindex(a.shape[:-1]):
        yield idx, list(a[idx])


# -- softmax -------------------------------------------------------------------------------

def softmax_backward_row(y, dy) -> list:
    """dx_i = y_i (dy_i - sum_j dy_j y_j)."""
    s = mp.fsum(a * b for a, b in zip(y, dy))
    return [yi * (di - s) for yi, di in zip(y, dy)]


def softmax_vjp(cot, x, mask=None, axis=-1):
    y = softmax(mpa(x), axis=axis, keep=mask)
    ym, dym = np.moveaxis(y, axis, -1), np.moveaxis(mpa(cot["y"]), axis, -1)
    dx = np.empty(ym.shape, dtype=object)
    for idx, row in _rows(ym):
        dx[idx] = softmax_backward_row(row, list(dym[idx]))
    return {"x": np.moveaxis(dx, -1, axis)}, {}


# -- scaled dot-product attention -------------------------------------------------------------

def sdpa_vjp(cot, q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None, softcap=None):
    """W = softmax(S), S = C tanh(s / C) + bias (no cap: S = s + bias), s = c q k^T, O = W v;
    with cotangents dO and dW:
        dW' = dO v^T + dW                       (..., T, S)
        dS  = W * (dW' - rowsum(dW' * W))       (softmax backward)
        ds  = dS * (1 - tanh^2(s / C))          (softcap backward; no cap: ds = dS)
        dq = c ds k,  dk = c ds^T q,  dv = W^T dO,  dbias = dS (summed to bias's shape)
    With num_kv_heads (GQA), k and v are repeated to every query head of their group first,
    so dk and dv of a kv head are summed over the H / H_kv query heads of its group.
    """
    from .sdpa import batch_shape, repeat_kv, scores_of, sdpa

    q, k, v = mpa(q), mpa(k), mpa(v)
    k_in, v_in = k, v
    if num_kv_heads is not None:
        k, v = (repeat_kv(x, q.shape[-3], num_kv_heads) for x in (k, v))  # (..., H, S, .)
    w = sdpa(q, k, v, mask=mask, bias=bias, scale=scale, softcap=softcap)["weights"]
    full = batch_shape(q, k, v)
    dO = np.broadcast_to(mpa(cot["output"]), full + (q.shape[-2], v.shape[-1]))
    dWt = matmul(dO, transpose_last(np.broadcast_to(v, full + v.shape[-2:])))
    if "weights" in cot:
        dWt = dWt + mpa(cot["weights"])
    dS = np.empty(w.shape, dtype=object)
    for idx, row in _rows(w):
        dS[idx] = softmax_backward_row(row, list(dWt[idx]))
    ds = dS
    if softcap is not None:
        cap = mpmath.mpf(softcap)
        s = np.broadcast_to(scores_of(q, k, scale), w.shape)
        ds = dS * np.vectorize(lambda e: 1 - mpmath.tanh(e / cap) ** 2, otypes=[object])(s)
    c = 1 / mpmath.sqrt(q.shape[-1]) if scale is None else mpmath.mpf(scale)
    kb = np.broadcast_to(k, full + k.shape[-2:])
    qb = np.broadcast_to(q, full + q.shape[-2:])
    grads = {"q": unbroadcast(matmul(ds, kb) * c, q.shape),                 # (..., T, K)
             "k": unbroadcast(matmul(transpose_last(ds), qb) * c, k.shape),  # (..., S, K)
             "v": unbroadcast(matmul(transpose_last(w), dO), v.shape)}       # (..., S, V)
    if num_kv_heads is not None:
        for name, x in (("k", k_in), ("v", v_in)):  # (..., H, S, .) -> (..., H_kv, S, .)
            g = grads[name]
            g = g.reshape(g.shape[:-3] + (x.shape[-3], g.shape[-3] // x.shape[-3]) + g.shape[-2:])
            grads[name] = fsum_axes(g, (-3,))
    if bias is not None:
        grads["bias"] = unbroadcast(dS, np.shape(bias))
    return grads, {}


# -- normalisation ---------------------------------------------------------------------------

def layer_norm_vjp(cot, x, eps=1e-5, variant="canonical", params=None):
    """c = x - mu, z = c / r, y = z gamma + beta (r = sqrt(var + eps), or std + eps):
        dgamma = sum over rows of dy z,  dbeta = sum over rows of dy,  dz = dy gamma
        canonical:  dx = (dz - mean(dz) - z mean(dz z)) / r
        annotated:  dc = dz / r - c sum(dz c) / (r^2 std (D - 1)),  dx = dc - mean(dc)
    """
    x, dy = mpa(x), mpa(cot["y"])
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    d = x.shape[-1]
    dx = zeros(x.shape)
    z_all = zeros(x.shape)
    for idx, row in _rows(x):
        if d == 0:
            continue
        g = list(dy[idx])
        mu = mp.fsum(row) / d
        c = [xi - mu for xi in row]
        ss = mp.fsum(ci * ci for ci in c)
        dz = [gi * gamma[j] for j, gi in enumerate(g)]
        if variant == "canonical":
            r = mpmath.sqrt(ss / d + eps)
            z = [ci / r for ci in c]
            m1 = mp.fsum(dz) / d
            m2 = mp.fsum(a * b for a, b in zip(dz, z)) / d
            dx[idx] = [(dz[j] - m1 - z[j] * m2) / r for j in range(d)]
        else:
            std = mpmath.sqrt(ss / (d - 1))
            r = std + eps
            z = [ci / r for ci in c]
            s = mp.fsum(a * b for a, b in zip(dz, c))
            dc = [dz[j] / r - c[j] * s / (r * r * std * (d - 1)) for j in range(d)]
            m = mp.fsum(dc) / d
            dx[idx] = [dcj - m for dcj in dc]
        z_all[idx] = z
    lead = tuple(range(x.ndim - 1))
    return {"x": dx}, {"gamma": fsum_axes(dy * z_all, lead), "beta": fsum_axes(dy, lead)}


def rms_norm_vjp(cot, x, eps=1e-6, params=None):
    """r = sqrt(mean(x^2) + eps), y = x / r gamma:
        dgamma = sum over rows of dy x / r,  dz = dy gamma,
        dx = dz / r - x sum(dz x) / (D r^3)
    """
    x, dy = mpa(x), mpa(cot["y"])
    gamma = mpa(params["gamma"])
    eps = mpmath.mpf(eps)
    d = x.shape[-1]
    dx, z_all = zeros(x.shape), zeros(x.shape)
    for idx, row in _rows(x):
        if d == 0:
            continue
        r = mpmath.sqrt(mp.fsum(v * v for v in row) / d + eps)
        dz = [dy[idx][j] * gamma[j] for j in range(d)]
        s = mp.fsum(a * b for a, b in zip(dz, row))
        dx[idx] = [dz[j] / r - row[j] * s / (d * r ** 3) for j in range(d)]
        z_all[idx] = [v / r for v in row]
    return {"x": dx}, {"gamma": fsum_axes(dy * z_all, tuple(range(x.ndim - 1)))}


# -- feed-forward ----------------------------------------------------------------------------

_C = mpmath.mpf("0.044715")


def relu_grad(h):
    return mpmath.mpf(1) if h > 0 else mpmath.mpf(0)  # relu'(0) = 0, as torch and TF


def gelu_grad(h):
    """d/dh h Phi(h) = Phi(h) + h phi(h)."""
    return (1 + mpmath.erf(h / mpmath.sqrt(2))) / 2 + h * mpmath.exp(-h * h / 2) / mpmath.sqrt(2 * mpmath.pi)


def gelu_tanh_grad(h):
    """u = sqrt(2/pi)(h + c h^3), t = tanh u: (1 + t)/2 + h/2 (1 - t^2) sqrt(2/pi)(1 + 3c h^2)."""
    k = mpmath.sqrt(2 / mpmath.pi)
    t = mpmath.tanh(k * (h + _C * h ** 3))
    return (1 + t) / 2 + h / 2 * (1 - t * t) * k * (1 + 3 * _C * h * h)


ACTIVATION_GRADS = {"relu": relu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


def feedforward_vjp(cot, x, activation="relu", params=None):
    """h = x W1 + b1, a = act(h), y = a W2 + b2:
        dW2 = a^T dy,  db2 = sum dy,  da = dy W2^T,  dh = da act'(h),
        dW1 = x^T dh,  db1 = sum dh,  dx = dh W1^T      (sums over every leading axis)
    """
    x, dy = mpa(x), mpa(cot["y"])
    w1, b1, w2 = mpa(params["w1"]), mpa(params["b1"]), mpa(params["w2"])
    x2 = x.reshape(-1, x.shape[-1])                      # (N, D)
    dy2 = dy.reshape(-1, dy.shape[-1])                   # (N, D)
    h = matmul(x2, w1) + b1                              # (N, F)
    a = np.vectorize(ACTIVATIONS[activation], otypes=[object])(h)
    da = matmul(dy2, transpose_last(w2))                 # (N, F)
    dh = da * np.vectorize(ACTIVATION_GRADS[activation], otypes=[object])(h)
    return ({"x": matmul(dh, transpose_last(w1)).reshape(x.shape)},
            {"w1": matmul(transpose_last(x2), dh), "b1": fsum_axes(dh, (0,)),
             "w2": matmul(transpose_last(a), dy2), "b2": fsum_axes(dy2, (0,))})


# -- cross-entropy ---------------------------------------------------------------------------

def cross_entropy_vjp(cot, logits, targets, ignore_index=-100, label_smoothing=0.0,
                      reduction="mean"):
    """p = softmax(logits), q = (1 - eps) onehot(t) + eps / L:
        dlogits_i = g_i (p_i - q_i) for a counted token, 0 for an ignored one, where
        g_i = dloss / N (mean over the N counted tokens), dloss (sum), dloss_i (none)
    """
    from .losses import smoothed_target

    z = mpa(logits)
    t = np.asarray(targets)
    dl = mpa(cot["loss"])
    counted = t != ignore_index
    n = int(counted.sum())
    p = softmax(z, axis=-1)
    out = zeros(z.shape)
    for idx in np.ndindex(t.shape):
        if not counted[idx]:
            continue
        g = dl[idx] if reduction == "none" else (dl[()] / n if reduction == "mean" else dl[()])
        q = smoothed_target(int(t[idx]), z.shape[-1], label_smoothing)
        out[idx] = [g * (p[idx][j] - q[j]) for j in range(z.shape[-1])]
    return {"logits": out}, {}


# -- composites: the kernels' VJPs chained, forward intermediates from the forward oracle --

def _prefixed(prefix: str, grads: dict) -> dict:
    return {f"{prefix}.{k}": g for k, g in grads.items()}


def residual_vjp(cot, x, position="post", eps=1e-5, activation="relu", params=None):
    """post: s = x + f(x), y = LN(s):  ds = LN^T dy,  dx = ds + f^T ds
    pre:  n = LN(x), y = x + f(n):    dn = f^T dy,   dx = dy + LN^T dn
    (f^T, LN^T: the feed-forward's and the LayerNorm's VJPs; ffn.*, norm.* their params)."""
    from .core import add, sub
    from .feedforward import feedforward
    from .layer_norm import layer_norm

    x, dy = mpa(x), mpa(cot["y"])
    ffn, norm = sub(params, "ffn"), sub(params, "norm")
    if position == "post":
        s = add(x, feedforward(x, activation=activation, params=ffn)["y"])
        gs, gnorm = layer_norm_vjp({"y": dy}, s, eps=eps, params=norm)
        gx, gffn = feedforward_vjp({"y": gs["x"]}, x, activation=activation, params=ffn)
        dx = gs["x"] + gx["x"]
    else:
        n = layer_norm(x, eps=eps, params=norm)["y"]
        gn, gffn = feedforward_vjp({"y": dy}, n, activation=activation, params=ffn)
        gx, gnorm = layer_norm_vjp({"y": gn["x"]}, x, eps=eps, params=norm)
        dx = dy + gx["x"]
    return {"x": dx}, {**_prefixed("ffn", gffn), **_prefixed("norm", gnorm)}

# -- attention kernels: mha, self_attention, additive_attention, luong_attention,
# relative_attention ---------------------------------------------------------------------------

def linear_vjp(x, w, dy):
    """y = x W + b over the last axis: dx = dy W^T, dW = x^T dy, db = sum dy (sums over
    every leading axis)."""
    x, dy = mpa(x), mpa(dy)
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # (N, D), (N, F)
    return (matmul(dy, transpose_last(mpa(w))), matmul(transpose_last(x2), dy2),
            fsum_axes(dy2, (0,)))


def _project_vjp(x, params, w, b, dy, grads):
    """Adds dW (and db, if the bias exists) of y = x W + b to ``grads``; returns dx."""
    dx, grads[w], db = linear_vjp(x, params[w], dy)
    if b in params:
        grads[b] = db
    return dx


def _cot(cot, name, shape):
    return mpa(cot[name]) if name in cot else zeros(shape)


def mha_vjp(cot, query, key, value, mask=None, num_heads=1, num_kv_heads=None, params=None):
    """Q = query W_q + b_q, K = key W_k + b_k, V = value W_v + b_v, head h reads columns
    h*K:(h+1)*K of Q and those of kv head g = h // (H / H_kv) of K and V,
    O = concat_h(sdpa(Q_h, K_g, V_g)) W_o + b_o:
        dconcat = dO W_o^T,  dW_o = concat^T dO,  db_o = sum dO
        dQ_h, dK_g, dV_g from sdpa's backward of head h (dK_g, dV_g summed over g's heads)
        dquery = dQ W_q^T,  dW_q = query^T dQ,  db_q = sum dQ   (key, value alike)
    """
    from .mha import project
    from .sdpa import sdpa

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
    dconcat = _project_vjp(concat, params, "w_o", "b_o", _cot(cot, "output", (b, t, d_o)), grads)
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
    dx = {"query": _project_vjp(query, params, "w_q", "b_q", dq_all, grads),
          "key": _project_vjp(key, params, "w_k", "b_k", dk_all, grads),
          "value": _project_vjp(value, params, "w_v", "b_v", dv_all, grads)}
    return dx, grads


def self_attention_vjp(cot, x, mask=None, scale=None, params=None):
    """Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V, (O, W) = sdpa(Q, K, V):
        dQ, dK, dV from sdpa's backward;  dx = dQ W_Q^T + dK W_K^T + dV W_V^T (x feeds all
        three),  dW_Q = x^T dQ,  db_Q = sum dQ   (K, V alike)
    """
    from .mha import project

    params = {n: mpa(a) for n, a in (params or {}).items()}
    q, k, v = (project(x, params, f"w_{n}", f"b_{n}") for n in "qkv")  # (B, T, K|V)
    gs, _ = sdpa_vjp(cot, q, k, v, mask=mask, scale=scale)
    grads = {}
    dx = [_project_vjp(x, params, f"w_{n}", f"b_{n}", gs[n], grads) for n in "qkv"]
    return {"x": dx[0] + dx[1] + dx[2]}, grads

# == grad2: embedding, lm_head, rope, gated_feedforward, gru_cell, gru, softcap, dropout ====

def embedding_vjp(cot, ids, scale=True, params=None):
    """y[n] = table[ids[n]] * f (f = sqrt(D) or 1): scatter-add,
        dtable[l] = f * sum over the n with ids[n] = l of dy[n]   (repeated ids accumulate)
    The integer ids get no gradient."""
    table = mpa(params["table"])
    ids = np.asarray(ids)
    dy = mpa(cot["y"])
    d = table.shape[1]
    f = mpmath.sqrt(d) if scale else mpmath.mpf(1)
    dtable = zeros(table.shape)
    for row in range(table.shape[0]):
        hits = [idx for idx in np.ndindex(ids.shape) if int(ids[idx]) == row]
        dtable[row] = [f * mp.fsum(dy[idx + (j,)] for idx in hits) for j in range(d)]
    return {}, {"table": dtable}


def lm_head_vjp(cot, x, tied=False, params=None):
    """logits = x W + b (tied: W = table^T):
        dx = dlogits W^T,  dW = x^T dlogits,  dtable = dlogits^T x,  db = sum dlogits
    (sums over every leading axis)."""
    x, dl = mpa(x), mpa(cot["logits"])
    w = transpose_last(mpa(params["table"])) if tied else mpa(params["w"])    # (D, L)
    x2, dl2 = x.reshape(-1, x.shape[-1]), dl.reshape(-1, w.shape[1])          # (N, D), (N, L)
    grads = {"table": matmul(transpose_last(dl2), x2)} if tied \
        else {"w": matmul(transpose_last(x2), dl2)}
    if "b" in params:
        grads["b"] = fsum_axes(dl2, (0,))
    return {"x": matmul(dl, transpose_last(w)).reshape(x.shape)}, grads


def rope_vjp(cot, x, offset=0, base=10000.0, convention="interleaved"):
    """y = R x with R the rotation of each pair (a, b) by the angle p theta_i; R is
    orthogonal, so dx = R^T dy, the rotation by the opposite angle:
        dx_a =  dy_a cos + dy_b sin,   dx_b = -dy_a sin + dy_b cos
    """
    x, dy = mpa(x), mpa(cot["y"])
    t_len, kw = x.shape[-2], x.shape[-1]
    half = kw // 2
    dx = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-2]):
        for t in range(t_len):
            p = mpmath.mpf(offset + t)
            for i in range(half):
                a, b = (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + half)
                angle = p * mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / kw)
                cos, sin = mpmath.cos(angle), mpmath.sin(angle)
                ga, gb = dy[idx + (t, a)], dy[idx + (t, b)]
                dx[idx + (t, a)] = ga * cos + gb * sin
                dx[idx + (t, b)] = -ga * sin + gb * cos
    return {"x": dx}, {}


def silu_grad(h):
    """s = sigmoid(h): silu'(h) = s (1 + h (1 - s))."""
    s = 1 / (1 + mpmath.exp(-h))
    return s * (1 + h * (1 - s))


GATE_GRADS = {"silu": silu_grad, "gelu": gelu_grad, "gelu_tanh": gelu_tanh_grad}


def gated_feedforward_vjp(cot, x, activation="silu", params=None):
    """g = x W_gate, u = x W_up, h = act(g) u, y = h W_down:
        dW_down = h^T dy,  dh = dy W_down^T,  dg = dh u act'(g),  du = dh act(g),
        dW_gate = x^T dg,  dW_up = x^T du,  dx = dg W_gate^T + du W_up^T
    """
    from .gated_feedforward import ACTIVATIONS as GATES

    x, dy = mpa(x), mpa(cot["y"])
    wg, wu, wd = (mpa(params[n]) for n in ("w_gate", "w_up", "w_down"))
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, wd.shape[1])       # (N, D)
    g, u = matmul(x2, wg), matmul(x2, wu)                                    # (N, F)
    a = np.vectorize(GATES[activation], otypes=[object])(g)
    dh = matmul(dy2, transpose_last(wd))                                     # (N, F)
    dg = dh * u * np.vectorize(GATE_GRADS[activation], otypes=[object])(g)
    du = dh * a
    dx = matmul(dg, transpose_last(wg)) + matmul(du, transpose_last(wu))
    return ({"x": dx.reshape(x.shape)},
            {"w_gate": matmul(transpose_last(x2), dg), "w_up": matmul(transpose_last(x2), du),
             "w_down": matmul(transpose_last(a * u), dy2)})


def gru_step_vjp(x, h, params, dh_next):
    """One GRU step backward (reset after the hidden matmul), x (B, I), h (B, H):
        dn = dh' (1 - z),  dz = dh' (h - n),  dh = dh' z + dg_h W_hh^T
        da_n = dn (1 - n^2),  dr = da_n (h W_hn + b_hn),  da_r = dr r (1 - r),
        da_z = dz z (1 - z)
        dg_i = [da_r | da_z | da_n],  dg_h = [da_r | da_z | r da_n]
        dW_ih = x^T dg_i, db_ih = sum dg_i, dW_hh = h^T dg_h, db_hh = sum dg_h,
        dx = dg_i W_ih^T
    Returns dx, dh and the parameter gradients of this step."""
    from .gru_cell import sigmoid

    w_ih, w_hh = mpa(params["w_ih"]), mpa(params["w_hh"])
    hid = w_hh.shape[0]
    b_ih = mpa(params["b_ih"]) if "b_ih" in params else zeros((3 * hid,))
    b_hh = mpa(params["b_hh"]) if "b_hh" in params else zeros((3 * hid,))
    gi = matmul(x, w_ih) + b_ih                                              # (B, 3H)
    gh = matmul(h, w_hh) + b_hh                                              # (B, 3H)
    dgi, dgh = zeros(gi.shape), zeros(gh.shape)
    dh_direct = zeros(h.shape)
    for b in range(h.shape[0]):
        for j in range(hid):
            jr, jz, jn = j, hid + j, 2 * hid + j
            r = sigmoid(gi[b, jr] + gh[b, jr])
            z = sigmoid(gi[b, jz] + gh[b, jz])
            n = mpmath.tanh(gi[b, jn] + r * gh[b, jn])
            g = dh_next[b, j]
            dan = g * (1 - z) * (1 - n * n)
            dar = dan * gh[b, jn] * r * (1 - r)
            daz = g * (h[b, j] - n) * z * (1 - z)
            dgi[b, jr], dgi[b, jz], dgi[b, jn] = dar, daz, dan
            dgh[b, jr], dgh[b, jz], dgh[b, jn] = dar, daz, r * dan
            dh_direct[b, j] = g * z
    grads = {"w_ih": matmul(transpose_last(x), dgi), "w_hh": matmul(transpose_last(h), dgh),
             "b_ih": fsum_axes(dgi, (0,)), "b_hh": fsum_axes(dgh, (0,))}
    dx = matmul(dgi, transpose_last(w_ih))
    dh = dh_direct + matmul(dgh, transpose_last(w_hh))
    return dx, dh, {k: g for k, g in grads.items() if k in params}


def gru_cell_vjp(cot, x, h, params=None):
    x, h = mpa(x), mpa(h)
    dx, dh, grads = gru_step_vjp(x, h, params, mpa(cot["h"]))
    return {"x": dx, "h": dh}, grads


def gru_vjp(cot, x, h0=None, params=None):
    """Backpropagation through time: with dh_T = dh_last and, for t = T..1,
        dh_t += doutputs[:, t-1];  (dx_t, dh_{t-1}, dtheta_t) = step backward at (x_t, h_{t-1})
    dtheta = sum over t of dtheta_t, dh0 = dh_0 (only when h0 is given)."""
    from .gru_cell import step

    x = mpa(x)
    b, t_len, _ = x.shape
    hid = np.asarray(params["w_hh"]).shape[0]
    hs = [zeros((b, hid)) if h0 is None else mpa(h0)]
    for t in range(t_len):
        hs.append(step(x[:, t], hs[-1], params))
    dh = mpa(cot["h_last"]) if "h_last" in cot else zeros((b, hid))
    dout = mpa(cot["outputs"]) if "outputs" in cot else zeros((b, t_len, hid))
    dx = np.empty(x.shape, dtype=object)
    total: dict = {}
    for t in reversed(range(t_len)):
        dh = dh + dout[:, t]
        dx[:, t], dh, grads = gru_step_vjp(x[:, t], hs[t], params, dh)
        total = {k: total[k] + g if k in total else g for k, g in grads.items()}
    return ({"x": dx} if h0 is None else {"x": dx, "h0": dh}), total


def softcap_vjp(cot, x, cap):
    """y = cap tanh(x / cap):  dx = dy (1 - tanh^2(x / cap))."""
    c = mpmath.mpf(cap)
    x, dy = mpa(x), mpa(cot["y"])
    dx = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        t = mpmath.tanh(x[idx] / c)
        dx[idx] = dy[idx] * (1 - t * t)
    return {"x": dx}, {}


def dropout_vjp(cot, x, keep_mask=None, p=0.0, seed=None):
    """y = keep x / (1 - p):  dx = keep dy / (1 - p) (p = 0: dx = dy); only with keep_mask."""
    dy = mpa(cot["y"])
    if p == 0:
        return {"x": dy}, {}
    if keep_mask is None:
        raise NotImplementedError("dropout_vjp needs the keep mask")
    keep = np.broadcast_to(np.asarray(keep_mask), dy.shape)
    scale = 1 / (1 - mpmath.mpf(p))
    dx = np.empty(dy.shape, dtype=object)
    for idx in np.ndindex(dy.shape):
        dx[idx] = dy[idx] * scale if keep[idx] else mpmath.mpf(0)
    return {"x": dx}, {}


def attention_entropy_vjp(cot, weights, axis=-1):
    """H = -sum_j w_j ln w_j:  dw_j = -dH (ln w_j + 1) for w_j > 0;  dw_j = 0 for w_j = 0
    (the term is 0 ln 0 = 0 there; its one-sided derivative is +inf, torch's and
    TensorFlow's where-guarded entropy give 0, as a masked softmax entry does)."""
    w = np.moveaxis(mpa(weights), axis, -1)
    dh = mpa(cot["entropy"])
    dw = np.empty(w.shape, dtype=object)
    for idx in np.ndindex(w.shape):
        dw[idx] = -dh[idx[:-1]] * (mpmath.log(w[idx]) + 1) if w[idx] != 0 else mpmath.mpf(0)
    return {"weights": np.moveaxis(dw, -1, axis)}, {}


GRAD2_VJPS = {"embedding": embedding_vjp, "lm_head": lm_head_vjp, "rope": rope_vjp,
              "gated_feedforward": gated_feedforward_vjp, "gru_cell": gru_cell_vjp,
              "gru": gru_vjp, "softcap": softcap_vjp, "dropout": dropout_vjp,
              "attention_entropy": attention_entropy_vjp}

# == end grad2 ===============================================================================


def _scored_attention_vjp(cot, e, vals, mask):
    """weights = softmax(e) (masked), context = weights values; cotangents dC (and dW):
        dW' = dC values^T + dW,  de = W * (dW' - rowsum(dW' * W)),  dvalues = W^T dC
    Returns (de, dvalues), (B, T, S) and (B, S, Dv)."""
    b, t, s = e.shape
    keep = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b, t, s))
    w = softmax(e, axis=-1, keep=keep)  # (B, T, S)
    dC = _cot(cot, "context", (b, t, vals.shape[-1]))
    dWt = matmul(dC, transpose_last(vals))
    if "weights" in cot:
        dWt = dWt + mpa(cot["weights"])
    de = np.empty(w.shape, dtype=object)
    for idx, row in _rows(w):
        de[idx] = softmax_backward_row(row, list(dWt[idx]))
    return de, matmul(transpose_last(w), dC)


def _tanh_scores_vjp(q, k, w_q, w_k, v, de):
    """e[b,t,s] = sum_a v_a tanh(u), u = (q w_q)[b,t,a] + (k w_k)[b,s,a], h = tanh(u):
        dv_a = sum_{b,t,s} de h_a,   du = de v_a (1 - h^2),
        d(q w_q) = sum_s du,  d(k w_k) = sum_t du,  then the two projections' backward.
    Returns dq, dk, dw_q, dw_k, dv."""
    qa, ka = matmul(q, w_q), matmul(k, w_k)  # (B, T, A), (B, S, A)
    (b, t, s), a = de.shape, v.shape[0]
    dqa, dka, dv_terms = zeros(qa.shape), zeros(ka.shape), [[] for _ in range(a)]
    du = zeros((b, t, s, a))
    for bi, ti, si in np.ndindex(b, t, s):
        for j in range(a):
            h = mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j])
            dv_terms[j].append(de[bi, ti, si] * h)
            du[bi, ti, si, j] = de[bi, ti, si] * v[j] * (1 - h * h)
    dqa, dka = fsum_axes(du, (2,)), fsum_axes(du, (1,))  # (B, T, A), (B, S, A)
    dq, dw_q, _ = linear_vjp(q, w_q, dqa)
    dk, dw_k, _ = linear_vjp(k, w_k, dka)
    return dq, dk, dw_q, dw_k, np.array([mp.fsum(x) for x in dv_terms], dtype=object)


def additive_attention_vjp(cot, query, keys, values=None, mask=None, params=None):
    """e = v^T tanh(query W_q + keys W_k) (Bahdanau), weights = softmax(e), context = W values:
    de from the softmax backward, then tanh' = 1 - h^2 (see _tanh_scores_vjp); with values
    omitted (= keys), dkeys also gets dvalues."""
    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    w_q, w_k, v = (mpa(params[n]) for n in ("w_q", "w_k", "v"))
    e = additive_scores(q, k, w_q, w_k, v)
    de, dvals = _scored_attention_vjp(cot, e, vals, mask)
    dq, dk, dw_q, dw_k, dv = _tanh_scores_vjp(q, k, w_q, w_k, v, de)
    grads = {"query": dq, "keys": dk + dvals if values is None else dk}
    if values is not None:
        grads["values"] = dvals
    return grads, {"w_q": dw_q, "w_k": dw_k, "v": dv}


def additive_scores(q, k, w_q, w_k, v):
    """e[b,t,s] = sum_a v_a tanh((q w_q)[b,t,a] + (k w_k)[b,s,a]), as the forward oracle."""
    qa, ka = matmul(q, w_q), matmul(k, w_k)  # (B, T, A), (B, S, A)
    e = zeros((q.shape[0], q.shape[1], k.shape[1]))
    for bi, ti, si in np.ndindex(e.shape):
        e[bi, ti, si] = mp.fsum(v[j] * mpmath.tanh(qa[bi, ti, j] + ka[bi, si, j])
                                for j in range(v.shape[0]))
    return e


def luong_attention_vjp(cot, query, keys, values=None, mask=None, score="dot", params=None):
    """weights = softmax(e), context = weights values, de from the softmax backward:
        dot:     e = q k^T:        dq = de k,  dk = de^T q
        general: e = q W k^T:      dq = de k W^T,  dk = de^T q W,  dW = sum_b q^T de k
        concat:  e = v^T tanh([q; k] W): additive attention's backward with W = [W_q; W_k]
    with values omitted (= keys), dkeys also gets dvalues."""
    from .luong_attention import _concat_scores

    q, k = mpa(query), mpa(keys)
    vals = k if values is None else mpa(values)
    params = {n: mpa(a) for n, a in (params or {}).items()}
    if score == "dot":
        e = matmul(q, transpose_last(k))  # (B, T, S)
    elif score == "general":
        e = matmul(matmul(q, params["w"]), transpose_last(k))
    else:
        e = _concat_scores(q, k, params["w"], params["v"])
    de, dvals = _scored_attention_vjp(cot, e, vals, mask)
    grads = {}
    if score == "dot":
        dq, dk = matmul(de, k), matmul(transpose_last(de), q)
    elif score == "general":
        w = params["w"]
        dq = matmul(matmul(de, k), transpose_last(w))
        dk = matmul(matmul(transpose_last(de), q), w)
        qf, dek = q.reshape(-1, q.shape[-1]), matmul(de, k).reshape(-1, k.shape[-1])
        grads["w"] = matmul(transpose_last(qf), dek)  # sum over b, t of q^T (de k)
    else:
        w, d_q = params["w"], q.shape[-1]
        dq, dk, dw_q, dw_k, grads["v"] = _tanh_scores_vjp(q, k, w[:d_q], w[d_q:], params["v"], de)
        grads = {"w": np.concatenate([dw_q, dw_k], axis=0), "v": grads["v"]}
    dx = {"query": dq, "keys": dk + dvals if values is None else dk}
    if values is not None:
        dx["values"] = dvals
    return dx, grads


def relative_attention_vjp(cot, q, k, v, mask=None, max_distance=None, scale=None,
                           params=None):
    """e_ij = c q_i . (k_j + a^K_ij), alpha = softmax(e), z_i = sum_j alpha_ij (v_j + a^V_ij),
    a^K_ij = rel_k[r_ij], a^V_ij = rel_v[r_ij], r_ij = clip(j - i, -m, m) + m:
        dalpha'_ij = dz_i . (v_j + a^V_ij) + dalpha_ij,  de = softmax backward of dalpha'
        dq_i = c sum_j de_ij (k_j + a^K_ij),  dk_j = c sum_i de_ij q_i,  dv_j = sum_i alpha_ij dz_i
        drel_k[r] = c sum_{b, (i, j): r_ij = r} de_ij q_i,
        drel_v[r] = sum_{b, (i, j): r_ij = r} alpha_ij dz_i
    """
    from .relative_attention import relative_attention

    q, k, v = mpa(q), mpa(k), mpa(v)
    rel_k, rel_v = mpa(params["rel_k"]), mpa(params["rel_v"])
    (b, t, kw), s, vw = q.shape, k.shape[1], v.shape[2]
    m = max_distance
    c = 1 / mpmath.sqrt(kw) if scale is None else mpmath.mpf(scale)
    alpha = relative_attention(q, k, v, mask=mask, max_distance=m, scale=scale,
                               params={"rel_k": rel_k, "rel_v": rel_v})["weights"]
    dz = _cot(cot, "output", (b, t, vw))
    dalpha = _cot(cot, "weights", (b, t, s))
    rows = [[min(max(j - i, -m), m) + m for j in range(s)] for i in range(t)]
    terms = {n: np.empty(shape, dtype=object) for n, shape in
             (("q", q.shape), ("k", k.shape), ("v", v.shape), ("rel_k", rel_k.shape),
              ("rel_v", rel_v.shape))}
    for a in terms.values():
        for idx in np.ndindex(a.shape):
            a[idx] = []
    for bi in range(b):
        for i in range(t):
            da = [mp.fsum(dz[bi, i, x] * (v[bi, j, x] + rel_v[rows[i][j], x]) for x in range(vw))
                  + dalpha[bi, i, j] for j in range(s)]
            de = softmax_backward_row(list(alpha[bi, i]), da)
            for j in range(s):
                r = rows[i][j]
                for x in range(kw):
                    terms["q"][bi, i, x].append(c * de[j] * (k[bi, j, x] + rel_k[r, x]))
                    terms["k"][bi, j, x].append(c * de[j] * q[bi, i, x])
                    terms["rel_k"][r, x].append(c * de[j] * q[bi, i, x])
                for x in range(vw):
                    terms["v"][bi, j, x].append(alpha[bi, i, j] * dz[bi, i, x])
                    terms["rel_v"][r, x].append(alpha[bi, i, j] * dz[bi, i, x])
    out = {n: np.vectorize(mp.fsum, otypes=[object])(a) if a.size else zeros(a.shape)
           for n, a in terms.items()}
    return ({n: out[n] for n in ("q", "k", "v")},
            {"rel_k": out["rel_k"], "rel_v": out["rel_v"]})


VJPS = {"softmax": softmax_vjp, "sdpa": sdpa_vjp, "layer_norm": layer_norm_vjp,
        "rms_norm": rms_norm_vjp, "feedforward": feedforward_vjp,
        "cross_entropy": cross_entropy_vjp, "residual": residual_vjp}
VJPS.update(mha=mha_vjp, self_attention=self_attention_vjp)  # attention kernels
VJPS.update(GRAD2_VJPS)


# -- layers, stacks, models: the kernels' VJPs chained in reverse ------------------------------
# Forward intermediates come from the forward oracle; a parameter reached twice (tied
# embeddings) and an input read twice (self-attention's query, key, value; the memory of
# every cross-attention) get the sum of their gradients.

def _merge(*grads: dict) -> dict:
    out: dict = {}
    for g in grads:
        for k, a in g.items():
            out[k] = a if k not in out else out[k] + a
    return out


def _block_vjp(dy, x, f, f_vjp, params, name, norm, eps):
    """A residual block with LayerNorm ``name``, f(h) its sublayer and f_vjp(dout, h) ->
    (dh, grads) the sublayer's VJP:
        post  y = LN(x + f(x)):  ds = LN^T dy,  dx = ds + f^T ds
        pre   y = x + f(LN(x)):  dn = f^T dy,   dx = dy + LN^T dn
    """
    from .core import add, sub
    from .layer_norm import layer_norm

    lnp = sub(params, name)
    if norm == "post":
        gs, gn = layer_norm_vjp({"y": dy}, add(x, f(x)), eps=eps, params=lnp)
        dh, gf = f_vjp(gs["x"], x)
        return gs["x"] + dh, _merge(gf, _prefixed(name, gn))
    dn, gf = f_vjp(dy, layer_norm(x, eps=eps, params=lnp)["y"])
    gx, gn = layer_norm_vjp({"y": dn}, x, eps=eps, params=lnp)
    return dy + gx["x"], _merge(gf, _prefixed(name, gn))


def _attn_sublayer(name, memory, mask, heads, params, dmemory: list):
    """MHA(h, kv, kv), kv = h (self) or memory (cross, whose gradient goes to dmemory)."""
    from .core import sub
    from .mha import mha

    p = sub(params, name)

    def f(h):
        kv = h if memory is None else memory
        return mha(h, kv, kv, mask=mask, num_heads=heads, params=p)["output"]

    def f_vjp(dout, h):
        kv = h if memory is None else memory
        gi, gp = mha_vjp({"output": dout}, h, kv, kv, mask=mask, num_heads=heads, params=p)
        if memory is None:
            return gi["query"] + gi["key"] + gi["value"], _prefixed(name, gp)
        dmemory.append(gi["key"] + gi["value"])
        return gi["query"], _prefixed(name, gp)
    return f, f_vjp


def _ffn_sublayer(activation, params):
    from .core import sub
    from .feedforward import feedforward

    p = sub(params, "ffn")

    def f_vjp(dout, h):
        gi, gp = feedforward_vjp({"y": dout}, h, activation=activation, params=p)
        return gi["x"], _prefixed("ffn", gp)
    return (lambda h: feedforward(h, activation=activation, params=p)["y"]), f_vjp


def encoder_layer_vjp(cot, x, mask=None, num_heads=1, norm="post", eps=1e-5,
                      activation="relu", params=None):
    """r1 = block1(x; MHA), y = block2(r1; FFN):  dr1 = block2^T dy,  dx = block1^T dr1."""
    from .encoder_layer import sublayer

    x = mpa(x)
    attn = _attn_sublayer("self_attn", None, mask, num_heads, params, [])
    r1 = sublayer(x, attn[0], params, "norm1", norm, eps)
    dr1, g2 = _block_vjp(mpa(cot["y"]), r1, *_ffn_sublayer(activation, params), params,
                         "norm2", norm, eps)
    dx, g1 = _block_vjp(dr1, x, *attn, params, "norm1", norm, eps)
    return {"x": dx}, _merge(g1, g2)


def decoder_layer_vjp(cot, x, memory, self_mask=None, memory_mask=None, num_heads=1,
                      norm="post", eps=1e-5, activation="relu", params=None):
    """r1 = block1(x; self-MHA), r2 = block2(r1; MHA(., memory)), y = block3(r2; FFN):
    backward through block3, block2 (dmemory = dkey + dvalue of the cross-attention),
    block1."""
    from .encoder_layer import sublayer

    x, memory, dmem = mpa(x), mpa(memory), []
    sa = _attn_sublayer("self_attn", None, self_mask, num_heads, params, [])
    ca = _attn_sublayer("cross_attn", memory, memory_mask, num_heads, params, dmem)
    r1 = sublayer(x, sa[0], params, "norm1", norm, eps)
    r2 = sublayer(r1, ca[0], params, "norm2", norm, eps)
    dr2, g3 = _block_vjp(mpa(cot["y"]), r2, *_ffn_sublayer(activation, params), params,
                         "norm3", norm, eps)
    dr1, g2 = _block_vjp(dr2, r1, *ca, params, "norm2", norm, eps)
    dx, g1 = _block_vjp(dr1, x, *sa, params, "norm1", norm, eps)
    return {"x": dx, "memory": dmem[0]}, _merge(g1, g2, g3)


def _stack_vjp(layer, layer_vjp, dy, x, num_layers, norm, eps, params, **kw):
    """h_{i+1} = layer_i(h_i), y = h_N or LN_final(h_N):  dh_N = dy or LN_final^T dy,
    dh_i = layer_i^T dh_{i+1}; returns (dx, dmemory or None, grads)."""
    from .core import sub

    hs = [mpa(x)]
    for i in range(int(num_layers)):
        hs.append(layer(hs[-1], norm=norm, eps=eps, params=sub(params, f"layers.{i}"), **kw)["y"])
    grads, dmem = {}, None
    if norm == "pre":
        gi, gn = layer_norm_vjp({"y": dy}, hs[-1], eps=eps, params=sub(params, "final_norm"))
        dy, grads = gi["x"], _prefixed("final_norm", gn)
    for i in reversed(range(int(num_layers))):
        gi, gp = layer_vjp({"y": dy}, hs[i], norm=norm, eps=eps,
                           params=sub(params, f"layers.{i}"), **kw)
        dy, grads = gi["x"], _merge(grads, _prefixed(f"layers.{i}", gp))
        if "memory" in gi:
            dmem = gi["memory"] if dmem is None else dmem + gi["memory"]
    return dy, dmem, grads


def encoder_vjp(cot, x, mask=None, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                activation="relu", params=None):
    from .encoder_layer import encoder_layer

    dx, _, grads = _stack_vjp(encoder_layer, encoder_layer_vjp, mpa(cot["y"]), x, num_layers,
                              norm, eps, params, mask=mask, num_heads=num_heads,
                              activation=activation)
    return {"x": dx}, grads


def decoder_vjp(cot, x, memory, self_mask=None, memory_mask=None, num_layers=1, num_heads=1,
                norm="post", eps=1e-5, activation="relu", params=None):
    from .decoder_layer import decoder_layer

    dx, dmem, grads = _stack_vjp(decoder_layer, decoder_layer_vjp, mpa(cot["y"]), x,
                                 num_layers, norm, eps, params, memory=mpa(memory),
                                 self_mask=self_mask, memory_mask=memory_mask,
                                 num_heads=num_heads, activation=activation)
    return {"x": dx, "memory": dmem}, grads


def learned_pe_vjp(cot, positions, params=None):
    """pe[n] = table[positions[n]]: dtable[m] = sum over the n with positions[n] = m of dpe[n]."""
    gi, gp = embedding_vjp({"y": cot["pe"]}, positions, scale=False, params=params)
    return gi, gp


def _embed_vjp(de, ids, params, name, scale, learned: bool):
    """e = name.table[ids] (* sqrt(D)) + PE: dtable from de; with learned positions,
    dpos.table[t] = sum over the batch of de[:, t]."""
    from .core import sub

    _, g = embedding_vjp({"y": de}, ids, scale=scale, params=sub(params, name))
    grads = _prefixed(name, g)
    if learned:
        t = np.asarray(ids).shape[1]
        _, gp = learned_pe_vjp({"pe": fsum_axes(de, (0,))}, np.arange(t), sub(params, "pos"))
        grads = _merge(grads, _prefixed("pos", gp))
    return grads


def encoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, norm="post", eps=1e-5,
                     activation="gelu", params=None):
    """hidden = Encoder(e), logits = LMHead(hidden):
    dhidden = (its cotangent) + LMHead^T dlogits, de = Encoder^T dhidden, then the tables."""
    from .core import sub
    from .encoder_only import encoder_only

    fwd = encoder_only(ids, pad_id, num_layers, num_heads, norm, eps, activation, params)
    dh = zeros(fwd["hidden"].shape) if "hidden" not in cot else mpa(cot["hidden"])
    dlogits = mpa(cot["logits"]) if "logits" in cot else zeros(fwd["logits"].shape)
    gi, g = lm_head_vjp({"logits": dlogits}, fwd["hidden"], params=sub(params, "lm_head"))
    dh, grads = dh + gi["x"], _prefixed("lm_head", g)
    gi, g = encoder_vjp({"y": dh}, fwd["embed.output"], _padding(ids, pad_id), num_layers,
                        num_heads, norm, eps, activation, sub(params, "encoder"))
    return {}, _merge(grads, _prefixed("encoder", g),
                      _embed_vjp(gi["x"], ids, params, "embed", False, True))


def _padding(ids, pad_id):
    from .masks import padding_mask

    return padding_mask(ids, pad_id)["mask"]


def decoder_only_vjp(cot, ids, pad_id=0, num_layers=1, num_heads=1, norm="pre", eps=1e-5,
                     activation="gelu", params=None):
    """logits = LMHead(Stack(e, pad & causal)):  dh = LMHead^T dlogits, de = Stack^T dh,
    then the token and position tables."""
    from .core import sub
    from .encoder import encoder
    from .encoder_only import embed_learned
    from .masks import combined_mask

    e = embed_learned(ids, params)
    mask = combined_mask(ids, pad_id, t=np.asarray(ids).shape[1], num_heads=1, causal=True)
    mask = mask["mask"]
    h = encoder(e, mask, num_layers, num_heads, norm, eps, activation, params)["y"]
    gi, g = lm_head_vjp({"logits": cot["logits"]}, h, params=sub(params, "lm_head"))
    gs, g_stack = encoder_vjp({"y": gi["x"]}, e, mask, num_layers, num_heads, norm, eps,
                              activation, params)
    return {}, _merge(_prefixed("lm_head", g), g_stack,
                      _embed_vjp(gs["x"], ids, params, "embed", False, True))


def transformer_vjp(cot, src_ids, tgt_ids, pad_id=0, num_layers=1, num_heads=1, norm="post",
                    eps=1e-5, activation="relu", tie_embeddings=False, params=None):
    """logits = LMHead(Decoder(e_tgt, memory)), memory = Encoder(e_src):
    dh = LMHead^T dlogits; (de_tgt, dmemory) = Decoder^T dh; de_src = Encoder^T dmemory;
    tied: tgt_embed.table gets the LM head's gradient plus the embedding's."""
    from .core import sub
    from .decoder import decoder
    from .masks import combined_mask
    from .transformer import decode, encode

    cfg = (num_layers, num_heads, norm, eps, activation)
    memory, m_src, inter = encode(src_ids, pad_id, *cfg, params)
    _, inter2 = decode(tgt_ids, mpa(memory), m_src, pad_id, *cfg, tie_embeddings, params)
    m_self = combined_mask(tgt_ids, pad_id, t=np.asarray(tgt_ids).shape[1], num_heads=1,
                           causal=True)["mask"]
    h = decoder(inter2["tgt_embed.output"], memory, m_self, m_src, *cfg,
                sub(params, "decoder"))["y"]
    head = "tgt_embed" if tie_embeddings else "lm_head"
    gi, g_head = lm_head_vjp({"logits": cot["logits"]}, h, tied=bool(tie_embeddings),
                             params=sub(params, head))
    gd, g_dec = decoder_vjp({"y": gi["x"]}, inter2["tgt_embed.output"], memory, m_self, m_src,
                            *cfg, sub(params, "decoder"))
    ge, g_enc = encoder_vjp({"y": gd["memory"]}, inter["src_embed.output"], m_src, *cfg,
                            sub(params, "encoder"))
    return {}, _merge(_prefixed(head, g_head), _prefixed("decoder", g_dec),
                      _prefixed("encoder", g_enc),
                      _embed_vjp(gd["x"], tgt_ids, params, "tgt_embed", True, False),
                      _embed_vjp(ge["x"], src_ids, params, "src_embed", True, False))


VJPS.update(encoder_layer=encoder_layer_vjp, decoder_layer=decoder_layer_vjp,
            encoder=encoder_vjp, decoder=decoder_vjp, encoder_only=encoder_only_vjp,
            decoder_only=decoder_only_vjp, transformer=transformer_vjp,
            learned_pe=learned_pe_vjp)


def decoder_only_loss_vjp(cot, ids, targets, pad_id=0, num_layers=1, num_heads=1, norm="pre",
                          eps=1e-5, activation="gelu", ignore_index=-100, label_smoothing=0.0,
                          params=None):
    """loss = CE(DecoderOnly(ids), targets):  dlogits = CE^T dloss = dloss (p - q) / N on the
    counted tokens, then DecoderOnly^T dlogits (every parameter's training-step gradient)."""
    from .decoder_only import decoder_only

    cfg = (pad_id, num_layers, num_heads, norm, eps, activation)
    logits = decoder_only(ids, *cfg, params)["logits"]
    gl, _ = cross_entropy_vjp({"loss": cot["loss"]}, logits, targets, ignore_index,
                              label_smoothing)
    return decoder_only_vjp({"logits": gl["logits"]}, ids, *cfg, params)


VJPS["decoder_only_loss"] = decoder_only_loss_vjp
VJPS.update(additive_attention=additive_attention_vjp, luong_attention=luong_attention_vjp,
            relative_attention=relative_attention_vjp)


def seq2seq_attention_vjp(cot, src_ids, tgt_ids, attention, pad_id, params=None):
    """Backward through the teacher-forced decoder, t = T-1..0, carrying dh:
        additive:  dh_t = LMHead^T dlogits_t + dh;  ([de; dc], dh_prev) = GRU step^T dh_t;
                   (dh_prev, do) += Attn^T dc  (query h_{t-1}, keys = values = o)
        Luong:     dht = LMHead^T dlogits_t;  dz = dht (1 - ht^2), ht = tanh([c; h] W_c):
                   dW_c += [c; h]^T dz, [dc; dh'] = dz W_c^T;  dh_t = dh' + dh + Attn^T dc (query);
                   (de, dh_prev) = GRU step^T dh_t
    then dh_0 goes to o at each row's last kept position, the encoder GRU's BPTT takes do, and
    the tables get their scatter-added rows."""
    from .core import sub
    from .embedding import embedding
    from .seq2seq_attention import decoder_step, encode

    src, tgt = np.asarray(src_ids), np.asarray(tgt_ids)
    outputs, keep, h0 = encode(src, pad_id, params)
    steps, h = [], h0
    for t in range(tgt.shape[1]):
        emb = embedding(tgt[:, t], scale=False, params=sub(params, "decoder.embed"))["y"]
        steps.append(dict(decoder_step(attention, tgt[:, t], h, outputs, keep, params),
                          h_prev=h, emb=emb))
        h = steps[-1]["h"]
    dlogits, dec, mask = mpa(cot["logits"]), sub(params, "decoder.gru"), keep[:, None, :]
    attn_p = sub(params, "attention")
    d_out, dh, grads = zeros(outputs.shape), zeros(h0.shape), {}
    d_emb = zeros(tgt.shape + (np.asarray(params["decoder.embed.table"]).shape[1],))

    def attend_vjp(dc, query):
        c = {"context": dc[:, None, :]}
        if attention == "additive":
            return additive_attention_vjp(c, query[:, None, :], outputs, None, mask, attn_p)
        return luong_attention_vjp(c, query[:, None, :], outputs, None, mask, attention, attn_p)

    for t in reversed(range(tgt.shape[1])):
        r = steps[t]
        top = r["h"] if attention == "additive" else r["combined"]
        gi, g = lm_head_vjp({"logits": dlogits[:, t]}, top, params=sub(params, "out"))
        grads = _merge(grads, _prefixed("out", g))
        if attention == "additive":
            emb_c = np.concatenate([r["emb"], r["context"]], axis=-1)
            dx, dh, g = gru_step_vjp(emb_c, r["h_prev"], dec, gi["x"] + dh)
            e = r["emb"].shape[1]
            ga, gp = attend_vjp(dx[:, e:], r["h_prev"])
            dh, d_emb[:, t] = dh + ga["query"][:, 0], dx[:, :e]
        else:
            cat = np.concatenate([r["context"], r["h"]], axis=-1)           # (B, 2H)
            dz = gi["x"] * (1 - r["combined"] * r["combined"])
            w_c = mpa(params["decoder.combine.w"])
            grads = _merge(grads, {"decoder.combine.w": matmul(transpose_last(cat), dz)})
            dcat = matmul(dz, transpose_last(w_c))
            hid = r["h"].shape[1]
            ga, gp = attend_vjp(dcat[:, :hid], r["h"])
            dh_t = dcat[:, hid:] + dh + ga["query"][:, 0]
            d_emb[:, t], dh, g = gru_step_vjp(r["emb"], r["h_prev"], dec, dh_t)
        d_out = d_out + ga["keys"]
        grads = _merge(grads, _prefixed("decoder.gru", g), _prefixed("attention", gp))
    for b in range(src.shape[0]):  # h_0 = o at the last kept position (zeros: no gradient)
        kept = [s for s in range(src.shape[1]) if keep[b, s]]
        if kept:
            d_out[b, kept[-1]] = d_out[b, kept[-1]] + dh[b]
    e_src = embedding(src, scale=False, params=sub(params, "encoder.embed"))["y"]
    ge, g = gru_vjp({"outputs": d_out}, e_src, None, sub(params, "encoder.gru"))
    _, g_src = embedding_vjp({"y": ge["x"]}, src, scale=False, params=sub(params, "encoder.embed"))
    _, g_tgt = embedding_vjp({"y": d_emb}, tgt, scale=False, params=sub(params, "decoder.embed"))
    return {}, _merge(grads, _prefixed("encoder.gru", g), _prefixed("encoder.embed", g_src),
                      _prefixed("decoder.embed", g_tgt))


VJPS["seq2seq_attention"] = seq2seq_attention_vjp
