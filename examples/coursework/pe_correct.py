"""Sinusoidal positional encoding, interleaved as in the paper
(sin in the even columns, cos in the odd ones).

    attnspec check examples/coursework/pe_correct.py:positional_encoding \
        --component sinusoidal_pe
"""

import numpy as np


def positional_encoding(length, d_model, offset=0):
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]   # (length, 1)
    i = np.arange(d_model)[None, :]                                       # (1, D)
    angle = pos / np.power(10000.0, (2 * (i // 2)) / d_model)             # (length, D)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
