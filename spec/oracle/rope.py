"""Rotary position embedding (Su et al. 2021, RoFormer), x of shape (..., T, K), K even.

Row t of x sits at position p = offset + t; theta_i = base^(-2i / K), i = 0..K/2-1.
Each pair (a, b) of features is rotated by the angle p * theta_i:

    y_a = x_a cos(p theta_i) - x_b sin(p theta_i)
    y_b = x_a sin(p theta_i) + x_b cos(p theta_i)

convention "interleaved": pair i is (2i, 2i + 1)   (RoFormer paper, GPT-J, Meta's LLaMA)
convention "half":        pair i is (i, i + K/2)   (GPT-NeoX, Hugging Face rotate_half)

rotary_dim R (None: K): only features 0..R-1 are rotated, as above with K replaced by R
(theta_i = base^(-2i/R), pairs within the first R features); features R..K-1 pass through
(GPT-NeoX rotary_pct, Phi partial_rotary_factor, Falcon).
scaling (a dict of rope_frequencies' attributes: transformers' rope_parameters): theta_i is
rope_frequencies(head_dim=R, base=base, seq_len=offset + T, **scaling)'s inv_freq, and its
attention factor m multiplies cos and sin (transformers' attention_scaling):
    y_a = m (x_a cos - x_b sin),   y_b = m (x_a sin + x_b cos)
"""

import mpmath
import numpy as np

from .core import mpa
from .rope_frequencies import rope_frequencies


def rope(x, offset=0, base=10000.0, convention="interleaved", rotary_dim=None, scaling=None):
    return {"y": _rotate(mpa(x), offset, base, convention, 1, rotary_dim, scaling)}


def rope_vjp(cot, x, offset=0, base=10000.0, convention="interleaved", rotary_dim=None,
             scaling=None):
    """y = m R x on the first R features (identity on the rest), R the rotation of each pair
    (a, b) by the angle p theta_i; R is orthogonal, so dx = m R^T dy there, the rotation by the
    opposite angle, and dx = dy on the pass-through features:
        dx_a = m (dy_a cos + dy_b sin),   dx_b = m (-dy_a sin + dy_b cos)
    """
    return {"x": _rotate(mpa(cot["y"]), offset, base, convention, -1, rotary_dim, scaling)}, {}


def _theta(base, r, t_len, offset, scaling):
    """(theta_0..theta_{R/2-1}, m): the default base^(-2i/R) and m = 1 without scaling."""
    if scaling is None:
        theta = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / r) for i in range(r // 2)]
        return theta, mpmath.mpf(1)
    freq = rope_frequencies(head_dim=r, base=base, **{"seq_len": offset + t_len, **scaling})
    return list(freq["inv_freq"]), freq["attention_factor"][()]


def _rotate(x, offset, base, convention, sign, rotary_dim=None, scaling=None):
    """Each pair (a, b) of x's first R features rotated by sign * p theta_i and scaled by m
    (sign -1: the transpose); the features R..K-1 copied."""
    t_len, kw = x.shape[-2], x.shape[-1]
    r = kw if rotary_dim is None else rotary_dim
    half = r // 2
    theta, m = _theta(base, r, t_len, offset, scaling)
    y = x.copy()
    for idx in np.ndindex(x.shape[:-2]):
        for t in range(t_len):
            p = mpmath.mpf(offset + t)
            for i in range(half):
                a, b = (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + half)
                angle = p * theta[i]  # p * base^(-2i / R) without scaling
                cos, sin = m * mpmath.cos(angle), m * sign * mpmath.sin(angle)
                xa, xb = x[idx + (t, a)], x[idx + (t, b)]
                y[idx + (t, a)] = xa * cos - xb * sin
                y[idx + (t, b)] = xa * sin + xb * cos
    return y


VJPS = {"rope": rope_vjp}
