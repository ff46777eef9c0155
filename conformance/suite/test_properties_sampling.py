"""Invariants of sampling_filter and sample (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties


# Few shapes and attribute sets: a compiling backend (JAX, TensorFlow's graph and XLA modes)
# compiles once per shape and attribute set, and the values vary freely within them.
ATTRIBUTE_SETS = [
    {"temperature": 0.5, "top_k": 5, "top_p": 0.9, "min_p": 0.1, "min_tokens_to_keep": 2},
    {"temperature": 1.0, "top_k": None, "top_p": 0.5, "min_p": 0.0, "min_tokens_to_keep": 1},
    {"temperature": 2.0, "top_k": 2, "top_p": 1.0, "min_p": 0.5, "min_tokens_to_keep": 3},
]


@st.composite
def filtered(draw):
    """(2, V) logits on a 1/4 grid in [-2, 2] (exact at every dtype, distinct values stay
    distinct), V in {5, 8}, and one of the attribute sets."""
    v = draw(st.sampled_from([5, 8]))
    x = np.array(draw(st.lists(st.integers(-8, 8), min_size=2 * v, max_size=2 * v)),
                 dtype=np.float64).reshape(2, v) / 4
    return x, draw(st.sampled_from(ATTRIBUTE_SETS))


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
