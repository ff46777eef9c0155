"""Rotary position embedding (Su et al. 2021, RoFormer), x of shape (..., T, K), K even.

Row t of x sits at position p = offset + t; theta_i = base^(-2i / K), i = 0..K/2-1.
Each pair (a, b) of features is rotated by the angle p * theta_i:

    y_a = x_a cos(p theta_i) - x_b sin(p theta_i)
    y_b = x_a sin(p theta_i) + x_b cos(p theta_i)

convention "interleaved": pair i is (2i, 2i + 1)   (RoFormer paper, GPT-J, Meta's LLaMA)
convention "half":        pair i is (i, i + K/2)   (GPT-NeoX, Hugging Face rotate_half)
"""

import mpmath
import numpy as np

from .core import mpa


def rope(x, offset=0, base=10000.0, convention="interleaved"):
    return {"y": _rotate(mpa(x), offset, base, convention, 1)}


def rope_vjp(cot, x, offset=0, base=10000.0, convention="interleaved"):
    """y = R x with R the rotation of each pair (a, b) by the angle p theta_i; R is
    orthogonal, so dx = R^T dy, the rotation by the opposite angle:
        dx_a =  dy_a cos + dy_b sin,   dx_b = -dy_a sin + dy_b cos
    """
    return {"x": _rotate(mpa(cot["y"]), offset, base, convention, -1)}, {}


def _rotate(x, offset, base, convention, sign):
    """Each pair (a, b) of x rotated by sign * p theta_i (sign -1: the transpose)."""
    t_len, kw = x.shape[-2], x.shape[-1]
    half = kw // 2
    y = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-2]):
        for t in range(t_len):
            p = mpmath.mpf(offset + t)
            for i in range(half):
                a, b = (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + half)
                # angle = p * base^(-2i / K)
                angle = p * mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / kw)
                cos, sin = mpmath.cos(angle), sign * mpmath.sin(angle)
                xa, xb = x[idx + (t, a)], x[idx + (t, b)]
                y[idx + (t, a)] = xa * cos - xb * sin
                y[idx + (t, b)] = xa * sin + xb * cos
    return y


VJPS = {"rope": rope_vjp}
