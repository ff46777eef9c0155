"""T5's bucketed relative position bias (Raffel et al. 2020, section 2.1; Mesh TensorFlow's
_relative_position_bucket, transformers' T5Attention._relative_position_bucket):

    bias[h, i, j] = table[bucket(j - (offset + i)), h]        query i at offset + i, key j at j

bucket(r), r = key position - query position, with N = num_buckets, M = max_distance:

    bidirectional:  N' = floor(N / 2), base = N' if r > 0 else 0, n = |r|
    causal:         N' = N,            base = 0,                   n = max(-r, 0)
    E = floor(N' / 2)   (the exact buckets)
    bucket = base + n                                                            if n < E
    bucket = base + min(N' - 1, E + floor(log(n / E) / log(M / E) * (N' - E)))  if n >= E

The floor is exact: E + k with k the largest integer such that (n / E)^(N' - E) >= (M / E)^k,
decided here on Python integers (n^(N'-E) E^k >= M^k E^(N'-E)), never by a rounded log.
"""

import mpmath
import numpy as np

from .core import mpa, zeros


def log_bucket(n: int, exact: int, half: int, max_distance: int) -> int:
    """min(N' - 1, E + floor(log(n / E) / log(M / E) * (N' - E))) for n >= E, exactly."""
    width = half - exact
    k = 0
    while k < width and n ** width * exact ** (k + 1) >= max_distance ** (k + 1) * exact ** width:
        k += 1
    return min(half - 1, exact + k)


def bucket(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    if bidirectional:
        half = num_buckets // 2
        base, n = (half if r > 0 else 0), abs(r)
    else:
        half, base, n = num_buckets, 0, max(-r, 0)
    exact = half // 2
    if n < exact:
        return base + n
    return base + log_bucket(n, exact, half, max_distance)


def buckets(t, s, bidirectional, num_buckets, max_distance, offset) -> np.ndarray:
    """The (T, S) bucket indices (Python ints)."""
    out = np.zeros((t, s), dtype=np.int64)
    for i in range(t):
        for j in range(s):
            out[i, j] = bucket(j - (offset + i), bidirectional, num_buckets, max_distance)
    return out


def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
    table = mpa(params["table"])  # (N, H)
    idx = buckets(t, s, bidirectional, num_buckets, max_distance, offset)
    out = zeros((table.shape[1], t, s))
    for h in range(table.shape[1]):
        for i in range(t):
            for j in range(s):
                out[h, i, j] = table[int(idx[i, j]), h]
    return {"bias": out}


def t5_bias_vjp(cot, *, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0,
                params=None):
    """bias[h, i, j] = table[b_ij, h]:  dtable[b, h] = sum over (i, j) with b_ij = b of
    dbias[h, i, j] (a scatter-add; buckets never read get 0)."""
    table = np.asarray(params["table"])
    idx = buckets(t, s, bidirectional, num_buckets, max_distance, offset)
    dbias = mpa(cot["bias"])
    terms = [[[] for _ in range(table.shape[1])] for _ in range(table.shape[0])]
    for h in range(table.shape[1]):
        for i in range(t):
            for j in range(s):
                terms[int(idx[i, j])][h].append(dbias[h, i, j])
    g = zeros(table.shape)
    for b in range(table.shape[0]):
        for h in range(table.shape[1]):
            g[b, h] = mpmath.fsum(terms[b][h])
    return {}, {"table": g}


VJPS = {"t5_bias": t5_bias_vjp}
