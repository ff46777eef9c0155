"""Token embedding (scaled by sqrt(D)) and the output projection (LM head)."""

from __future__ import annotations

import math

import tensorflow as tf

from .. import _checks as check
from ._core import const, floating, in_range, integers, matmul, take


def embedding(ids, *, scale=True, params):
    """y = table[ids] * sqrt(D) (scale=True, Vaswani et al. 2017 §3.4), else table[ids]."""
    ids = integers("ids", ids)
    scale = check.flag("scale", scale)
    table = check.params_of(params).require("table", (None, None))     # (L, D)
    L, D = check.shape(table)
    in_range("ids", ids, 0, L, lambda lo, hi: (
        f"ids must be in [0, L) with L={L} (rows of 'table' {(L, D)}), "
        f"got ids of shape {check.shape(ids)} with min {lo}, max {hi}"))
    y = take(table, ids, L)                                             # (..., D)
    return y * const(math.sqrt(D), y) if scale else tf.identity(y)


def lm_head(x, *, tied=False, params):
    """logits = x W + b, W (D, L);  tied: logits = x table^T + b, table (L, D);  b optional."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    p = check.params_of(params)
    if check.flag("tied", tied):
        w = tf.transpose(p.require("table", (None, D)))                 # (D, L)
    else:
        w = p.require("w", (D, None))                                   # (D, L)
    b = p.get("b", (check.shape(w)[1],))
    logits = matmul(x, w)                                         # (..., L)
    return logits if b is None else logits + b

