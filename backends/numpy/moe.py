"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DTypeError

from .. import _checks as check
from .._routing import ranked as _ranked
from .._routing import select as _select
from ..composite.moe import MoE
from ._core import boolean, floating
from .feedforward import gated_feedforward, gated_feedforward_vjp


def _scores(x, scoring):
    if scoring == "softmax":
        z = np.exp(x - x.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)
    return 1 / (1 + np.exp(-x))


def _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group, topk_group, scale,
           group_score="sum_top2"):
    x = floating("logits", logits)                                         # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias)
    if b is not None and b.dtype != x.dtype:
        raise DTypeError(f"correction_bias has dtype {b.dtype} but logits has {x.dtype}")
    top_k, n_group, topk_group = check.moe_router(x.shape, None if b is None else b.shape, top_k,
                                                  scoring, renormalize, eps, n_group,
                                                  topk_group, scale, group_score)
    p = _scores(x, scoring)                                                # (N, E)
    s = p if b is None else p + b
    return x, p, _select(s, top_k, n_group, topk_group, group_score)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x, p, idx = _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group,
                       topk_group, routed_scaling_factor, group_score)
    w = np.take_along_axis(p, idx, axis=-1)                                # (N, k)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + x.dtype.type(eps))
    return w * x.dtype.type(routed_scaling_factor), idx.astype(np.int64)


# g = c dw; renormalised: dp_I = g / (S + eps) - (g . p_I) / (S + eps)^2; scattered to the
# kept experts; softmax: dx = p (dp - dp . p); sigmoid: dx = dp p (1 - p); d bias = 0
def moe_router_vjp(cotangents, logits, correction_bias=None, *, top_k, scoring="softmax",
                   renormalize=False, eps=1e-20, n_group=1, topk_group=1,
                   routed_scaling_factor=1.0, group_score="sum_top2"):
    x, p, idx = _route(logits, correction_bias, top_k, scoring, renormalize, eps, n_group,
                       topk_group, routed_scaling_factor, group_score)
    g = np.asarray(cotangents["weights"], dtype=x.dtype) * x.dtype.type(routed_scaling_factor)
    if renormalize:
        kept = np.take_along_axis(p, idx, axis=-1)                         # (N, k)
        total = kept.sum(axis=-1, keepdims=True) + x.dtype.type(eps)
        g = g / total - (g * kept).sum(axis=-1, keepdims=True) / (total * total)
    dp = np.zeros_like(p)
    np.put_along_axis(dp, idx, g, axis=-1)
    if scoring == "softmax":
        dx = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    else:
        dx = dp * p * (1 - p)
    grads = {"logits": dx}
    if correction_bias is not None:
        grads["correction_bias"] = np.zeros(np.shape(correction_bias), dtype=x.dtype)
    return grads, {}


# -- the MoE layer (spec/components/moe.md): the shared composite, its VJP by hand ---------

moe, = MoE.bind(__package__)

GLU = ("w_gate", "w_up", "w_down")


