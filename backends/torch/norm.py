"""Normalisation over the last axis: LayerNorm (two named variants) and RMSNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attnspec.spec.errors import ShapeError

from .. import _checks as check
from . import _core as paths
from ._core import floating, param

VARIANTS = ("canonical", "annotated")


def layer_norm(x, *, eps=1e-5, variant="canonical", params):
    """canonical: y = (x - mu) / sqrt(var + eps) * gamma + beta, var biased (divide by D).

    annotated: y = gamma * (x - mu) / (std + eps) + beta, std unbiased (divide by D - 1).
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = check.eps(eps)
    check.choice("variant", variant, VARIANTS)
    D = s[-1]
    p = check.params_of(params)
    gamma, beta = param(p, "gamma", (D,), x), param(p, "beta", (D,), x)
    if variant == "annotated" and D < 2:
        raise ShapeError(f"variant 'annotated' needs x.shape[-1] >= 2 (the unbiased std "
                         f"divides by D - 1), got x of shape {s}")
    if D == 0:  # nothing to normalise: an empty output, not an error
        return torch.zeros_like(x)
    if variant == "canonical" and paths.fused():  # the same equation, PyTorch's kernel
        paths.note("fused layer_norm")
        return F.layer_norm(x, (D,), gamma, beta, eps)
    mu = x.mean(dim=-1, keepdim=True)                    # (..., 1)
    centred = x - mu                                     # (..., D)
    if variant == "canonical":
        var = torch.mean(centred * centred, dim=-1, keepdim=True)
        z = centred / torch.sqrt(var + eps)
    else:
        std = torch.sqrt(torch.sum(centred * centred, dim=-1, keepdim=True) / (D - 1))
        z = centred / (std + eps)
    return z * gamma + beta


def rms_norm(x, *, eps=1e-6, unit_offset=False, params):
    """y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis (no mean subtraction);
    unit_offset: y = x / sqrt(mean(x^2) + eps) * (1 + gamma) (Gemma), computed in float32 for
    a half-precision x and cast back once, after the multiply."""
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    eps = check.eps(eps)
    unit_offset = check.flag("unit_offset", unit_offset)
    gamma = param(check.params_of(params), "gamma", (s[-1],), x)
    if s[-1] == 0:  # nothing to normalise: an empty output, not an error
        return torch.zeros_like(x)
    if unit_offset:  # Gemma's order: float32 for a half x, (1 + gamma) in it, one cast out
        t = x.float() if x.element_size() < 4 else x
        ms = torch.mean(t * t, dim=-1, keepdim=True)     # (..., 1)
        return (t / torch.sqrt(ms + eps) * (1 + gamma.to(t.dtype))).to(x.dtype)
    ms = torch.mean(x * x, dim=-1, keepdim=True)         # (..., 1)
    return x / torch.sqrt(ms + eps) * gamma
