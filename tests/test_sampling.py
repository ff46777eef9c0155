"""Planted bugs in the sampling filters and the draw (spec/components/sampling.md) that the
vectors must catch at every dtype, and the filters' rules checked on cases of their own."""

import contextlib

import numpy as np
import pytest
from attnspec.backends.numpy import sampling

from .mutants import assert_rejected, mutant


@contextlib.contextmanager
def _replaced(**helpers):
    real = {name: getattr(sampling, name) for name in helpers}
    for name, fn in helpers.items():
        setattr(sampling, name, fn)
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(sampling, name, fn)


def _planted(fn_name, **helpers):
    """sampling_filter or sample of the NumPy backend with some of its helpers replaced."""
    def run(*args, **kwargs):
        with _replaced(**helpers):
            return getattr(sampling, fn_name)(*args, **kwargs)
    return run


def _top_p_crossing_dropped(z, keep, top_p, floor):
    """Keeps only the tokens whose mass *including* their own stays <= top_p (at least one)."""
    q = sampling._softmax(z, keep)
    desc = -np.sort(-q, axis=-1)
    r = np.maximum((np.cumsum(desc, axis=-1) <= top_p).sum(axis=-1, keepdims=True), 1)
    return keep & ((q >= np.take_along_axis(desc, r - 1, axis=-1)) | (z >= floor))


def _top_p_ties_by_id(z, keep, top_p, floor):
    """The nucleus by a stable descending sort: exactly the first r tokens, ties by lowest id."""
    q = sampling._softmax(z, keep)
    order = np.argsort(-q, axis=-1, kind="stable")
    desc = np.take_along_axis(q, order, axis=-1)
    above = np.cumsum(desc, axis=-1) - desc
    kept_sorted = (above < top_p) | (np.arange(q.shape[1]) < 1)
    kept = np.zeros_like(keep)
    np.put_along_axis(kept, order, kept_sorted, axis=-1)
    return keep & (kept | (z >= floor))


def _min_p_absolute(z, keep, min_p, floor):
    """q >= min_p, not q >= min_p * max q."""
    q = sampling._softmax(z, keep)
    return keep & ((q >= min_p) | (z >= floor))


def _top_k_exactly_k_high_ids(logits, *, temperature=1.0, top_k=None, **attrs):
    """top-k keeps exactly k tokens, ties at the k-th value to the highest id."""
    x = np.asarray(logits)
    if top_k is not None and top_k < x.shape[1]:
        v = x.shape[1]
        order = v - 1 - np.argsort(-x[:, ::-1], axis=-1, kind="stable")  # ties: highest id first
        drop = np.zeros(x.shape, dtype=bool)
        np.put_along_axis(drop, order[:, top_k:], True, axis=-1)
        x = np.where(drop, x.min() - 1e4, x)
    return sampling.sampling_filter(x, temperature=temperature, **attrs)


def _temperature_after_top_p(logits, *, temperature=1.0, top_p=1.0, **attrs):
    """top-k, top-p on the untempered logits; the temperature (and min-p) after them."""
    x = np.asarray(logits)
    kept = sampling.sampling_filter(x, top_p=top_p, top_k=attrs.pop("top_k", None),
                                    min_tokens_to_keep=attrs.get("min_tokens_to_keep", 1)) > 0
    return sampling.sampling_filter(np.where(kept, x, x.min() - 1e4), temperature=temperature,
                                    **attrs)


def _draw_at_step_kept(logits, u, **attrs):
    """F_j >= u instead of F_j > u: u on a CDF step draws the token below it."""
    q = sampling.sampling_filter(logits, **attrs)
    return ((np.cumsum(q, axis=-1) < np.asarray(u)[:, None]).sum(axis=-1)).astype(np.int64)


def _draw_in_probability_order(logits, u, **attrs):
    """The CDF over the tokens sorted by probability (most probable first), not by id."""
    q = sampling.sampling_filter(logits, **attrs)
    order = np.argsort(-q, axis=-1, kind="stable")
    cdf = np.cumsum(np.take_along_axis(q, order, axis=-1), axis=-1)
    pos = np.minimum((cdf <= np.asarray(u)[:, None]).sum(axis=-1), q.shape[1] - 1)
    return np.take_along_axis(order, pos[:, None], axis=-1)[:, 0].astype(np.int64)


BUGS = {
    "top_p_drops_the_crossing_token": dict(sampling_filter=_planted(
        "sampling_filter", _top_p=_top_p_crossing_dropped)),
    "top_p_ties_by_lowest_id": dict(sampling_filter=_planted(
        "sampling_filter", _top_p=_top_p_ties_by_id)),
    "min_p_absolute": dict(sampling_filter=_planted("sampling_filter", _min_p=_min_p_absolute)),
    "top_k_ties_to_highest_id": dict(sampling_filter=_top_k_exactly_k_high_ids),
    "temperature_after_top_p": dict(sampling_filter=_temperature_after_top_p),
    "temperature_multiplied": dict(sampling_filter=lambda logits, *, temperature=1.0, **a:
                                   sampling.sampling_filter(logits, temperature=1 / temperature,
                                                            **a)),
    "draw_at_step_kept": dict(sample=_draw_at_step_kept),
    "draw_in_probability_order": dict(sample=_draw_in_probability_order),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_sampling_mutant_is_rejected(bug):
    assert_rejected(mutant(**BUGS[bug]), "sampling")


def test_top_k_keeps_every_tie_at_the_kth_value():
    probs = sampling.sampling_filter(np.array([[1.0, 3.0, 1.0, 2.0, 1.0, 0.0]]), top_k=3)
    assert (probs[0] > 0).tolist() == [True, True, True, True, True, False]


def test_top_p_keeps_the_token_that_crosses_p():
    # probabilities 0.5, 0.25, 0.125, 0.125 (logits ln 4, ln 2, 0, 0): mass 0.5 + 0.25 >= 0.6
    x = np.log(np.array([[4.0, 2.0, 1.0, 1.0]]))
    assert (sampling.sampling_filter(x, top_p=0.6)[0] > 0).tolist() == [True, True, False, False]
    assert (sampling.sampling_filter(x, top_p=0.5)[0] > 0).tolist() == [True, False, False, False]


def test_sample_draws_the_first_id_whose_cdf_exceeds_u():
    x = np.zeros((4, 4))
    ids = sampling.sample(x, np.array([0.0, 0.25, 0.5, 0.99]))
    assert ids.tolist() == [0, 1, 2, 3]
    x[:, 0] = x[:, 2] = -1.0  # top_k 2 keeps ids 1 and 3, F = 0, .5, .5, 1
    assert sampling.sample(x, np.array([0.0, 0.25, 0.5, 0.75]), top_k=2).tolist() == [1, 1, 3, 3]


@pytest.mark.parametrize("bug", ["top_p_drops_the_crossing_token", "min_p_absolute"])
def test_planted_helpers_differ_from_the_real_ones(bug):
    """The planted helper really changes the set on a plain case (so a pass would be the
    vectors' fault, not the bug's absence)."""
    x = np.array([[2.0, 1.0, 0.5, 0.0, -1.0]])
    attrs = {"top_p": 0.7} if "top_p" in bug else {"min_p": 0.3}
    good = sampling.sampling_filter(x, **attrs)
    bad = BUGS[bug]["sampling_filter"](x, **attrs)
    assert not np.allclose(good, bad)
