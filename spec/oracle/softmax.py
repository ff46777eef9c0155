"""softmax(x)_i = exp(x_i) / sum_j exp(x_j) over the kept entries of an axis."""

from .core import mpa
from .core import softmax as _softmax


def softmax(x, mask=None, axis=-1):
    return {"y": _softmax(mpa(x), axis=axis, keep=mask)}
