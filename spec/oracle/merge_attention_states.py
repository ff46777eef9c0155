"""Merging attention states: the attention over all keys from the attention over the parts
of a split of the keys (flash-attn's split-KV combine, FlashInfer's merge_states, vLLM's
merge_attn_states), each part n given as its output o_n and its log-sum-exp lse_n:

    w_n    = softmax_n(lse_n)  = exp(lse_n - m) / sum_m' exp(lse_m' - m),  m = max_n lse_n
    output = sum_{n: w_n != 0} w_n o_n
    lse    = ln sum_n exp(lse_n)

per row (every index but the parts axis 0 and the value axis). The weights are the spec's
softmax over the parts: a part with lse_n = -inf (no key kept) gets weight exactly 0 and is
left out of the sum (its output, even NaN, is never multiplied in); every part -inf gives a
zero output and lse = -inf, sdpa's convention for a row with nothing to attend.
"""

import mpmath
import numpy as np

from .core import cotangent, mpa, softmax_row
from .sdpa_lse import lse_row


def _parts(lses, idx):
    return [lses[(n,) + idx] for n in range(lses.shape[0])]


def merge_attention_states(outputs, lses):
    o, s = mpa(outputs), mpa(lses)  # (N, ..., V), (N, ...)
    out = np.empty(o.shape[1:], dtype=object)  # (..., V)
    lse = np.empty(s.shape[1:], dtype=object)  # (...)
    for idx in np.ndindex(lse.shape):
        w = softmax_row(_parts(s, idx))
        for c in range(o.shape[-1]):
            out[idx + (c,)] = mpmath.fsum(w[n] * o[(n,) + idx + (c,)] for n in range(len(w))
                                          if w[n] != 0)
        lse[idx] = lse_row(_parts(s, idx))
    return {"output": out, "lse": lse}


def merge_attention_states_vjp(cot, outputs, lses):
    """With w = softmax(lse_n), O = sum_n w_n o_n, L = ln sum_n exp(lse_n):
        do_n   = w_n dO
        dlse_n = w_n (dO . (o_n - O)) + w_n dL
    A part of weight 0 (lse_n = -inf) gets no gradient.
    """
    o, s = mpa(outputs), mpa(lses)
    merged = merge_attention_states(outputs, lses)["output"]
    dO = cotangent(cot, "output", merged.shape)
    dL = cotangent(cot, "lse", s.shape[1:])
    do = np.empty(o.shape, dtype=object)
    ds = np.empty(s.shape, dtype=object)
    for idx in np.ndindex(s.shape[1:]):
        w = softmax_row(_parts(s, idx))
        for n, wn in enumerate(w):
            row = (n,) + idx
            for c in range(o.shape[-1]):
                do[row + (c,)] = wn * dO[idx + (c,)]
            if wn == 0:
                ds[row] = mpmath.mpf(0)
                continue
            dot = mpmath.fsum(dO[idx + (c,)] * (o[row + (c,)] - merged[idx + (c,)])
                              for c in range(o.shape[-1]))
            ds[row] = wn * (dot + dL[idx])
    return {"outputs": do, "lses": ds}, {}


VJPS = {"merge_attention_states": merge_attention_states_vjp}
