"""Attention over a paged key/value cache (vLLM's block_tables, flash-attn's block_table,
FlashInfer's kv_indices), and the decoding step that appends to it:

    P = page_size, L_b = seq_lens[b], T new queries per sequence
    slot(b, j)     = (block_table[b, j // P], j % P)          key j of sequence b, 0 <= j < L_b
    position(b, t) = L_b - T + t                              the queries are the last T
    output[b, t, h] = sum_{j kept} w_j v_cache[slot(b, j), g],   g = h // (H / H_kv)
    w = softmax_j(scale q[b, t, h] . k_cache[slot(b, j), g])  over j < L_b
                                                              (causal: j <= position(b, t))
Block-table entries past ceil(L_b / P) are never read; a row with no key kept is zero.
"""

import mpmath
import numpy as np

from .core import mpa
from .sdpa import sdpa as sdpa_oracle
from .sdpa import sdpa_vjp


def slots(block_table, seq_lens, page: int, b: int) -> list:
    """The (block, offset) of each key j < L_b of sequence b, in logical order."""
    return [(int(block_table[b][j // page]), j % page) for j in range(int(seq_lens[b]))]


def gathered(cache, where: list) -> np.ndarray:
    """(num_blocks, P, H_kv, D) at the slots -> (H_kv, L, D)."""
    h, d = cache.shape[2], cache.shape[3]
    out = np.empty((h, len(where), d), dtype=object)
    for j, (blk, off) in enumerate(where):
        out[:, j, :] = cache[blk, off]
    return out


def keep_of(n: int, t: int, causal: bool) -> np.ndarray:
    """(T, L) bool: key j is seen by query i unless causal and j > L - T + i."""
    return np.array([[not causal or j <= n - t + i for j in range(n)] for i in range(t)],
                    dtype=bool).reshape(t, n)


def per_sequence(q, k_cache, v_cache, block_table, seq_lens, b, causal):
    """sdpa's arguments for sequence b: q (H, T, K), k (H_kv, L, K), v (H_kv, L, V), mask."""
    where = slots(block_table, seq_lens, k_cache.shape[1], b)
    return (np.transpose(q[b], (1, 0, 2)), gathered(k_cache, where), gathered(v_cache, where),
            keep_of(len(where), q.shape[1], causal), where)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=None, causal=False):
    q, k_cache, v_cache = mpa(q), mpa(k_cache), mpa(v_cache)  # (B, T, H, K), (N, P, H_kv, .)
    b_, t, h, _ = q.shape
    out = np.empty((b_, t, h, v_cache.shape[-1]), dtype=object)
    for b in range(b_):
        qb, kb, vb, keep, _ = per_sequence(q, k_cache, v_cache, block_table, seq_lens, b, causal)
        o = sdpa_oracle(qb, kb, vb, mask=keep, scale=scale,
                        num_kv_heads=k_cache.shape[2])["output"]  # (H, T, V)
        out[b] = np.transpose(o, (1, 0, 2))
    return {"output": out}  # (B, T, H, V)


def paged_attention_vjp(cot, q, k_cache, v_cache, block_table, seq_lens, scale=None,
                        causal=False):
    """Per sequence, sdpa's backward on the gathered keys; a cache slot's gradient is the sum
    over every (sequence, position) that reads it (a shared page gets both sequences'):
        dq[b] = sdpa's dq,  dk_cache[slot(b, j)] += dk_b[j],  dv_cache[slot(b, j)] += dv_b[j]
    Slots never read get zero."""
    q, k_cache, v_cache = mpa(q), mpa(k_cache), mpa(v_cache)
    dO = mpa(cot["output"])  # (B, T, H, V)
    dq = np.full(q.shape, mpmath.mpf(0), dtype=object)
    dk = np.full(k_cache.shape, mpmath.mpf(0), dtype=object)
    dv = np.full(v_cache.shape, mpmath.mpf(0), dtype=object)
    for b in range(q.shape[0]):
        qb, kb, vb, keep, where = per_sequence(q, k_cache, v_cache, block_table, seq_lens, b,
                                               causal)
        g, _ = sdpa_vjp({"output": np.transpose(dO[b], (1, 0, 2))}, qb, kb, vb, mask=keep,
                        scale=scale, num_kv_heads=k_cache.shape[2])
        dq[b] = np.transpose(g["q"], (1, 0, 2))
        for j, (blk, off) in enumerate(where):
            for hk in range(k_cache.shape[2]):
                dk[blk, off, hk] = dk[blk, off, hk] + g["k"][hk, j]
                dv[blk, off, hk] = dv[blk, off, hk] + g["v"][hk, j]
    return {"q": dq, "k_cache": dk, "v_cache": dv}, {}


def paged_kv_append(k_cache, v_cache, block_table, seq_lens, k, v):
    """k_cache'[slot(b, L_b + t)] = k[b, t] (and v), t < T; every other slot unchanged;
    seq_lens' = seq_lens + T. The inputs are not modified."""
    kc, vc = mpa(k_cache).copy(), mpa(v_cache).copy()  # (N, P, H_kv, K), (N, P, H_kv, V)
    k, v = mpa(k), mpa(v)  # (B, T, H_kv, K), (B, T, H_kv, V)
    page, t = kc.shape[1], k.shape[1]
    for b in range(k.shape[0]):
        for i in range(t):
            p = int(seq_lens[b]) + i
            blk, off = int(block_table[b][p // page]), p % page
            kc[blk, off], vc[blk, off] = k[b, i], v[b, i]
    lens = np.asarray(seq_lens, dtype=np.int64) + t
    return {"k_cache": kc, "v_cache": vc, "seq_lens": lens}


VJPS = {"paged_attention": paged_attention_vjp}
