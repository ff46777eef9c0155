"""Token embedding (scaled by sqrt(D)) and the output projection (LM head)."""

from __future__ import annotations

import math

import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating, integers


def embedding(ids, *, scale=True, params):
    """y = table[ids] * sqrt(D) (scale=True, Vaswani et al. 2017 §3.4), else table[ids]."""
    ids = integers("ids", ids)
    scale = check.flag("scale", scale)
    table = check.params_of(params).require("table", (None, None))     # (L, D)
    L, D = check.shape(table)
    if ids.size and (ids.min() < 0 or ids.max() >= L):
        raise DomainError(f"ids must be in [0, L) with L={L} (rows of 'table' {(L, D)}), "
                          f"got ids of shape {ids.shape} with min {ids.min()}, max {ids.max()}")
    y = table[ids]                                                      # (..., D)
    return y * math.sqrt(D) if scale else y.copy()


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


# == grad2: backward (vector-Jacobian products) =============================================

# y[n] = table[ids[n]] * f  (f = sqrt(D) or 1):  a scatter-add, repeated ids accumulate:
#   dtable[l] = f * sum over the n with ids[n] = l of dy[n];   the integer ids get none
def embedding_vjp(cotangents, ids, *, scale=True, params):
    y = embedding(ids, scale=scale, params=params)                      # the checks, once
    table = np.asarray(params["table"])
    dy = np.asarray(cotangents["y"], dtype=y.dtype).reshape(-1, table.shape[1])  # (N, D)
    dtable = np.zeros_like(table)
    np.add.at(dtable, np.asarray(ids).reshape(-1), dy)                  # (L, D)
    return {}, {"table": dtable * math.sqrt(table.shape[1]) if scale else dtable}


# logits = x W + b  (tied: W = table^T):
#   dx = dlogits W^T,  dW = x^T dlogits,  dtable = dlogits^T x,  db = sum dlogits
def lm_head_vjp(cotangents, x, *, tied=False, params):
    logits = lm_head(x, tied=tied, params=params)                       # the checks, once
    x = np.asarray(x)
    w = np.asarray(params["table"]).T if tied else np.asarray(params["w"])  # (D, L)
    x2 = x.reshape(-1, x.shape[-1])                                      # (N, D)
    dl = np.asarray(cotangents["logits"], dtype=logits.dtype).reshape(-1, w.shape[1])  # (N, L)
    grads = {"table": dl.T @ x2} if tied else {"w": x2.T @ dl}
    if "b" in params:
        grads["b"] = dl.sum(axis=0)
    return {"x": (dl @ w.T).reshape(x.shape)}, grads
