"""Token embedding and the output projection (LM head).

embedding:  y[..., d] = table[ids[...], d] * sqrt(D)   (scale=True, Vaswani et al. 2017 §3.4)
            y[..., d] = table[ids[...], d]             (scale=False)
lm_head:    logits = x W + b,        W (D, L), b (L,) optional
            logits = x table^T + b   (tied=True, table (L, D), Press & Wolf 2017)
"""

import mpmath
import numpy as np

from .core import add, fsum_axes, matmul, mp, mpa, transpose_last, zeros


def embedding(ids, scale=True, params=None):
    table = mpa(params["table"])
    ids = np.asarray(ids)
    d = table.shape[1]
    factor = mpmath.sqrt(d) if scale else mpmath.mpf(1)
    y = np.empty(ids.shape + (d,), dtype=object)
    for idx in np.ndindex(ids.shape):
        y[idx] = [table[int(ids[idx]), j] * factor for j in range(d)]
    return {"y": y}


def lm_head(x, tied=False, params=None):
    x = mpa(x)
    w = transpose_last(mpa(params["table"])) if tied else mpa(params["w"])   # (D, L)
    logits = matmul(x, w)
    if "b" in params:
        logits = add(logits, mpa(params["b"]))
    return {"logits": logits}


def embedding_vjp(cot, ids, scale=True, params=None):
    """y[n] = table[ids[n]] * f (f = sqrt(D) or 1): scatter-add,
        dtable[l] = f * sum over the n with ids[n] = l of dy[n]   (repeated ids accumulate)
    The integer ids get no gradient."""
    table = mpa(params["table"])
    ids = np.asarray(ids)
    dy = mpa(cot["y"])
    d = table.shape[1]
    f = mpmath.sqrt(d) if scale else mpmath.mpf(1)
    dtable = zeros(table.shape)
    for row in range(table.shape[0]):
        hits = [idx for idx in np.ndindex(ids.shape) if int(ids[idx]) == row]
        dtable[row] = [f * mp.fsum(dy[idx + (j,)] for idx in hits) for j in range(d)]
    return {}, {"table": dtable}


def lm_head_vjp(cot, x, tied=False, params=None):
    """logits = x W + b (tied: W = table^T):
        dx = dlogits W^T,  dW = x^T dlogits,  dtable = dlogits^T x,  db = sum dlogits
    (sums over every leading axis)."""
    x, dl = mpa(x), mpa(cot["logits"])
    w = transpose_last(mpa(params["table"])) if tied else mpa(params["w"])    # (D, L)
    x2, dl2 = x.reshape(-1, x.shape[-1]), dl.reshape(-1, w.shape[1])          # (N, D), (N, L)
    grads = {"table": matmul(transpose_last(dl2), x2)} if tied \
        else {"w": matmul(transpose_last(x2), dl2)}
    if "b" in params:
        grads["b"] = fsum_axes(dl2, (0,))
    return {"x": matmul(dl, transpose_last(w)).reshape(x.shape)}, grads


VJPS = {"embedding": embedding_vjp, "lm_head": lm_head_vjp}
