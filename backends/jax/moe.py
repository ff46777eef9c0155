"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .. import _checks as check
from ..composite.moe import MoE
from . import buckets
from ._core import boolean, const, floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return jnp.argsort(-s, axis=-1, stable=True)


def _select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    n, e = s.shape
    if n_group > 1:
        grouped = jnp.sort(s.reshape(n, n_group, e // n_group), axis=-1)        # (N, G, E/G)
        g = grouped[..., -1]                                                     # (N, G): "max"
        if group_score == "sum_top2":
            g = g + grouped[..., -2]
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = jax.nn.one_hot(chosen, n_group).max(axis=1) > 0                # (N, G)
        s = jnp.where(jnp.repeat(allowed, e // n_group, axis=-1), s, -jnp.inf)
    return _ranked(s)[:, :top_k]                                                 # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
               group_score="sum_top2"):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                               # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias, x)
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor, group_score)
    static = dict(top_k=top_k, scoring=scoring, renormalize=bool(renormalize), n_group=n_group,
                  topk_group=topk_group, group_score=group_score)
    args = (b, const(x, eps), const(x, routed_scaling_factor))
    if buckets.applies(x, b):  # each row is routed on its own: rows padded to a bucket
        return buckets.rowwise(_router, x, *args, **static)
    return _router(x, *args, **static)


@functools.partial(jax.jit, static_argnames=("top_k", "scoring", "renormalize", "n_group",
                                             "topk_group", "group_score"))
def _router(x, b, eps, scale, top_k, scoring, renormalize, n_group, topk_group, group_score):
    """The router compiled once per shape and (shape-like) attribute set; eps and the scaling
    factor are traced (one program for every value of them)."""
    p = jax.nn.softmax(x, axis=-1) if scoring == "softmax" else jax.nn.sigmoid(x)  # (N, E)
    s = p if b is None else p + b
    idx = _select(jax.lax.stop_gradient(s), top_k, n_group, topk_group, group_score)  # (N, k)
    w = jnp.take_along_axis(p, idx, axis=-1)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + eps)
    return w * scale, idx.astype(jnp.int64)


# -- the MoE layer (spec/components/moe.md): the shared composite ---------------------------

_moe, = MoE.bind(__package__)


def _moe_scoped(x, *, params, prefix, **attributes):
    """_moe on the parameters under ``prefix`` (a layer's ``moe.``), so errors name the whole
    path; the store travels as a plain dict (a pytree), the prefix as a static argument."""
    return _moe(x, params=check.Params(params, prefix), **attributes)


_STATIC = ("prefix", "top_k", "scoring", "renormalize", "eps", "n_group", "topk_group",
           "routed_scaling_factor", "group_score")


@functools.partial(jax.jit, static_argnames=("names", *_STATIC))
def _moe_rows(x, *leaves, names, **attributes):
    """_moe_scoped with the parameters as positional arrays (``names`` their store keys), so
    that buckets.rowwise sees each of them (a tracer under jax.vjp, or concrete)."""
    return _moe_scoped(x, params=dict(zip(names, leaves)), **attributes)


@functools.wraps(_moe)
def moe(x, *, top_k, scoring="softmax", renormalize=False, eps=1e-20, n_group=1, topk_group=1,
        routed_scaling_factor=1.0, group_score="sum_top2", params):
    """The composite compiled once per token bucket and attribute set (its checks read shapes
    only, so they run while tracing). Each token is routed and mixed on its own, so the
    tokens (N) are padded to a bucket size and the outputs cut back (buckets.rowwise; padded
    tokens are zeros: finite router scores, cut off, zero cotangents), and under jax.vjp of
    concrete arrays the pullback runs at the bucket size too."""
    p = check.params_of(params)
    names = tuple(k for k in p.store if k.startswith(p.prefix))
    x = floating("x", x)
    if x.ndim != 2:  # the composite's own check names the shape
        return _moe_scoped(x, params={k: p.store[k] for k in names}, prefix=p.prefix,
                           top_k=top_k, scoring=scoring, renormalize=renormalize, eps=eps,
                           n_group=n_group, topk_group=topk_group,
                           routed_scaling_factor=routed_scaling_factor,
                           group_score=group_score)
    return buckets.rowwise(_moe_rows, x, *(p.store[k] for k in names), names=names,
                           prefix=p.prefix, top_k=top_k, scoring=scoring,
                           renormalize=renormalize, eps=eps, n_group=n_group,
                           topk_group=topk_group, routed_scaling_factor=routed_scaling_factor,
                           group_score=group_score)


# -- the load-balancing loss (spec/components/moe_aux_loss.md) -------------------------------

def moe_aux_loss(router_logits, mask=None, *, top_k):
    """E sum_e f_e P_e: f_e the fraction of the (unmasked) rows of every layer choosing e in
    their top_k (k counts per row), P_e their mean probability of e."""
    z = floating("router_logits", router_logits)                                 # (L, N, E)
    m = None if mask is None else boolean("mask", mask)
    top_k = check.moe_aux_loss(tuple(z.shape), None if m is None else tuple(m.shape), top_k)
    rows = jnp.ones(z.shape[1], z.dtype) if m is None else m.astype(z.dtype)     # (N,)
    return _aux_loss(z, rows, top_k=top_k)


@functools.partial(jax.jit, static_argnames="top_k")
def _aux_loss(z, rows, top_k):
    layers, n, e = z.shape
    p = jax.nn.softmax(z, axis=-1)                                               # (L, N, E)
    idx = _ranked(jax.lax.stop_gradient(p).reshape(-1, e))[:, :top_k]            # (L N, k)
    chosen = jax.nn.one_hot(idx, e, dtype=z.dtype).sum(axis=1).reshape(p.shape)
    rows = rows.reshape(1, n, 1)
    total = rows.sum() * layers
    f = (chosen * rows).sum(axis=(0, 1)) / total                                 # (E,)
    big_p = (p * rows).sum(axis=(0, 1)) / total                                  # (E,)
    return (f * big_p).sum() * e
