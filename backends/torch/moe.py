"""The mixture-of-experts router (spec/components/moe_router.md)."""

from __future__ import annotations

import torch

from .. import _checks as check
from ._core import floating


def _ranked(s):
    """(N, M) -> ids by s descending, ties by the lowest id (a stable sort of -s)."""
    return torch.argsort(-s, dim=-1, stable=True)


def _select(s, top_k, n_group, topk_group):
    n, e = s.shape
    if n_group > 1:
        grouped = torch.sort(s.reshape(n, n_group, e // n_group), dim=-1).values  # (N, G, E/G)
        g = grouped[..., -1] + grouped[..., -2]                                  # (N, G)
        chosen = _ranked(g)[:, :topk_group]                                      # (N, topk_group)
        allowed = torch.zeros((n, n_group), dtype=torch.bool, device=s.device)
        allowed = allowed.scatter(-1, chosen, True)
        s = torch.where(allowed.repeat_interleave(e // n_group, dim=-1), s,
                        torch.full_like(s, float("-inf")))
    return _ranked(s)[:, :top_k]                                                 # (N, k)


def moe_router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
               eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0):
    """w = c p_I (/ (sum p_I + eps) when renormalize), I = top_k of p + bias within the
    topk_group best groups; p = softmax or sigmoid of the logits."""
    x = floating("logits", logits)                                               # (N, E)
    b = None if correction_bias is None else floating("correction_bias", correction_bias, x)
    top_k, n_group, topk_group = check.moe_router(
        tuple(x.shape), None if b is None else tuple(b.shape), top_k, scoring, renormalize, eps,
        n_group, topk_group, routed_scaling_factor)
    p = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)  # (N, E)
    s = p if b is None else p + b
    idx = _select(s.detach(), top_k, n_group, topk_group)                       # (N, k)
    w = torch.gather(p, -1, idx)
    if renormalize:
        w = w / (w.sum(dim=-1, keepdim=True) + eps)
    return w * routed_scaling_factor, idx.to(torch.int64)
