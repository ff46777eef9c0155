"""Token embedding (scaled by sqrt(D)) and the output projection (LM head)."""

from __future__ import annotations

import math

import mlx.core as mx
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating, integers


def embedding(ids, *, scale=True, params):
    """y = table[ids] * sqrt(D) (scale=True, Vaswani et al. 2017 §3.4), else table[ids]."""
    ids = integers("ids", ids)
    scale = check.flag("scale", scale)
    table = check.params_of(params).require("table", (None, None))     # (L, D)
    L, D = check.shape(table)
    if ids.size:
        lo, hi = mx.min(ids).item(), mx.max(ids).item()
        if lo < 0 or hi >= L:
            raise DomainError(f"ids must be in [0, L) with L={L} (rows of 'table' {(L, D)}), "
                              f"got ids of shape {tuple(ids.shape)} with min {lo}, max {hi}")
    y = table[ids]                                                      # (..., D)
    return y * math.sqrt(D) if scale else y


def lm_head(x, *, tied=False, params):
    """logits = x W + b, W (D, L);  tied: logits = x table^T + b, table (L, D);  b optional."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    p = check.params_of(params)
    if check.flag("tied", tied):
        w = p.require("table", (None, D)).T                             # (D, L)
    else:
        w = p.require("w", (D, None))                                   # (D, L)
    b = p.get("b", (w.shape[1],))
    logits = x @ w                                                      # (..., L)
    return logits if b is None else logits + b
