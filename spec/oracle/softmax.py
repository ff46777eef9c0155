"""softmax(x)_i = exp(x_i) / sum_j exp(x_j) over the kept entries of an axis."""

import numpy as np

from .core import mpa, rows, softmax_backward_row
from .core import softmax as _softmax


def softmax(x, mask=None, axis=-1):
    return {"y": _softmax(mpa(x), axis=axis, keep=mask)}


def softmax_vjp(cot, x, mask=None, axis=-1):
    y = _softmax(mpa(x), axis=axis, keep=mask)
    ym, dym = np.moveaxis(y, axis, -1), np.moveaxis(mpa(cot["y"]), axis, -1)
    dx = np.empty(ym.shape, dtype=object)
    for idx, row in rows(ym):
        dx[idx] = softmax_backward_row(row, list(dym[idx]))
    return {"x": np.moveaxis(dx, -1, axis)}, {}


VJPS = {"softmax": softmax_vjp}
