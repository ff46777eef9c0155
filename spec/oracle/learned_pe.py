"""Learned (absolute) positional embedding: a table lookup.

    pe[..., :] = table[positions[...], :]        0 <= positions < max_len
"""

import numpy as np

from .core import mpa
from .embedding import embedding_vjp


def learned_pe(positions, params):
    table = mpa(params["table"])  # (max_len, D)
    positions = np.asarray(positions)
    pe = np.empty(positions.shape + (table.shape[1],), dtype=object)
    for idx in np.ndindex(positions.shape):
        for c in range(table.shape[1]):
            pe[idx + (c,)] = table[int(positions[idx]), c]
    return {"pe": pe}


def learned_pe_vjp(cot, positions, params=None):
    """pe[n] = table[positions[n]]: dtable[m] = sum over the n with positions[n] = m of dpe[n]."""
    gi, gp = embedding_vjp({"y": cot["pe"]}, positions, scale=False, params=params)
    return gi, gp


VJPS = {"learned_pe": learned_pe_vjp}
