"""Invariants of softmax (hypothesis). Each test name is the invariant."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

finite = st.floats(-30, 30, allow_nan=False, width=32)


def logits(min_dims=1, max_dims=3):
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=min_dims, max_dims=max_dims,
                                                   max_side=6), elements=finite)


@given(x=logits(), c=st.floats(-100, 100, width=32))
def test_softmax_shift_invariance(ops, x, c):
    """softmax(x + c) == softmax(x) for any constant c."""
    ops.assert_close(ops.softmax(x=x + c), ops.softmax(x=x), scale=4)


@given(x=logits())
def test_softmax_rows_sum_to_one_and_nonnegative(ops, x):
    y = ops.softmax(x=x)
    assert np.all(y >= 0)
    ops.assert_close(y.sum(axis=-1), np.ones(x.shape[:-1]), scale=4)


@given(x=logits(min_dims=2), data=st.data())
def test_softmax_masked_entries_are_exactly_zero(ops, x, data):
    mask = data.draw(hnp.arrays(np.bool_, x.shape))
    y = ops.softmax(x=x, mask=mask)
    assert np.all(y[~mask] == 0)
    kept_rows = mask.any(axis=-1)
    ops.assert_close(y.sum(axis=-1)[kept_rows], np.ones(int(kept_rows.sum())), scale=4)
    assert np.all(y.sum(axis=-1)[~kept_rows] == 0)


@given(x=logits(min_dims=1, max_dims=1), data=st.data())
def test_softmax_permutation_equivariance(ops, x, data):
    perm = data.draw(st.permutations(range(x.shape[-1])))
    ops.assert_close(ops.softmax(x=x[perm]), ops.softmax(x=x)[perm])


@given(x=logits(min_dims=2), data=st.data())
def test_softmax_pos_inf_entries_share_their_slice_equally(ops, x, data):
    """Kept +inf entries split the slice equally and every other entry gets 0 (the limit of
    the softmax as those entries grow); slices without +inf are unchanged."""
    top = data.draw(hnp.arrays(np.bool_, x.shape))
    y = ops.softmax(x=np.where(top, np.inf, x))
    rows = top.any(axis=-1)
    share = np.where(top, 1.0 / np.maximum(top.sum(-1, keepdims=True), 1), 0.0)
    ops.assert_close(y[rows], share[rows])
    ops.assert_close(y[~rows], ops.softmax(x=x)[~rows], scale=4)


@given(x=logits(min_dims=2), data=st.data())
def test_softmax_a_kept_nan_makes_its_kept_slice_nan_and_a_masked_nan_is_invisible(ops, x, data):
    """NaN where the mask is True: every kept weight of that slice is NaN, masked ones 0;
    NaN where the mask is False: the same weights as without it."""
    mask = data.draw(hnp.arrays(np.bool_, x.shape))
    at = data.draw(hnp.arrays(np.bool_, x.shape))
    y = ops.softmax(x=np.where(at, np.nan, x), mask=mask)
    hit = (at & mask).any(axis=-1, keepdims=True)  # slices with a kept NaN
    want = ops.softmax(x=x, mask=mask)
    assert np.array_equal(np.isnan(y), np.broadcast_to(hit, x.shape) & mask)
    assert np.all(y[~mask] == 0)
    clean = ~np.broadcast_to(hit, x.shape)
    ops.assert_close(y[clean], want[clean], scale=4)
