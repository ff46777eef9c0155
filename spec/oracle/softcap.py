"""Logit soft-capping (Gemma 2, Gemma Team 2024, section 2; Grok-1):

    softcap(x) = cap tanh(x / cap)

odd, increasing, |softcap(x)| < cap, softcap(x) ~ x for |x| << cap.
"""

import mpmath
import numpy as np

from .core import emap, mpa


def softcap(x, cap):
    c = mpmath.mpf(cap)
    return {"y": emap(lambda e: c * mpmath.tanh(e / c), mpa(x))}


def softcap_vjp(cot, x, cap):
    """y = cap tanh(x / cap):  dx = dy (1 - tanh^2(x / cap))."""
    c = mpmath.mpf(cap)
    x, dy = mpa(x), mpa(cot["y"])
    dx = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        t = mpmath.tanh(x[idx] / c)
        dx[idx] = dy[idx] * (1 - t * t)
    return {"x": dx}, {}


VJPS = {"softcap": softcap_vjp}
