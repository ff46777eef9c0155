"""The sampling filters and the deterministic draw (spec/components/sampling.md)."""

from __future__ import annotations

import numpy as np
from attnspec.spec.errors import DomainError, DTypeError

from .. import _checks as check
from ._core import floating


def _kth(z, k: int):
    """(N, V) -> (N, 1): the k-th largest value of each row (counted with multiplicity)."""
    return -np.sort(-z, axis=-1)[:, k - 1:k]


def _softmax(z, keep):
    """softmax of z over the kept entries of each row, 0 elsewhere."""
    top = np.max(np.where(keep, z, -np.inf), axis=-1, keepdims=True)   # (N, 1)
    e = np.where(keep, np.exp(np.where(keep, z - top, 0)), 0)          # (N, V)
    return e / e.sum(axis=-1, keepdims=True)


def _top_p(z, keep, top_p, floor):
    """keep the tokens of probability >= the one whose mass above is still < top_p."""
    q = _softmax(z, keep)                                               # (N, V)
    desc = -np.sort(-q, axis=-1)                                        # (N, V)
    above = np.concatenate([np.zeros_like(desc[:, :1]), np.cumsum(desc, axis=-1)[:, :-1]], -1)
    r = (above < z.dtype.type(top_p)).sum(axis=-1, keepdims=True)        # (N, 1), >= 1
    threshold = np.take_along_axis(desc, r - 1, axis=-1)                 # (N, 1)
    return keep & ((q >= threshold) | (z >= floor))


def _min_p(z, keep, min_p, floor):
    q = _softmax(z, keep)                                               # (N, V)
    cut = z.dtype.type(min_p) * q.max(axis=-1, keepdims=True)          # (N, 1)
    return keep & ((q >= cut) | (z >= floor))


def _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    x = floating("logits", logits)                                      # (N, V)
    temperature, top_k, top_p, min_p, m = check.sampling(x.shape, temperature, top_k, top_p,
                                                         min_p, min_tokens_to_keep)
    z = x / x.dtype.type(temperature)
    floor = _kth(z, m)                                                  # (N, 1): always kept
    keep = np.ones(z.shape, dtype=bool) if top_k is None else z >= _kth(z, top_k)
    if top_p < 1:
        keep = _top_p(z, keep, top_p, floor)
    if min_p > 0:
        keep = _min_p(z, keep, min_p, floor)
    return _softmax(z, keep)


def sampling_filter(logits, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
                    min_tokens_to_keep=1):
    """probs (N, V): softmax(x / T) restricted by top-k, then top-p, then min-p (each on the
    survivors of the previous, renormalised), 0 for the removed tokens."""
    return _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep)


def sample(logits, u, *, temperature=1.0, top_k=None, top_p=1.0, min_p=0.0,
           min_tokens_to_keep=1):
    """ids (N,): min { j : F_j > u_n }, F the CDF of the filtered probabilities in id order
    (the last id of nonzero probability when rounding leaves every F_j <= u_n)."""
    q = _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep)  # (N, V)
    u = floating("u", u)
    if u.dtype != q.dtype:
        raise DTypeError(f"u has dtype {u.dtype} but logits has {q.dtype}")
    check.draws(u.shape, q.shape[0])
    if not np.all((u >= 0) & (u < 1)):
        raise DomainError(f"u must lie in [0, 1), got u = {u} (shape {u.shape})")
    v = q.shape[1]
    ids = (np.cumsum(q, axis=-1) <= u[:, None]).sum(axis=-1)             # (N,)
    last = v - 1 - np.argmax(q[:, ::-1] > 0, axis=-1)                   # (N,)
    return np.where(ids < v, ids, last).astype(np.int64)
