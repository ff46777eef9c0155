"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import torch

from .. import _checks as check
from ..composite.moe import MoE
from ._core import boolean, floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return torch.argsort(-s, dim=-1, stable=True)


def _select(s, top_k, n_group, topk_group, group_score="sum_top2"):
    n, e = s.shape
    if n_group > 1:
        grouped = torch.sort(s.reshape(n, n_group, e // n_group), dim=-1).values  # (N, G, E/G)
        g = grouped[..., -1]                                                     # (N, G): "max"
        if group_score == "sum_top2":
            g = g + grouped[..., -2]
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = torch.zeros((n, n_group), dtype=torch.bool, device=s.device)
        allowed = allowed.scatter(-1, chosen, True)
        s = torch.where(allowed.repeat_interleave(e // n_group, dim=-1), s,
                        torch.full_like(s, float("-inf")))
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
    p = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)  # (N, E)
    s = p if b is None else p + b
    idx = _select(s.detach(), top_k, n_group, topk_group, group_score)                       # (N, k)
    w = torch.gather(p, -1, idx)
    if renormalize:
        w = w / (w.sum(dim=-1, keepdim=True) + eps)
    return w * routed_scaling_factor, idx.to(torch.int64)


# -- the MoE layer (spec/components/moe.md): the shared composite ---------------------------

moe, = MoE.bind(__package__)


# -- the load-balancing loss (spec/components/moe_aux_loss.md) -------------------------------

def moe_aux_loss(router_logits, mask=None, *, top_k):
    """E sum_e f_e P_e: f_e the fraction of the (unmasked) rows of every layer choosing e in
    their top_k (k counts per row), P_e their mean probability of e."""
    z = floating("router_logits", router_logits)                                 # (L, N, E)
    m = None if mask is None else boolean("mask", mask, z)
    top_k = check.moe_aux_loss(tuple(z.shape), None if m is None else tuple(m.shape), top_k)
    layers, n, e = z.shape
    p = torch.softmax(z, dim=-1)                                                 # (L, N, E)
    idx = _ranked(p.detach().reshape(-1, e))[:, :top_k]                          # (L N, k)
    chosen = torch.zeros_like(p).reshape(-1, e).scatter(-1, idx, 1.0).reshape(p.shape)
    rows = (torch.ones(n, dtype=z.dtype, device=z.device) if m is None
            else m.to(z.dtype)).reshape(1, n, 1)                                 # (1, N, 1)
    total = rows.sum() * layers
    f = (chosen * rows).sum(dim=(0, 1)) / total                                  # (E,)
    big_p = (p * rows).sum(dim=(0, 1)) / total                                   # (E,)
    return e * (f * big_p).sum()
