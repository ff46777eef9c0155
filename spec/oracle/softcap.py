"""Logit soft-capping (Gemma 2, Gemma Team 2024, section 2; Grok-1):

    softcap(x) = cap tanh(x / cap)

odd, increasing, |softcap(x)| < cap, softcap(x) ~ x for |x| << cap.
"""

import mpmath

from .core import emap, mpa


def softcap(x, cap):
    c = mpmath.mpf(cap)
    return {"y": emap(lambda e: c * mpmath.tanh(e / c), mpa(x))}
