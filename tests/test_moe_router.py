"""Planted bugs in moe_router (forward and backward) that the vectors must catch at every
dtype."""

import functools

import numpy as np
import pytest
from attnspec.backends.numpy import moe

from .mutants import assert_rejected, gradient_rejections, mutant
from .test_mutants_grad import assert_gradient_bug_fails


def _ranked_high(s):
    """Ties to the highest id: a stable sort of the reversed columns."""
    e = s.shape[-1]
    return e - 1 - np.argsort(-s[:, ::-1], axis=-1, kind="stable")


def _planted_select(s, top_k, n_group, topk_group, group_score="sum_top2", *, rank=moe._ranked,
                    group_max=False, group_sum=False, group_s=None):
    """The router's choice with a planted bug: another ranking, a group scored by its
    maximum instead of the sum of its top two (or the sum where the max is meant), groups
    scored on other scores (group_s) than the experts."""
    n, e = s.shape
    if n_group > 1:
        gs = s if group_s is None else group_s
        grouped = np.sort(gs.reshape(n, n_group, e // n_group), axis=-1)  # (N, G, E/G)
        top2 = (group_score == "sum_top2" or group_sum) and not group_max
        g = grouped[..., -1] + grouped[..., -2] if top2 else grouped[..., -1]
        chosen = rank(g)[:, :topk_group]
        allowed = np.zeros((n, n_group), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        s = np.where(np.repeat(allowed, e // n_group, axis=-1), s, -np.inf)
    return rank(s)[:, :top_k]


SELECT = {"group_max": functools.partial(_planted_select, group_max=True),
          "group_sum_where_max": functools.partial(_planted_select, group_sum=True),
          "ties_to_highest_id": functools.partial(_planted_select, rank=_ranked_high)}


def _router(logits, correction_bias=None, *, top_k, scoring="softmax", renormalize=False,
            eps=1e-20, n_group=1, topk_group=1, routed_scaling_factor=1.0,
            group_score="sum_top2", bug):
    x = np.asarray(logits, np.float64)
    b = np.zeros(x.shape[-1]) if correction_bias is None else np.asarray(correction_bias)
    p = moe._scores(x, scoring)
    select = SELECT.get(bug, moe._select)
    if bug == "group_score_without_bias":
        select = functools.partial(_planted_select, group_s=p)
    idx = select(p + b, top_k, n_group, topk_group, group_score)
    w = np.take_along_axis(p, idx, axis=-1)
    if bug == "raw_logits":
        w = np.take_along_axis(x, idx, axis=-1)
    if bug == "softmax_of_top_k":
        w = moe._scores(np.take_along_axis(x, idx, axis=-1), scoring)
    if bug == "bias_in_weights":
        w = w + b[idx]
    norm = {"always_renormalised": True, "never_renormalised": False}.get(bug, renormalize)
    if norm:
        w = w / (w.sum(axis=-1, keepdims=True) + eps)
    scale = 1.0 if bug == "scale_ignored" else routed_scaling_factor
    return w * scale, idx


BUGS = {name: functools.partial(_router, bug=name)
        for name in ("raw_logits", "softmax_of_top_k", "bias_in_weights", "always_renormalised",
                     "never_renormalised", "scale_ignored", "group_max", "ties_to_highest_id",
                     "group_sum_where_max", "group_score_without_bias")}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_moe_router_mutant_is_rejected(bug):
    assert_rejected(mutant(moe_router=BUGS[bug]), "moe_router")


def test_moe_router_sketch_without_a_bug_passes():
    """The sketch the bugs are planted in passes every vector (so a rejection is the bug's)."""
    from .mutants import rejections
    fails = rejections(mutant(moe_router=functools.partial(_router, bug=None)),
                       "moe_router")
    assert fails == dict.fromkeys(fails, 0)


def vjp_renormalisation_ignored(cotangents, logits, correction_bias=None, **attrs):
    """The backward of the renormalisation left out (w/S differentiated as w/const)."""
    return moe.moe_router_vjp(cotangents, logits, correction_bias,
                              **{**attrs, "renormalize": False})


def vjp_cotangents_to_sorted_ids(cotangents, logits, correction_bias=None, **attrs):
    """The cotangents scattered to the chosen experts in ascending id, not in the order of
    the weights."""
    _, idx = moe.moe_router(logits, correction_bias, **attrs)
    return _vjp_at(cotangents, logits, correction_bias, np.sort(idx, axis=-1), attrs)


def _vjp_at(cotangents, logits, correction_bias, idx, attrs):
    real = moe._select
    moe._select = lambda s, top_k, n_group, topk_group: idx
    try:
        return moe.moe_router_vjp(cotangents, logits, correction_bias, **attrs)
    finally:
        moe._select = real


def vjp_scale_ignored(cotangents, logits, correction_bias=None, **attrs):
    return moe.moe_router_vjp(cotangents, logits, correction_bias,
                              **{**attrs, "routed_scaling_factor": 1.0})


GRAD_BUGS = {"renormalisation_ignored": vjp_renormalisation_ignored,
             "cotangents_to_sorted_ids": vjp_cotangents_to_sorted_ids,
             "scale_ignored": vjp_scale_ignored}


@pytest.mark.parametrize("bug", sorted(GRAD_BUGS))
def test_moe_router_backward_bug_fails_at_every_dtype(bug):
    assert_gradient_bug_fails(mutant(moe_router_vjp=GRAD_BUGS[bug]), "moe_router")


def test_moe_router_correct_backward_passes():
    fails = gradient_rejections(mutant(), "moe_router")
    assert fails == dict.fromkeys(fails, 0)


@pytest.mark.parametrize("attrs", [
    {"top_k": 2, "renormalize": True},
    {"top_k": 3},
    {"top_k": 4, "scoring": "sigmoid", "renormalize": True, "n_group": 4, "topk_group": 2,
     "routed_scaling_factor": 2.5},
    {"top_k": 2, "n_group": 4, "topk_group": 2, "group_score": "max",
     "routed_scaling_factor": 16.0},
], ids=["softmax-renormalised", "softmax", "sigmoid-grouped", "softmax-group-max"])
def test_moe_router_oracle_vjp_matches_central_differences(attrs):
    """The oracle's backward against 50-digit central differences of its forward (the choice
    is locally constant on these well-separated logits), the bias's gradient 0."""
    from attnspec.spec.cases._build import Rng
    from attnspec.spec.oracle.core import precision
    from attnspec.spec.oracle.moe_router import moe_router as oracle
    from attnspec.spec.oracle.moe_router import moe_router_vjp

    from .test_grad_oracle import _check
    r = Rng("test/grad/moe_router")
    x = np.linspace(-3.0, 3.0, 8)[np.argsort(r.integers(0, 2**30, (8,)))]
    logits = np.stack([x, x[::-1]])
    bias = r.uniform((8,), -0.0625, 0.0625)
    with precision():
        _check(oracle, moe_router_vjp, {"weights": r.uniform((2, attrs["top_k"]))},
               {"logits": logits, "correction_bias": bias}, attrs)