# expert e gets dy_e = sum_j [I_j = e] w_j dy; dw_j = <dy, FFN_{I_j}(x)> through the router's
# VJP into dz (plus z's own cotangent); dx += dz W_router^T, dW_router = x^T dz; shared expert
# s gated by g = sigma(x W_sg): ds = g dy, du = <dy, s> g (1 - g), dW_sg = x^T du
def moe_vjp(cotangents, x, *, top_k, scoring="softmax", renormalize=False, eps=1e-20, n_group=1,
            topk_group=1, routed_scaling_factor=1.0, group_score="sum_top2", params):
    router = {"top_k": top_k, "scoring": scoring, "renormalize": renormalize, "eps": eps,
              "n_group": n_group, "topk_group": topk_group,
              "routed_scaling_factor": routed_scaling_factor, "group_score": group_score}
    y, z = moe(x, **router, params=params)                                 # the checks, once
    x, p = np.asarray(x), {k: np.asarray(v) for k, v in params.items()}
    dy = np.asarray(cotangents["y"], dtype=y.dtype)                        # (N, D)
    bias = p.get("router.correction_bias")
    w, idx = moe_router(z, bias, **router)                                 # (N, k)
    dx, grads = np.zeros_like(x), {f"experts.{g}": np.zeros_like(p[f"experts.{g}"]) for g in GLU}
    dw = np.zeros_like(w)
    for e in range(z.shape[1]):
        expert = {g: p[f"experts.{g}"][e] for g in GLU}
        out = gated_feedforward(x, params=expert)                          # (N, D)
        weight = np.where(idx == e, w, 0).sum(axis=-1, keepdims=True)      # (N, 1)
        dw += np.where(idx == e, (dy * out).sum(axis=-1, keepdims=True), 0)
        gi, gp = gated_feedforward_vjp({"y": weight * dy}, x, params=expert)
        dx += gi["x"]
        for g in GLU:
            grads[f"experts.{g}"][e] = gp[g]
    gz, _ = moe_router_vjp({"weights": dw}, z, bias, **router)
    dz = gz["logits"] + np.asarray(cotangents.get("router_logits", 0), dtype=z.dtype)  # (N, E)
    dx += dz @ p["router.w"].T
    grads["router.w"] = x.T @ dz
    if bias is not None:
        grads["router.correction_bias"] = np.zeros_like(bias)
    if "shared.w_gate" in p:
        shared = {g: p[f"shared.{g}"] for g in GLU}
        ds = dy
        if "shared_gate.w" in p:
            s = gated_feedforward(x, params=shared)                        # (N, D)
            g = 1 / (1 + np.exp(-(x @ p["shared_gate.w"])))                # (N, 1)
            du = (dy * s).sum(axis=-1, keepdims=True) * g * (1 - g)        # (N, 1)
            grads["shared_gate.w"] = x.T @ du
            dx += du @ p["shared_gate.w"].T
            ds = dy * g
        gi, gp = gated_feedforward_vjp({"y": ds}, x, params=shared)
        dx += gi["x"]
        grads.update({f"shared.{g}": gp[g] for g in GLU})
    return {"x": dx}, grads


# -- the load-balancing loss (spec/components/moe_aux_loss.md) -------------------------------

def _aux(router_logits, mask, top_k):
    z = floating("router_logits", router_logits)                           # (L, N, E)
    m = None if mask is None else boolean("mask", mask)
    top_k = check.moe_aux_loss(z.shape, None if m is None else m.shape, top_k)
    p = _scores(z, "softmax")                                              # (L, N, E)
    e = z.shape[-1]
    idx = _ranked(p.reshape(-1, e))[:, :top_k]                             # (L N, k)
    chosen = np.zeros((idx.shape[0], e), dtype=z.dtype)
    np.put_along_axis(chosen, idx, 1, axis=-1)
    m = np.ones(z.shape[1], dtype=z.dtype) if m is None else m.astype(z.dtype)
    rows = np.broadcast_to(m, z.shape[:2]).reshape(-1, 1)                  # (L N, 1)
    total = rows.sum()
    f = (chosen * rows).sum(axis=0) / total                                # (E,)
    return z, p, rows.reshape(z.shape[:2] + (1,)), total, f


def moe_aux_loss(router_logits, mask=None, *, top_k):
    """E sum_e f_e P_e: f_e the fraction of the (unmasked) rows of every layer choosing e in
    their top_k (k counts per row), P_e their mean probability of e."""
    z, p, rows, total, f = _aux(router_logits, mask, top_k)
    big_p = (p * rows).sum(axis=(0, 1)) / total                            # (E,)
    return (z.shape[-1] * (f * big_p).sum()).astype(z.dtype)


# f is piecewise constant: dP = c E f;  dz = (m / M) p (dP - <dP, p>)
def moe_aux_loss_vjp(cotangents, router_logits, mask=None, *, top_k):
    z, p, rows, total, f = _aux(router_logits, mask, top_k)
    d_big_p = np.asarray(cotangents["loss"], dtype=z.dtype) * z.shape[-1] * f  # (E,)
    dz = p * (d_big_p - (p * d_big_p).sum(axis=-1, keepdims=True)) * rows / total
    return {"router_logits": dz.astype(z.dtype)}, {}
