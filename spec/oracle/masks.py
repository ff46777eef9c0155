"""Attention masks: boolean, True = may attend.

    causal[i, j]   = j <= i + (S - T)          bottom-right aligned (KV-cache decoding)
    window[i, j]   = p - W < j <= p,  p = i + (S - T)   sliding window of W keys, bottom-right
    padding[b, j]  = ids[b, j] != pad_id       shaped (B, 1, 1, S)
    combined[b, h, i, j] = padding[b, j] and (causal[i, j] if causal else True)
"""

import numpy as np


def _causal(t: int, s: int) -> np.ndarray:
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        for j in range(s):
            # query i sits at absolute position i + (S - T) of the key sequence
            out[i, j] = j <= i + (s - t)
    return out


def causal_mask(t, s):
    return {"mask": _causal(int(t), int(s))}


def sliding_window_mask(t, s, window):
    t, s, w = int(t), int(s), int(window)
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        p = i + (s - t)  # the query's absolute position among the keys
        for j in range(s):
            out[i, j] = p - w < j <= p
    return {"mask": out}


def _padding(ids, pad_id) -> np.ndarray:
    ids = np.asarray(ids)
    b, s = ids.shape
    out = np.zeros((b, 1, 1, s), dtype=bool)
    for bi in range(b):
        for j in range(s):
            out[bi, 0, 0, j] = int(ids[bi, j]) != int(pad_id)
    return out


def padding_mask(ids, pad_id):
    return {"mask": _padding(ids, pad_id)}


def combined_mask(ids, pad_id, t, num_heads=1, causal=True):
    ids = np.asarray(ids)
    b, s = ids.shape
    t, h_count = int(t), int(num_heads)
    pad = _padding(ids, pad_id)
    cau = _causal(t, s) if causal else np.ones((t, s), dtype=bool)
    out = np.zeros((b, h_count, t, s), dtype=bool)
    for bi in range(b):
        for h in range(h_count):
            for i in range(t):
                for j in range(s):
                    out[bi, h, i, j] = bool(pad[bi, 0, 0, j]) and bool(cau[i, j])
    return {"mask": out}


# -- local windows (left, right) and chunked local attention (issue 22, item 5) --------
#
#   local[i, j]   = p - left <= j <= p + right,  p = i + (S - T)   (None: that side unbounded)
#   chunked[i, j] = floor(j / C) == floor(p / C)  and  (j <= p if causal)


def local_window_mask(t, s, left, right):
    t, s = int(t), int(s)
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        p = i + (s - t)  # the query's absolute position among the keys
        for j in range(s):
            after_left = left is None or j >= p - int(left)
            before_right = right is None or j <= p + int(right)
            out[i, j] = after_left and before_right
    return {"mask": out}


def chunked_mask(t, s, chunk, causal=True):
    t, s, c = int(t), int(s), int(chunk)
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        p = i + (s - t)
        for j in range(s):
            # Python's // floors: a position before key 0 (p < 0, T > S) is in no key's chunk
            same_chunk = j // c == p // c
            out[i, j] = same_chunk and (j <= p or not causal)
    return {"mask": out}
