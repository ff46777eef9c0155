"""Token embedding (scaled by sqrt(D)) and the output projection (LM head)."""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from . import buckets
from ._core import const, floating, integers


def embedding(ids, *, scale=True, params):
    """y = table[ids] * sqrt(D) (scale=True, Vaswani et al. 2017 §3.4), else table[ids]."""
    ids = integers("ids", ids)
    scale = check.flag("scale", scale)
    table = check.params_of(params).require("table", (None, None))     # (L, D)
    L, D = check.shape(table)
    values = np.asarray(ids)  # the range check reads values: on the host, nothing compiled
    if values.size and (values.min() < 0 or values.max() >= L):
        raise DomainError(f"ids must be in [0, L) with L={L} (rows of 'table' {(L, D)}), "
                          f"got ids of shape {ids.shape} with min {values.min()}, max "
                          f"{values.max()}")
    c = const(table, math.sqrt(D)) if scale else None
    return buckets.rowwise(_embed, ids, table, c, item_rank=0)  # padded ids: row 0


@jax.jit
def _embed(ids, table, c):
    y = table[ids]                                                      # (..., D)
    return y if c is None else y * c


def lm_head(x, *, tied=False, params):
    """logits = x W + b, W (D, L);  tied: logits = x table^T + b, table (L, D);  b optional."""
    x = floating("x", x)
    D = check.rank("x", x, min_rank=1)[-1]
    p = check.params_of(params)
    tied = check.flag("tied", tied)
    if tied:
        w = p.require("table", (None, D))                               # (L, D)
    else:
        w = p.require("w", (D, None))                                   # (D, L)
    return buckets.rowwise(_lm_head, x, w, p.get("b", (w.shape[0 if tied else 1],)), tied=tied)


@functools.partial(jax.jit, static_argnames="tied")
def _lm_head(x, w, b, tied: bool):
    logits = x @ (w.T if tied else w)                                   # (..., L)
    return logits if b is None else logits + b
