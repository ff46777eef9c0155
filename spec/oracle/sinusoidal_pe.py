"""Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5), interleaved.

    PE(pos, 2i)   = sin(pos / 10000^(2i / D))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / D))          pos = offset + row

Column c uses frequency index i = floor(c / 2) and the actual width D, also when
D is odd: then the last column (c = D - 1, even) is a sin with exponent (D - 1) / D
and no cos partner.
"""

import mpmath

from .core import zeros


def sinusoidal_pe(length, d_model, offset=0):
    pe = zeros((length, d_model))
    for row in range(length):
        pos = mpmath.mpf(offset + row)
        for c in range(d_model):
            i = c // 2
            # angle = pos / 10000^(2i / D)
            angle = pos / mpmath.power(10000, mpmath.mpf(2 * i) / d_model)
            pe[row, c] = mpmath.sin(angle) if c % 2 == 0 else mpmath.cos(angle)
    return {"pe": pe}
