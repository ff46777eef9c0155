"""Attention core: softmax, masks, scaled dot-product, additive, Luong,
self- and multi-head attention, top-k attention, attention entropy."""

from __future__ import annotations

import numpy as np

from .. import _checks as check
from ._core import boolean, floating


def softmax(x, mask=None, *, axis=-1):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max over kept entries.

    Masked entries (mask False) get weight 0; a slice with nothing kept is all 0.
    """
    x = floating("x", x)
    s = check.rank("x", x, min_rank=1)
    axis = check.integer("axis", axis, lo=-len(s), hi=len(s) - 1)
    if mask is None:
        keep = np.ones(s, dtype=bool)
    else:
        keep = boolean("mask", mask)
        check.broadcastable("mask", keep, s)
        keep = np.broadcast_to(keep, s)
    keep = keep & (x != -np.inf)
    m = np.max(np.where(keep, x, -np.inf), axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(keep, np.exp(np.where(keep, x - m, 0)), 0)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1)
