"""Scaled dot-product attention's backward pass written by hand. sdpa has two
outputs, so ``attnspec check --grad`` passes two cotangents first:
``d_output`` and ``d_weights`` (zeros when a vector differentiates the output
only), then ``q, k, v`` and, as keywords, ``mask``, ``bias`` and ``scale``.
It returns ``(dq, dk, dv, dbias)``: the float inputs in the spec's order (the
boolean mask has no gradient), ``dbias`` only when a bias was given.

    attnspec check examples/coursework/attention_backward.py:sdpa_backward \
        --component sdpa --grad
"""

import numpy as np
from softmax_backward import softmax  # the file next to this one


def unbroadcast(g, shape):
    """Sum a gradient back over the axes its input was broadcast along."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


# S = c q k^T + bias, W = softmax(S), O = W v:
#   dW' = dO v^T + dW,  dS = W * (dW' - rowsum(dW' * W)),
#   dq = c dS k,  dk = c dS^T q,  dv = W^T dO,  dbias = dS
def sdpa_backward(d_output, d_weights, q, k, v, mask=None, bias=None, scale=None):
    c = q.shape[-1] ** -0.5 if scale is None else scale  # a Python float keeps the dtype
    s = c * q @ np.swapaxes(k, -1, -2) + (0.0 if bias is None else bias)
    w = softmax(s, None if mask is None else np.broadcast_to(mask, s.shape))
    dw = d_output @ np.swapaxes(v, -1, -2) + d_weights
    ds = w * (dw - np.sum(dw * w, axis=-1, keepdims=True))
    dq = unbroadcast(c * ds @ k, q.shape)
    dk = unbroadcast(c * np.swapaxes(ds, -1, -2) @ q, k.shape)
    dv = unbroadcast(np.swapaxes(w, -1, -2) @ d_output, v.shape)
    return dq, dk, dv, (None if bias is None else unbroadcast(ds, np.shape(bias)))
