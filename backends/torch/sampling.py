"""The sampling filters and the deterministic draw (spec/components/sampling.md)."""

from __future__ import annotations

import torch
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import floating


def _kth(z, k: int):
    """(N, V) -> (N, 1): the k-th largest value of each row (counted with multiplicity)."""
    return torch.sort(z, dim=-1, descending=True).values[:, k - 1:k]


def _softmax(z, keep):
    """softmax of z over the kept entries of each row, 0 elsewhere."""
    top = torch.where(keep, z, float("-inf")).amax(dim=-1, keepdim=True)       # (N, 1)
    e = torch.where(keep, torch.exp(torch.where(keep, z - top, 0.0)), 0.0)      # (N, V)
    return e / e.sum(dim=-1, keepdim=True)


def _top_p(z, keep, top_p, floor):
    """keep the tokens of probability >= the one whose mass above is still < top_p."""
    q = _softmax(z, keep)                                                        # (N, V)
    desc = torch.sort(q, dim=-1, descending=True).values                         # (N, V)
    above = torch.cat([torch.zeros_like(desc[:, :1]), torch.cumsum(desc, dim=-1)[:, :-1]], -1)
    r = (above < top_p).sum(dim=-1, keepdim=True)                                # (N, 1), >= 1
    threshold = torch.gather(desc, -1, r - 1)                                    # (N, 1)
    return keep & ((q >= threshold) | (z >= floor))


def _min_p(z, keep, min_p, floor):
    q = _softmax(z, keep)                                                        # (N, V)
    cut = min_p * q.amax(dim=-1, keepdim=True)                                   # (N, 1)
    return keep & ((q >= cut) | (z >= floor))


def _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    x = floating("logits", logits)                                               # (N, V)
    temperature, top_k, top_p, min_p, m = check.sampling(tuple(x.shape), temperature, top_k,
                                                         top_p, min_p, min_tokens_to_keep)
    z = x / temperature
    floor = _kth(z, m)                                                           # (N, 1)
    keep = torch.ones_like(z, dtype=torch.bool) if top_k is None else z >= _kth(z, top_k)
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
    if not bool(((u >= 0) & (u < 1)).all()):
        raise DomainError(f"u must lie in [0, 1), got u = {u.tolist()} (shape {tuple(u.shape)})")
    v = q.shape[1]
    ids = (torch.cumsum(q, dim=-1) <= u[:, None]).sum(dim=-1)                    # (N,)
    last = v - 1 - torch.argmax((q.flip(-1) > 0).to(torch.int8), dim=-1)         # (N,)
    return torch.where(ids < v, ids, last).to(torch.int64)
