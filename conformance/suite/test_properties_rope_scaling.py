"""Invariants of rope's rotary_dim and scaling and of rope_frequencies (hypothesis). Each test
name is the invariant (spec/components/rope.md, spec/components/rope_frequencies.md)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

unit = st.floats(-2, 2, allow_nan=False, width=32)
even_width = st.integers(1, 8).map(lambda h: 2 * h)
conventions = st.sampled_from(["interleaved", "half"])
bases = st.sampled_from([100.0, 10000.0, 500000.0])


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=unit)


def exact_arrays(shape):
    """Multiples of 2**-6 in [-2, 2]: exact at every dtype, so a copy compares bit for bit."""
    return hnp.arrays(np.float64, shape, elements=st.integers(-128, 128).map(lambda n: n / 64))


def factor_one(rule, k, l0):
    """rope_parameters of `rule` with factor 1 (longrope: every factor 1); dynamic's seq_len is
    rope's offset + T, kept <= its L0 = max_position_embeddings by the caller."""
    return {
        "linear": {"rope_type": "linear", "factor": 1.0},
        "dynamic": {"rope_type": "dynamic", "factor": 1.0, "max_position_embeddings": l0},
        "yarn": {"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": l0},
        "llama3": {"rope_type": "llama3", "factor": 1.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": l0},
        "longrope": {"rope_type": "longrope", "factor": 1.0, "original_max_position_embeddings": l0,
                     "short_factor": [1.0] * (k // 2), "long_factor": [1.0] * (k // 2)},
    }[rule]


@given(k=even_width, t=st.integers(1, 4), offset=st.integers(0, 40), base=bases,
       rule=st.sampled_from(["linear", "dynamic", "yarn", "llama3", "longrope"]),
       convention=conventions, data=st.data())
def test_rope_scaling_with_factor_one_equals_default_rope(ops, k, t, offset, base, rule,
                                                         convention, data):
    x = data.draw(arrays((2, t, k)))
    scaling = factor_one(rule, k, l0=64)
    ops.assert_close(ops.rope(x=x, offset=offset, base=base, convention=convention, scaling=scaling),
                     ops.rope(x=x, offset=offset, base=base, convention=convention), scale=4)


@given(k=even_width, base=bases, l0=st.sampled_from([16, 64, 8192]),
       rule=st.sampled_from(["linear", "dynamic", "yarn", "llama3", "longrope"]))
def test_rope_frequencies_with_factor_one_equal_the_default_rule(ops, k, base, l0, rule):
    inv_freq, m = ops.rope_frequencies(head_dim=k, base=base, seq_len=l0, **factor_one(rule, k, l0))
    want, one = ops.rope_frequencies(head_dim=k, base=base)
    ops.assert_close(inv_freq, want)
    ops.assert_close(m, one)


@given(k=even_width, t=st.integers(1, 4), offset=st.integers(0, 60), convention=conventions,
       data=st.data())
def test_rope_rotary_dim_equal_to_width_is_plain_rope(ops, k, t, offset, convention, data):
    x = data.draw(arrays((1, t, k)))
    ops.assert_close(ops.rope(x=x, offset=offset, convention=convention, rotary_dim=k),
                     ops.rope(x=x, offset=offset, convention=convention))


@given(k=even_width, t=st.integers(1, 4), offset=st.integers(0, 60), convention=conventions,
       data=st.data())
def test_rope_rotary_dim_rotates_the_first_features_and_passes_the_rest_through(
        ops, k, t, offset, convention, data):
    """rope(x, rotary_dim=R) == concat(rope(x[..., :R]), x[..., R:]) with theta from R."""
    r = 2 * data.draw(st.integers(0, k // 2))
    x = data.draw(exact_arrays((2, t, k + 2)))  # at least 2 pass-through features
    y = ops.rope(x=x, offset=offset, convention=convention, rotary_dim=r)
    np.testing.assert_array_equal(np.asarray(y, np.float64)[..., r:], x[..., r:])  # untouched
    if r:
        ops.assert_close(y[..., :r], ops.rope(x=x[..., :r], offset=offset, convention=convention))


@given(k=even_width, p=st.integers(0, 40), p2=st.integers(0, 40), c=st.integers(0, 40),
       factor=st.sampled_from([2.0, 4.0, 8.0]), convention=conventions, data=st.data())
def test_rope_linear_scaling_scores_depend_only_on_relative_position(ops, k, p, p2, c, factor,
                                                                   convention, data):
    """<rope(q, p), rope(k, p')> == <rope(q, p + c), rope(k, p' + c)> under linear scaling."""
    q, kk = data.draw(arrays((1, k))), data.draw(arrays((1, k)))
    linear = {"rope_type": "linear", "factor": factor}

    def score(pq, pk):
        return float(np.sum(ops.rope(x=q, offset=pq, convention=convention, scaling=linear)
                            * ops.rope(x=kk, offset=pk, convention=convention, scaling=linear)))

    bound = float(np.linalg.norm(q) * np.linalg.norm(kk))
    ops.assert_close(score(p + c, p2 + c), score(p, p2), scale=8 * max(bound, 1))


@given(k=even_width, p=st.integers(0, 30), factor=st.sampled_from([2, 4, 8]),
       convention=conventions, data=st.data())
def test_rope_linear_scaling_at_position_s_p_equals_default_at_p(ops, k, p, factor, convention,
                                                                 data):
    """theta_i / s at position s p is the angle theta_i p: position interpolation."""
    x = data.draw(arrays((1, 1, k)))
    linear = {"rope_type": "linear", "factor": float(factor)}
    ops.assert_close(ops.rope(x=x, offset=factor * p, convention=convention, scaling=linear),
                     ops.rope(x=x, offset=p, convention=convention), scale=4)
