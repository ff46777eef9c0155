"""Token embedding (scaled by sqrt(D)) and the output projection (LM head)."""

from __future__ import annotations

import math

from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating, integers, opt_param, param


def embedding(ids, *, scale=True, params):
    """y = table[ids] * sqrt(D) (scale=True, Vaswani et al. 2017 §3.4), else table[ids]."""
    ids = integers("ids", ids)
    scale = check.flag("scale", scale)
    p = check.params_of(params)
    table = floating(p.path("table"), p.require("table", (None, None)))  # (L, D)
    integers("ids", ids, table)
    L, D = check.shape(table)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= L):
        raise DomainError(f"ids must be in [0, L) with L={L} (rows of 'table' {(L, D)}), "
                          f"got ids of shape {tuple(ids.shape)} with min {int(ids.min())}, "
                          f"max {int(ids.max())}")
    y = table[ids]                                                      # (..., D)
    return y * math.sqrt(D) if scale else y.clone()


def lm_head(x, *, tied=False, params):
    """logits = x W + b, W (D, L);  tied: logits = x table^T + b, table (L, D);  b optional."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    p = check.params_of(params)
    if check.flag("tied", tied):
        w = param(p, "table", (None, D), x).T                           # (D, L)
    else:
        w = param(p, "w", (D, None), x)                                 # (D, L)
    b = opt_param(p, "b", (w.shape[1],), x)
    logits = x @ w                                                      # (..., L)
    return logits if b is None else logits + b
