"""The sampling filters and the deterministic draw (spec/components/sampling.md)."""

from __future__ import annotations

import mlx.core as mx
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating
from .ops import value_check


def _kth(z, k: int):
    """(N, V) -> (N, 1): the k-th largest value of each row (counted with multiplicity)."""
    return -mx.sort(-z, axis=-1)[:, k - 1:k]


def _softmax(z, keep):
    """softmax of z over the kept entries of each row, 0 elsewhere."""
    zero = mx.zeros_like(z)
    top = mx.max(mx.where(keep, z, mx.array(float("-inf"), dtype=z.dtype)), axis=-1,
                 keepdims=True)                                                  # (N, 1)
    e = mx.where(keep, mx.exp(mx.where(keep, z - top, zero)), zero)              # (N, V)
    return e / e.sum(axis=-1, keepdims=True)


def _top_p(z, keep, top_p, floor):
    """keep the tokens of probability >= the one whose mass above is still < top_p."""
    q = _softmax(z, keep)                                                        # (N, V)
    desc = -mx.sort(-q, axis=-1)                                                 # (N, V)
    above = mx.concatenate([mx.zeros_like(desc[:, :1]), mx.cumsum(desc, axis=-1)[:, :-1]], -1)
    r = (above < mx.array(top_p, dtype=z.dtype)).astype(mx.int32).sum(axis=-1, keepdims=True)
    threshold = mx.take_along_axis(desc, r - 1, axis=-1)                         # (N, 1)
    return keep & ((q >= threshold) | (z >= floor))


def _min_p(z, keep, min_p, floor):
    q = _softmax(z, keep)                                                        # (N, V)
    cut = mx.array(min_p, dtype=z.dtype) * q.max(axis=-1, keepdims=True)         # (N, 1)
    return keep & ((q >= cut) | (z >= floor))


def _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    x = floating("logits", logits)                                               # (N, V)
    temperature, top_k, top_p, min_p, m = check.sampling(tuple(x.shape), temperature, top_k,
                                                         top_p, min_p, min_tokens_to_keep)
    z = x / mx.array(temperature, dtype=x.dtype)
    floor = _kth(z, m)                                                           # (N, 1)
    keep = mx.ones(z.shape, dtype=mx.bool_) if top_k is None else z >= _kth(z, top_k)
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
    u = floating("u", u, q)
    check.draws(tuple(u.shape), q.shape[0])
    value_check(mx.all((u >= 0) & (u < 1)),
                lambda got: f"u must lie in [0, 1), got u = {got} (shape {got.shape})", u,
                error=DomainError)
    v = q.shape[1]
    ids = (mx.cumsum(q, axis=-1) <= u[:, None]).astype(mx.int64).sum(axis=-1)    # (N,)
    last = v - 1 - mx.argmax((q[:, ::-1] > 0).astype(mx.int32), axis=-1)        # (N,)
    return mx.where(ids < v, ids, last.astype(mx.int64))
