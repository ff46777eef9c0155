"""Inverted dropout with an explicit keep mask (deterministic form):

    y_i = x_i / (1 - p)   where keep_i is True,
    y_i = 0               where keep_i is False;
    p = 0: y = x (nothing is ever dropped; keep_mask is ignored).
"""

import mpmath
import numpy as np

from .core import mpa


def dropout(x, keep_mask=None, p=0.0, seed=None):
    x = mpa(x)
    p = mpmath.mpf(p)
    if p == 0:
        return {"y": x}
    keep = np.broadcast_to(np.asarray(keep_mask, dtype=bool), x.shape)
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        y[idx] = x[idx] / (1 - p) if keep[idx] else mpmath.mpf(0)
    return {"y": y}


def dropout_vjp(cot, x, keep_mask=None, p=0.0, seed=None):
    """y = keep x / (1 - p):  dx = keep dy / (1 - p) (p = 0: dx = dy); only with keep_mask."""
    dy = mpa(cot["y"])
    if p == 0:
        return {"x": dy}, {}
    if keep_mask is None:
        raise NotImplementedError("dropout_vjp needs the keep mask")
    keep = np.broadcast_to(np.asarray(keep_mask), dy.shape)
    scale = 1 / (1 - mpmath.mpf(p))
    dx = np.empty(dy.shape, dtype=object)
    for idx in np.ndindex(dy.shape):
        dx[idx] = dy[idx] * scale if keep[idx] else mpmath.mpf(0)
    return {"x": dx}, {}


VJPS = {"dropout": dropout_vjp}
