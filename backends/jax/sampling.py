"""The sampling filters and the deterministic draw (spec/components/sampling.md).

One ``jax.jit`` for the filters and one for the draw, compiled once per shape and dtype: the
attributes are traced scalars (a filter that is off is computed and not selected), so the
hypothesis examples' many attribute sets share a program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import concrete, floating, host


def _softmax(z, keep):
    """softmax of z over the kept entries of each row, 0 elsewhere."""
    top = jnp.max(jnp.where(keep, z, -jnp.inf), axis=-1, keepdims=True)          # (N, 1)
    e = jnp.where(keep, jnp.exp(jnp.where(keep, z - top, 0)), 0)                 # (N, V)
    return e / e.sum(axis=-1, keepdims=True)


def _top_p(z, keep, top_p, floor):
    """keep the tokens of probability >= the one whose mass above is still < top_p."""
    q = _softmax(z, keep)                                                        # (N, V)
    desc = -jnp.sort(-q, axis=-1)                                                # (N, V)
    above = jnp.concatenate([jnp.zeros_like(desc[:, :1]), jnp.cumsum(desc, axis=-1)[:, :-1]], -1)
    r = (above < top_p).sum(axis=-1, keepdims=True)                              # (N, 1), >= 1
    threshold = jnp.take_along_axis(desc, r - 1, axis=-1)                        # (N, 1)
    return keep & ((q >= threshold) | (z >= floor))


def _min_p(z, keep, min_p, floor):
    q = _softmax(z, keep)                                                        # (N, V)
    return keep & ((q >= min_p * q.max(axis=-1, keepdims=True)) | (z >= floor))


@jax.jit
def _probs(x, temperature, k, top_p, min_p, m):
    """k = V when top-k is off; top_p = 1 and min_p = 0 turn those filters off."""
    z = x / temperature                                                          # (N, V)
    desc = -jnp.sort(-z, axis=-1)                                                # (N, V)
    floor = jnp.take(desc, m - 1, axis=-1)[:, None]                              # (N, 1)
    keep = z >= jnp.take(desc, k - 1, axis=-1)[:, None]
    keep = jnp.where(top_p < 1, _top_p(z, keep, top_p, floor), keep)
    keep = jnp.where(min_p > 0, _min_p(z, keep, min_p, floor), keep)
    return _softmax(z, keep)


@jax.jit
def _draw(q, u):
    v = q.shape[1]
    ids = (jnp.cumsum(q, axis=-1) <= u[:, None]).sum(axis=-1)                    # (N,)
    last = v - 1 - jnp.argmax(q[:, ::-1] > 0, axis=-1)                           # (N,)
    return jnp.where(ids < v, ids, last).astype(jnp.int64)


def _filtered(logits, temperature, top_k, top_p, min_p, min_tokens_to_keep):
    x = floating("logits", logits)                                               # (N, V)
    temperature, top_k, top_p, min_p, m = check.sampling(x.shape, temperature, top_k, top_p,
                                                         min_p, min_tokens_to_keep)
    dt = x.dtype
    k = x.shape[1] if top_k is None else top_k
    return _probs(x, host(np.array(temperature, dt)), host(np.int32(k)),
                  host(np.array(top_p, dt)), host(np.array(min_p, dt)), host(np.int32(m)))


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
    check.draws(u.shape, q.shape[0])
    known = concrete(u)  # read on the host (no compile for the check); None under jax.jit
    if known is not None:
        got = np.asarray(known)
        if not np.all((got >= 0) & (got < 1)):
            raise DomainError(f"u must lie in [0, 1), got u = {got} (shape {got.shape})")
    return _draw(q, u)
