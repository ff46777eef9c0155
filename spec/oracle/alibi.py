"""ALiBi, attention with linear biases (Press, Smith and Lewis 2022, section 3):

    bias[h, i, j] = -m_h (p_i - j),   p_i = i + (S - T)     (bottom-right aligned)

head slopes: for H a power of two, m_h = 2^(-8 (h + 1) / H), h = 0 .. H-1 (a geometric
sequence starting at and with ratio 2^(-8/H)); otherwise, with P the largest power of two
below H, the P slopes of P heads followed by the first H - P of the even-indexed slopes
(0, 2, 4, ...) of 2P heads (the authors' get_slopes).
"""

import mpmath

from .core import zeros


def slopes(n: int) -> list:
    """The paper's head slopes, exact to the working precision."""
    p = 1 << (n.bit_length() - 1)                     # largest power of two <= n
    ratio = mpmath.power(2, mpmath.mpf(-8) / p)
    first = [ratio ** (h + 1) for h in range(p)]
    if p == n:
        return first
    return first + slopes(2 * p)[0::2][:n - p]


def alibi_bias(num_heads, t, s):
    m = slopes(int(num_heads))
    out = zeros((num_heads, t, s))
    for h in range(num_heads):
        for i in range(t):
            p = i + (s - t)  # the query's absolute position among the keys
            for j in range(s):
                out[h, i, j] = -m[h] * (p - j)
    return {"bias": out}
