"""Invariants of sdpa_lse and merge_attention_states (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

pytestmark = pytest.mark.properties

# multiples of 2**-6 in [-2, 2]: exact at every dtype, so both sides start equal
exact = st.integers(-128, 128).map(lambda i: i * 2.0**-6)
batches = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=exact)


@st.composite
def attention(draw, max_s=8):
    """q (..., T, K), k (..., S, K), v (..., S, V) and a (T, S) mask with some rows and
    some runs of keys fully masked."""
    batch, t, s = draw(batches), draw(st.integers(1, 4)), draw(st.integers(1, max_s))
    kw, vw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    q, k, v = (draw(arrays(batch + shape)) for shape in ((t, kw), (s, kw), (s, vw)))
    mask = draw(hnp.arrays(np.bool_, (t, s)))
    return q, k, v, mask


@st.composite
def split(draw, s):
    """Consecutive parts covering 0..S: cut points, repeats (parts with no key) allowed."""
    cuts = draw(st.lists(st.integers(0, s), min_size=0, max_size=4))
    return [0, *sorted(cuts), s]


def _parts(ops, q, k, v, mask, cuts):
    """Stacked (outputs, lses) of sdpa_lse over each part of the split."""
    states = [ops.sdpa_lse(q=q, k=k[..., a:b, :], v=v[..., a:b, :], mask=mask[:, a:b])
              for a, b in zip(cuts, cuts[1:])]
    return np.stack([o for o, _ in states]), np.stack([lse for _, lse in states])


@given(x=attention(), data=st.data())
def test_merging_the_parts_of_any_split_of_the_keys_equals_attention_over_all_keys(ops, x, data):
    """Parts with no key kept (a fully masked run of keys, or no key at all) included; a
    query row fully masked everywhere merges to a zero output and lse = -inf."""
    q, k, v, mask = x
    cuts = data.draw(split(k.shape[-2]))
    outputs, lses = _parts(ops, q, k, v, mask, cuts)
    output, lse = ops.merge_attention_states(outputs=outputs, lses=lses)
    want_output, want_lse = ops.sdpa_lse(q=q, k=k, v=v, mask=mask)
    ops.assert_close(output, want_output, scale=8, what="output")
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    ops.assert_close(lse, want_lse, scale=8, what="lse")


@given(x=attention())
def test_sdpa_lse_output_is_sdpa_output_and_exp_of_scores_minus_lse_is_sdpa_weights(ops, x):
    q, k, v, mask = x
    output, lse = ops.sdpa_lse(q=q, k=k, v=v, mask=mask)
    want_output, weights = ops.sdpa(q=q, k=k, v=v, mask=mask)
    ops.assert_close(output, want_output, scale=4)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., T, S), float64
    finite = np.where(np.isfinite(lse), lse, 0.0)[..., None]
    ops.assert_close(np.where(mask, np.exp(scores - finite), 0.0), weights, scale=8)
    assert np.all(np.isneginf(lse) == ~mask.any(axis=-1))


@given(x=attention(), b=exact)
def test_sdpa_lse_a_constant_bias_shifts_the_lse_and_leaves_the_output(ops, x, b):
    q, k, v, mask = x
    bias = np.full(mask.shape, b)
    output, lse = ops.sdpa_lse(q=q, k=k, v=v, mask=mask, bias=bias)
    want_output, want_lse = ops.sdpa_lse(q=q, k=k, v=v, mask=mask)
    ops.assert_close(output, want_output, scale=4)
    ops.assert_close(lse, want_lse + b, scale=4)


@st.composite
def states(draw):
    """outputs (N, ..., V) and lses (N, ...) with some -inf lses (fully masked parts)."""
    n, rows, vw = draw(st.integers(1, 4)), draw(batches), draw(st.integers(1, 4))
    outputs = draw(arrays((n, *rows, vw)))
    lses = draw(hnp.arrays(np.float64, (n, *rows), elements=exact.map(lambda x: 4 * x)))
    empty = draw(hnp.arrays(np.bool_, (n, *rows)))
    return np.where(empty[..., None], 0.0, outputs), np.where(empty, -np.inf, lses)


@given(x=states(), data=st.data())
def test_merge_attention_states_does_not_depend_on_the_order_of_the_parts(ops, x, data):
    outputs, lses = x
    perm = data.draw(st.permutations(range(lses.shape[0])))
    got = ops.merge_attention_states(outputs=outputs[perm], lses=lses[perm])
    want = ops.merge_attention_states(outputs=outputs, lses=lses)
    for g, w in zip(got, want):
        ops.assert_close(g, w, scale=4)


@given(x=states(), data=st.data())
def test_merge_attention_states_of_a_merge_and_the_other_parts_is_the_merge_of_all(ops, x, data):
    """Associativity: what a tree or ring reduction of the parts relies on."""
    outputs, lses = x
    cut = data.draw(st.integers(1, lses.shape[0]))
    head = ops.merge_attention_states(outputs=outputs[:cut], lses=lses[:cut])
    rest = [ops.merge_attention_states(outputs=outputs[cut:], lses=lses[cut:])] \
        if cut < lses.shape[0] else []
    both = [head, *rest]
    got = ops.merge_attention_states(outputs=np.stack([o for o, _ in both]),
                                     lses=np.stack([s for _, s in both]))
    want = ops.merge_attention_states(outputs=outputs, lses=lses)
    for g, w in zip(got, want):
        ops.assert_close(g, w, scale=8)


# -- attention sinks -------------------------------------------------------------------------


@st.composite
def with_heads(draw):
    """q (B, H, T, K), k, v (B, H, S, .), a (T, S) mask and sinks (H,)."""
    b, h, t, s = (draw(st.integers(1, n)) for n in (2, 3, 4, 6))
    kw, vw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    q, k, v = (draw(arrays((b, h) + shape)) for shape in ((t, kw), (s, kw), (s, vw)))
    mask = draw(hnp.arrays(np.bool_, (t, s)))
    sinks = draw(hnp.arrays(np.float64, (h,), elements=exact.map(lambda x: 2 * x)))
    return q, k, v, mask, sinks


@given(x=with_heads())
def test_sdpa_sinks_is_sdpa_times_the_sigmoid_of_its_lse_minus_the_sink(ops, x):
    """output = O sigmoid(lse - sink_h) and weights = W sigmoid(lse - sink_h): the merge of
    sdpa with a part whose output is 0 and whose lse is the sink."""
    q, k, v, mask, sinks = x
    output, weights = ops.sdpa_sinks(q=q, k=k, v=v, sinks=sinks, mask=mask)
    plain, lse = ops.sdpa_lse(q=q, k=k, v=v, mask=mask)
    _, plain_weights = ops.sdpa(q=q, k=k, v=v, mask=mask)
    with np.errstate(over="ignore"):
        share = 1 / (1 + np.exp(sinks[:, None] - lse))  # (B, H, T); 0 where lse = -inf
    ops.assert_close(output, plain * share[..., None], scale=8)
    ops.assert_close(weights, plain_weights * share[..., None], scale=8)


@given(x=with_heads())
def test_sdpa_sinks_with_every_sink_minus_inf_is_sdpa(ops, x):
    q, k, v, mask, sinks = x
    got = ops.sdpa_sinks(q=q, k=k, v=v, sinks=np.full(sinks.shape, -np.inf), mask=mask)
    want = ops.sdpa(q=q, k=k, v=v, mask=mask)
    for g, w in zip(got, want):
        ops.assert_close(g, w, scale=4)
