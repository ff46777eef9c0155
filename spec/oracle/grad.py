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

def sdpa_vjp(cot, q, k, v, mask=None, bias=None, scale=None, num_kv_heads=None):
    """W = softmax(S), S = c q k^T + bias, O = W v; with cotangents dO and dW:
        dW' = dO v^T + dW                       (..., T, S)
        dS  = W * (dW' - rowsum(dW' * W))       (softmax backward)
        dq = c dS k,  dk = c dS^T q,  dv = W^T dO,  dbias = dS (summed to bias's shape)
    """
    from .sdpa import batch_shape, sdpa

    if num_kv_heads is not None:
        raise NotImplementedError("sdpa_vjp: num_kv_heads has no gradient vectors yet")
    q, k, v = mpa(q), mpa(k), mpa(v)
    w = sdpa(q, k, v, mask=mask, bias=bias, scale=scale)["weights"]  # (..., T, S)
    full = batch_shape(q, k, v)
    dO = np.broadcast_to(mpa(cot["output"]), full + (q.shape[-2], v.shape[-1]))
    dWt = matmul(dO, transpose_last(np.broadcast_to(v, full + v.shape[-2:])))
    if "weights" in cot:
        dWt = dWt + mpa(cot["weights"])
    dS = np.empty(w.shape, dtype=object)
    for idx, row in _rows(w):
        dS[idx] = softmax_backward_row(row, list(dWt[idx]))
    c = 1 / mpmath.sqrt(q.shape[-1]) if scale is None else mpmath.mpf(scale)
    kb = np.broadcast_to(k, full + k.shape[-2:])
    qb = np.broadcast_to(q, full + q.shape[-2:])
    grads = {"q": unbroadcast(matmul(dS, kb) * c, q.shape),                 # (..., T, K)
             "k": unbroadcast(matmul(transpose_last(dS), qb) * c, k.shape),  # (..., S, K)
             "v": unbroadcast(matmul(transpose_last(w), dO), v.shape)}       # (..., S, V)
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


VJPS = {"softmax": softmax_vjp, "sdpa": sdpa_vjp, "layer_norm": layer_norm_vjp,
        "rms_norm": rms_norm_vjp, "feedforward": feedforward_vjp,
        "cross_entropy": cross_entropy_vjp}
VJPS.update(GRAD2_VJPS)
