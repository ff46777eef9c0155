"""Losses: softmax cross-entropy with an ignore index and label smoothing. Gradients come
from ``jax.vjp`` (the backend's ``vjp``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import DomainError

from .. import _checks as check
from ._core import array, floating, host


@functools.partial(jax.jit, static_argnames=("eps", "reduction"))
def _cross_entropy(z, t, counted, eps, reduction):
    """loss_i = -sum_c q_c log softmax(z_i)_c,  q = (1 - eps) onehot(t_i) + eps / L."""
    L = z.shape[-1]
    onehot = jax.nn.one_hot(t, L, dtype=z.dtype)                              # (..., L)
    q = jnp.where(counted[..., None], (1 - eps) * onehot + eps / L, 0).astype(z.dtype)
    per = -jnp.sum(q * jax.nn.log_softmax(z, axis=-1), axis=-1)               # (...,)
    if reduction == "none":
        return per
    total = jnp.sum(per)
    return total if reduction == "sum" else total / jnp.sum(counted).astype(z.dtype)


def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """Mean over the tokens whose target is not ignore_index (NaN for none), sum, or none."""
    z = floating("logits", logits)
    t = np.asarray(array("targets", targets))  # class indices: checked on the host
    ignore, eps, reduction = check.cross_entropy_args(tuple(z.shape), t.shape, t.dtype.kind,
                                                      ignore_index, label_smoothing, reduction)
    counted = t != ignore
    bad = counted & ((t < 0) | (t >= z.shape[-1]))
    if bad.any():
        raise DomainError(f"targets must be class indices in [0, {z.shape[-1]}) or "
                          f"ignore_index={ignore}; got {t[bad].ravel()[0]} (targets of shape "
                          f"{t.shape}, logits of shape {tuple(z.shape)})")
    return _cross_entropy(z, host(np.where(counted, t, 0)), host(counted),
                          eps, reduction)
