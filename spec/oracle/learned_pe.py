"""Learned (absolute) positional embedding: a table lookup.

    pe[..., :] = table[positions[...], :]        0 <= positions < max_len
"""

import numpy as np

from .core import mpa


def learned_pe(positions, params):
    table = mpa(params["table"])  # (max_len, D)
    positions = np.asarray(positions)
    pe = np.empty(positions.shape + (table.shape[1],), dtype=object)
    for idx in np.ndindex(positions.shape):
        for c in range(table.shape[1]):
            pe[idx + (c,)] = table[int(positions[idx]), c]
    return {"pe": pe}
