"""Losses: softmax cross-entropy with an ignore index and label smoothing. Gradients come
from autograd (the backend's ``vjp``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import _core as paths
from ._core import floating, tensor


def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """loss_i = -sum_c q_c log softmax(logits_i)_c, q = (1 - eps) onehot(t_i) + eps / L, over
    the tokens whose target is not ignore_index; mean over those N (NaN for N = 0), sum, none."""
    z, t = floating("logits", logits), tensor("targets", targets)
    kind = "f" if t.dtype.is_floating_point else ("b" if t.dtype == torch.bool else "i")
    ignore, eps, reduction = check.cross_entropy_args(tuple(z.shape), tuple(t.shape), kind,
                                                      ignore_index, label_smoothing, reduction)
    paths.same_device("targets", t, z)
    L = z.shape[-1]
    counted = t != ignore
    bad = counted & ((t < 0) | (t >= L))
    if bool(bad.any()):
        raise DomainError(f"targets must be class indices in [0, {L}) or ignore_index="
                          f"{ignore}; got {int(t[bad].flatten()[0])} (targets of shape "
                          f"{tuple(t.shape)}, logits of shape {tuple(z.shape)})")
    if paths.fused():
        paths.note("fused cross_entropy")
        out = F.cross_entropy(z.reshape(-1, L), t.reshape(-1), ignore_index=ignore,
                              label_smoothing=eps, reduction=reduction)
        return out.reshape(t.shape) if reduction == "none" else out
    onehot = F.one_hot(torch.where(counted, t, 0).long(), L).to(z.dtype)  # (..., L)
    q = ((1 - eps) * onehot + eps / L) * counted[..., None]               # (..., L)
    per = -torch.sum(q * torch.log_softmax(z, dim=-1), dim=-1)            # (...,)
    if reduction == "none":
        return per
    total = torch.sum(per)
    return total if reduction == "sum" else total / counted.sum()
