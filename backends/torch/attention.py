"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from attnspec.spec.errors import ConfigError, DomainError, DTypeError, ShapeError

from .. import _checks as check
from ._core import Paths, boolean, floating, integers, same_device


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) get weight 0; a slice with nothing kept is all 0.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        keep = x != -math.inf
        if bool(keep.all()):  # nothing masked: torch.softmax is the same equation
            return torch.softmax(x, dim=axis)
    else:
        keep = boolean("mask", mask, x)
        check.broadcastable("mask", keep, s)
        keep = keep.expand(s) & (x != -math.inf)
    # masked entries become -inf; a slice with nothing kept becomes 0s (no NaN, even in
    # the gradient), then its weights are zeroed
    any_kept = keep.any(dim=axis, keepdim=True)
    y = torch.softmax(torch.where(keep, x, torch.where(any_kept, -math.inf, 0)), dim=axis)
    return torch.where(keep, y, 0)


def _size(name: str, value) -> int:
    return check.integer(name, value, lo=0)


def causal_mask(*, t, s, device=None):
    """mask[i, j] = j <= i + (S - T): bottom-right aligned, as in decoding with a KV cache.

    When T > S the first T - S rows attend nothing. ``device`` (torch only): where the
    mask is made, default torch's default device.
    """
    t, s = _size("t", t), _size("s", s)
    i = torch.arange(t, device=device)[:, None]  # (T, 1)
    j = torch.arange(s, device=device)[None, :]  # (1, S)
    return j <= i + (s - t)  # (T, S)


def padding_mask(ids, *, pad_id):
    """mask[b, 0, 0, j] = ids[b, j] != pad_id."""
    ids = integers("ids", ids)
    check.rank("ids", ids, min_rank=2, max_rank=2)
    pad_id = check.integer("pad_id", pad_id)
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def combined_mask(ids, *, pad_id, t, num_heads=1, causal=True):
    """mask[b, h, i, j] = padding[b, j] and causal[i, j] (causal over T x S, S = ids.shape[1])."""
    keep = padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, S)
    t = _size("t", t)
    h = check.integer("num_heads", num_heads, lo=1)
    if not isinstance(causal, bool):
        raise ConfigError(f"causal must be True or False, got {causal!r}")
    b, s = keep.shape[0], keep.shape[-1]
    if causal:
        keep = keep & causal_mask(t=t, s=s, device=keep.device)  # (B, 1, T, S)
    return keep.expand(b, h, t, s).clone()  # (B, H, T, S)


def _scale(scale, width: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(width)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not math.isfinite(scale):
        raise ConfigError(f"scale must be a finite number or None, got {scale!r}")
    return float(scale)


def _attention_inputs(q, k, v, mask, bias):
    """Checked q, k, v, mask, bias and the scores shape (*batch, T, S)."""
    q, k, v = floating("q", q), floating("k", k), floating("v", v)
    for name, x in (("k", k), ("v", v)):
        same_device(name, x, q)
        if x.dtype != q.dtype:
            raise DTypeError(f"{name} has dtype {x.dtype} but q has {q.dtype}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check.rank(name, x, min_rank=2)
    check.same("key width", **{"q.shape[-1]": q.shape[-1], "k.shape[-1]": k.shape[-1]})
    check.same("key length", **{"k.shape[-2]": k.shape[-2], "v.shape[-2]": v.shape[-2]})
    if q.shape[-1] < 1:
        raise ShapeError(f"key width must be >= 1, got q of shape {tuple(q.shape)}")
    batch = check.batch_broadcast("q, k, v", q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    full = batch + (q.shape[-2], k.shape[-2])  # (..., T, S)
    if mask is not None:
        mask = boolean("mask", mask, q)
        check.broadcastable("mask", mask, full)
    if bias is not None:
        bias = floating("bias", bias, q)
        check.broadcastable("bias", bias, full)
    return q, k, v, mask, bias, full


def sdpa(q, k, v, mask=None, bias=None, *, scale=None):
    """weights = softmax(scale * q k^T + bias, masked), output = weights v.

    scale defaults to 1/sqrt(K); masked keys get weight 0 and a row with no key
    left gives zero weights and a zero output.
    """
    q, k, v, mask, bias, full = _attention_inputs(q, k, v, mask, bias)
    c = _scale(scale, q.shape[-1])
    if Paths.skip_weights:  # the modules' fast path: no weights asked for
        return fused_sdpa(q, k, v, mask, bias, scale=c), None
    scores = (q @ k.transpose(-1, -2)) * c  # (..., T, S)
    if bias is not None:
        scores = scores + bias
    weights = softmax(scores.expand(full), mask)  # (..., T, S)
    if Paths.attention == "fused":
        return fused_sdpa(q, k, v, mask, bias, scale=c), weights
    Paths.note("explicit")
    return weights @ v, weights  # (..., T, V), (..., T, S)


def fused_sdpa(q, k, v, mask=None, bias=None, *, scale):
    """The output of sdpa through torch.nn.functional.scaled_dot_product_attention.

    Same mask polarity (True = may attend); a bias becomes a float mask with -inf where
    masked; rows with nothing to attend to are set to 0 (PyTorch gives NaN there).
    Inputs are assumed checked (this is the fast path of ``sdpa`` and the modules).
    """
    Paths.note("fused")
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (x.expand(*batch, *x.shape[-2:]) for x in (q, k, v))
    keep = mask
    if bias is not None:
        finite = bias != -math.inf
        keep = finite if keep is None else keep & finite
        attn = bias if mask is None else bias.masked_fill(~mask, -math.inf)
    else:
        attn = mask
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn, scale=scale)  # (..., T, V)
    if keep is None:
        return out
    any_key = keep.any(dim=-1, keepdim=True)  # (..., T, 1)
    return torch.where(any_key, out, 0)


def topk_attention(q, k, v, mask=None, *, top_k, scale=None):
    """Softmax over the top_k largest scores scale * q k^T of each query, 0 elsewhere.

    Only unmasked keys compete; equal scores keep the lower key index first; with
    fewer than top_k unmasked keys all of them are kept.
    """
    q, k, v, mask, _, full = _attention_inputs(q, k, v, mask, None)
    top_k = check.integer("top_k", top_k, lo=1, hi=full[-1])
    c = _scale(scale, q.shape[-1])
    scores = ((q @ k.transpose(-1, -2)) * c).expand(full)  # (..., T, S)
    allowed = (torch.ones(full, dtype=torch.bool, device=q.device) if mask is None
               else mask.expand(full))
    # a stable sort of -score ranks equal scores by key index; masked keys go last
    order = torch.argsort(torch.where(allowed, -scores, math.inf), dim=-1, stable=True)
    positions = torch.arange(full[-1], device=q.device).expand(full)
    rank = torch.empty_like(order).scatter_(-1, order, positions)
    weights = softmax(scores, allowed & (rank < top_k))  # (..., T, S)
    return weights @ v, weights  # (..., T, V), (..., T, S)


def attention_entropy(weights, *, axis=-1):
    """H = -sum_j w_j ln w_j along axis, with 0 ln 0 = 0 (nats)."""
    w = floating("weights", weights)
    s = check.rank("weights", w, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    ok = torch.isfinite(w) & (w >= 0)
    if not bool(torch.all(ok)):
        raise DomainError(f"weights must be finite and >= 0, got a value of "
                          f"{w[~ok].flatten()[0].item()} in shape {s}")
    positive = w > 0
    terms = torch.where(positive, w * torch.log(torch.where(positive, w, 1)), 0)
    return -torch.sum(terms, dim=axis)
