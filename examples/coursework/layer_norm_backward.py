"""LayerNorm's backward pass written by hand, checked with ``--grad`` against
the spec's gradient vectors. ``attnspec check --grad`` calls it with the
cotangent of the output first (``dy``), then the forward's arguments: the input
``x`` positionally, the parameters and attributes as keywords (``gamma``,
``beta``, ``eps``). It returns the gradients as a tuple, the input's first and
then the parameters' in the spec's order.

    attnspec check examples/coursework/layer_norm_backward.py:layer_norm_backward \
        --component layer_norm --grad

``layer_norm_backward_no_mean`` is the classic mistake: it treats the mean and
the variance as constants, so ``dx`` lacks the two terms that flow through them
(``dgamma`` and ``dbeta`` are still right, and pass).
"""

import numpy as np


# y = gamma * z + beta, z = (x - mean) / r, r = sqrt(var + eps), dz = dy * gamma:
#   dx = (dz - mean(dz) - z * mean(dz * z)) / r
#   dgamma = sum over rows of dy * z,  dbeta = sum over rows of dy
def layer_norm_backward(dy, x, gamma, beta, eps=1e-5):
    c = x - x.mean(axis=-1, keepdims=True)
    r = np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)
    z = c / r
    dz = dy * gamma
    dx = (dz - dz.mean(axis=-1, keepdims=True) - z * (dz * z).mean(axis=-1, keepdims=True)) / r
    rows = tuple(range(x.ndim - 1))
    return dx, (dy * z).sum(axis=rows), dy.sum(axis=rows)


def layer_norm_backward_no_mean(dy, x, gamma, beta, eps=1e-5):
    c = x - x.mean(axis=-1, keepdims=True)
    r = np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)
    rows = tuple(range(x.ndim - 1))
    return dy * gamma / r, (dy * c / r).sum(axis=rows), dy.sum(axis=rows)
