"""Invariants of softmax (hypothesis). Each test name is the invariant."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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
