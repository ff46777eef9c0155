"""Invariants of sampling_filter and sample (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties


@st.composite
def filtered(draw):
    """(N, V) logits on a 1/4 grid in [-2, 2] (exact at every dtype, distinct values stay
    distinct), and filter attributes with margins left to the values' resolution."""
    n, v = draw(st.integers(1, 3)), draw(st.integers(2, 10))
    x = np.array(draw(st.lists(st.integers(-8, 8), min_size=n * v, max_size=n * v)),
                 dtype=np.float64).reshape(n, v) / 4
    attrs = {"temperature": draw(st.sampled_from([0.5, 1.0, 2.0])),
             "top_k": draw(st.sampled_from([None, 1, 2, 5])),
             "top_p": draw(st.sampled_from([1.0, 0.5, 0.9])),
             "min_p": draw(st.sampled_from([0.0, 0.1, 0.5])),
             "min_tokens_to_keep": draw(st.integers(1, 3))}
    return x, attrs


@given(case=filtered())
def test_sampling_filter_keeps_an_upper_set_of_the_logits_that_sums_to_one(ops, case):
    """Every filter removes only tokens below a threshold: a kept logit is never below a
    removed one; at least min(min_tokens_to_keep, V) tokens stay; the kept mass is 1."""
    x, attrs = case
    probs = np.asarray(ops.sampling_filter(logits=x, **attrs), np.float64)
    kept = probs > 0
    for row, keep in zip(x, kept):
        if (~keep).any():
            assert row[keep].min() > row[~keep].max()
        assert keep.sum() >= min(attrs["min_tokens_to_keep"], len(row))
    ops.assert_close(probs.sum(-1), np.ones(len(x)))


@given(case=filtered(), data=st.data())
def test_sample_draws_a_kept_token_nondecreasing_in_u(ops, case, data):
    """The inverse CDF in id order: the id never decreases as u grows, and a token of zero
    probability is never drawn."""
    x, attrs = case
    row = x[:1].repeat(4, axis=0)                                     # (4, V)
    u = np.sort(np.array(data.draw(st.lists(st.integers(0, 63), min_size=4, max_size=4)))) / 64
    ids = np.asarray(ops.sample(logits=row, u=u, **attrs))
    probs = np.asarray(ops.sampling_filter(logits=row, **attrs), np.float64)
    assert np.all(np.diff(ids) >= 0)
    assert np.all(probs[np.arange(4), ids] > 0)
