"""Sinusoidal positional encoding with all the sines first and all the cosines
after (tensor2tensor's layout): the same numbers in the wrong columns.

    attnspec check examples/coursework/pe_wrong.py:positional_encoding \
        --component sinusoidal_pe
"""

import numpy as np


def positional_encoding(length, d_model, offset=0):
    half = d_model // 2
    pos = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    div_term = np.exp(np.arange(half) * -(np.log(10000.0) * 2 / d_model))
    pe = np.concatenate([np.sin(pos * div_term), np.cos(pos * div_term)], axis=-1)
    if d_model % 2:  # odd width: one more sine column
        pe = np.concatenate([pe, np.sin(pos * 10000.0 ** (-(d_model - 1) / d_model))], axis=-1)
    return pe
