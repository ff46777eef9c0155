"""Softmax's backward pass written by hand, returning a dict by input name
(``{"x": dx}``); ``attnspec check --grad`` calls it with the cotangent ``dy``,
then ``x``, and ``mask`` and ``axis`` as keywords.

    attnspec check examples/coursework/softmax_backward.py:softmax_backward \
        --component softmax --grad

``softmax_backward_no_subtraction`` forgets that every output depends on every
input of its row: it returns ``y * dy``, without the ``- y * sum(y * dy)`` term.
"""

import numpy as np


def softmax(x, mask=None, axis=-1):
    keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    s = np.where(keep, x, -np.inf)
    row_max = np.max(s, axis=axis, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0)), 0.0)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total == 0, 1.0, total)


# y = softmax(x):  dx = y * (dy - sum(y * dy))   (a masked entry has y = 0, so dx = 0)
def softmax_backward(dy, x, mask=None, axis=-1):
    y = softmax(x, mask, axis)
    return {"x": y * (dy - np.sum(y * dy, axis=axis, keepdims=True))}


def softmax_backward_no_subtraction(dy, x, mask=None, axis=-1):
    return {"x": softmax(x, mask, axis) * dy}
