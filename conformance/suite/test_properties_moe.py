"""Invariants of moe_router (hypothesis).

Each test name is the invariant; each uses only ``ops`` so it runs on any backend.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.properties

scorings = st.sampled_from(["softmax", "sigmoid"])


@st.composite
def routed(draw):
    """(N, E) logits whose rows are permutations of levels 1/4 apart in [-2, 2] (distinct
    scores at every dtype, exact in each), and a top_k in [1, E]."""
    n, e = draw(st.integers(1, 4)), draw(st.integers(2, 12))
    levels = np.linspace(-2.0, 2.0, 17)[:e]
    rows = [levels[draw(st.permutations(range(e)))] for _ in range(n)]
    return np.array(rows), draw(st.integers(1, e))


def _route(ops, logits, **attrs):
    w, idx = ops.moe_router(logits=logits, **attrs)
    return np.asarray(w, np.float64), np.asarray(idx)


@given(x=routed(), scoring=scorings, scale=st.sampled_from([1.0, 2.5, 16.0]))
def test_moe_router_renormalised_weights_sum_to_the_scaling_factor(ops, x, scoring, scale):
    logits, k = x
    w, _ = _route(ops, logits, top_k=k, scoring=scoring, renormalize=True,
                  routed_scaling_factor=scale)
    ops.assert_close(w.sum(-1) / scale, np.ones(len(logits)))


@given(x=routed(), scoring=scorings, data=st.data())
def test_moe_router_permuting_the_experts_permutes_the_indices_only(ops, x, scoring, data):
    """Columns permuted by perm: expert perm[j] of the new logits is expert j of the old."""
    logits, k = x
    perm = np.array(data.draw(st.permutations(range(logits.shape[1]))))
    w, idx = _route(ops, logits, top_k=k, scoring=scoring)
    w2, idx2 = _route(ops, logits[:, perm], top_k=k, scoring=scoring)
    np.testing.assert_array_equal(perm[idx2], idx)
    ops.assert_close(w2, w)


@given(x=routed(), scoring=scorings)
def test_moe_router_lists_the_chosen_experts_by_descending_weight(ops, x, scoring):
    """Without a bias the selection score is the weight: weights never increase along k,
    and the indices are distinct experts."""
    logits, k = x
    w, idx = _route(ops, logits, top_k=k, scoring=scoring)
    assert np.all(np.diff(w, axis=-1) <= 0)
    assert all(len(set(row)) == k for row in idx.tolist())


@given(x=routed())
def test_moe_router_choosing_every_expert_keeps_the_whole_softmax(ops, x):
    logits, _ = x
    e = logits.shape[1]
    w, idx = _route(ops, logits, top_k=e)
    ops.assert_close(w.sum(-1), np.ones(len(logits)))
    np.testing.assert_array_equal(np.sort(idx, -1), np.broadcast_to(np.arange(e), idx.shape))


# -- group_score "max" (DeepSeek-V2's group_limited_greedy) ------------------------------------

@st.composite
def grouped(draw):
    """logits (N, G S) as routed() with G groups of S experts, top_k and topk_group drawn so
    that top_k <= topk_group S."""
    n, g, size = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 4))
    e = g * size
    levels = np.linspace(-2.0, 2.0, 17)[:e]
    rows = [levels[draw(st.permutations(range(e)))] for _ in range(n)]
    topk_group = draw(st.integers(1, g))
    return np.array(rows), g, topk_group, draw(st.integers(1, topk_group * size))


@given(x=grouped(), scoring=scorings)
def test_moe_router_group_max_always_keeps_the_best_expert(ops, x, scoring):
    """Groups scored by their max: the best expert's group has the largest group score, so
    it is chosen first (not so with the sum of the top two)."""
    logits, g, topk_group, k = x
    _, idx = _route(ops, logits, top_k=k, scoring=scoring, n_group=g, topk_group=topk_group,
                    group_score="max")
    np.testing.assert_array_equal(idx[:, 0], np.argmax(logits, axis=-1))


@given(x=grouped(), scoring=scorings)
def test_moe_router_group_max_with_top_k_at_most_topk_group_is_plain_top_k(ops, x, scoring):
    """Groups scored by their max and top_k <= topk_group: each of the plain top_k experts
    lies in a group whose max is at least its score, so among the topk_group best groups;
    the choice is the plain top_k (DeepSeek-V2's groups matter only for top_k > topk_group)."""
    logits, g, topk_group, k = x
    k = min(k, topk_group)
    w, idx = _route(ops, logits, top_k=k, scoring=scoring, n_group=g, topk_group=topk_group,
                    group_score="max")
    w1, idx1 = _route(ops, logits, top_k=k, scoring=scoring)
    np.testing.assert_array_equal(idx, idx1)
    ops.assert_close(w, w1)
