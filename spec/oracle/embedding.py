"""Token embedding and the output projection (LM head).

embedding:  y[..., d] = table[ids[...], d] * sqrt(D)   (scale=True, Vaswani et al. 2017 §3.4)
            y[..., d] = table[ids[...], d]             (scale=False)
lm_head:    logits = x W + b,        W (D, L), b (L,) optional
            logits = x table^T + b   (tied=True, table (L, D), Press & Wolf 2017)
"""

import mpmath
import numpy as np

from .core import add, matmul, mpa, transpose_last


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
