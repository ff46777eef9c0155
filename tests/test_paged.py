"""paged_attention: the oracle's VJP against central differences, and the properties of
conformance/suite/test_properties_paged.py against the planted bugs."""

import numpy as np
import pytest
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.paged_attention import paged_attention

from .mutants import mutant
from .test_grad_oracle import VJP, _check
from .test_paged_mutants import APPEND_BUGS, PAGED_BUGS


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_paged_attention_vjp_matches_central_differences(causal):
    """A shared page (block 0 in both rows), a partial last page, GQA (H = 2 over H_kv = 1)."""
    r = Rng(f"test/paged_attention/{causal}")
    with precision():
        _check(paged_attention, VJP["paged_attention"], {"output": r.uniform((2, 2, 2, 2))},
               {"q": r.uniform((2, 2, 2, 2)), "k_cache": r.uniform((3, 2, 1, 2)),
                "v_cache": r.uniform((3, 2, 1, 2)),
                "block_table": np.array([[0, 2], [0, 1]]), "seq_lens": np.array([3, 4])},
               {"scale": None, "causal": causal})


def _ops(backend):
    from attnspec.conformance.ops import Ops
    from attnspec.spec.vectors import default_spec
    return Ops(backend, default_spec(), "cpu", "float64")


def _example(causal):
    """Two rows, page_size 3, lengths 5 and 7 (partial last pages), shuffled blocks, unused
    entries out of range, T = 2 queries over H = 2 heads sharing one kv head."""
    r = Rng("test/paged_attention/property")
    return ({"q": r.uniform((2, 2, 2, 3)), "k_cache": r.uniform((6, 3, 1, 3)),
             "v_cache": r.uniform((6, 3, 1, 2)),
             "block_table": np.array([[4, 1, 77], [3, 0, 5]]),
             "seq_lens": np.array([5, 7])}, causal)


def _gathered_property(backend):
    from attnspec.conformance.suite import test_properties_paged as props
    for causal in (False, True):
        props.test_paged_attention_equals_sdpa_on_the_gathered_keys.hypothesis.inner_test(
            ops=_ops(backend), x=_example(causal))


def _decoding_property(backend):
    from attnspec.conformance.suite import test_properties_paged as props
    r = Rng("test/paged_kv_append/property")
    x = {"q": r.uniform((2, 5, 2, 3)), "k": r.uniform((2, 5, 1, 3)), "v": r.uniform((2, 5, 1, 2)),
         "table": np.array([[3, 0], [1, 2]]), "page": 3, "prompt": 2}
    props.test_paged_decoding_append_then_attend_step_by_step_equals_full_causal_attention \
        .hypothesis.inner_test(ops=_ops(backend), x=x)


def test_the_properties_hold_for_the_reference():
    _gathered_property(mutant())
    _decoding_property(mutant())


@pytest.mark.parametrize("bug", sorted(PAGED_BUGS))
def test_the_gathered_keys_property_catches_a_planted_paged_bug(bug):
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        _gathered_property(mutant(paged_attention=PAGED_BUGS[bug]))


# (a causal query never sees past the sequence's length: the partial page read to its end
# is the gathered-keys property's to catch)
@pytest.mark.parametrize("bug", sorted(set(PAGED_BUGS) - {"partial_last_page_read_to_its_end"}))
def test_the_decoding_property_catches_a_planted_paged_bug(bug):
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        _decoding_property(mutant(paged_attention=PAGED_BUGS[bug]))


@pytest.mark.parametrize("bug", sorted(APPEND_BUGS))
def test_the_decoding_property_catches_a_planted_append_bug(bug):
    with np.errstate(all="ignore"), pytest.raises((AssertionError, ValueError)):
        _decoding_property(mutant(paged_kv_append=APPEND_BUGS[bug]))


def test_paged_kv_append_leaves_its_inputs_unchanged():
    from attnspec.backends.numpy import attention
    r = Rng("test/paged_kv_append/functional")
    kc, vc = r.uniform((3, 2, 1, 2)), r.uniform((3, 2, 1, 2))
    lens = np.array([1, 0])
    before = kc.copy(), vc.copy(), lens.copy()
    k2, v2, lens2 = attention.paged_kv_append(kc, vc, np.array([[0, 1], [2, 1]]), lens,
                                              r.uniform((2, 1, 1, 2)), r.uniform((2, 1, 1, 2)))
    for a, b in zip((kc, vc, lens), before):
        assert np.array_equal(a, b)
    assert not np.array_equal(k2, kc) and list(lens2) == [2, 1]


def _permutation_property(backend):
    from attnspec.conformance.suite import test_properties_paged as props

    class Reversed:  # the data object's draw: the block permutation i -> N - 1 - i
        @staticmethod
        def draw(strategy):
            return list(range(6))[::-1]

    props.test_permuting_the_physical_pages_and_the_block_table_changes_nothing.hypothesis \
        .inner_test(ops=_ops(backend), x=_example(True), data=Reversed())


def test_the_permutation_property_holds_for_the_reference():
    _permutation_property(mutant())


@pytest.mark.parametrize("bug", ["block_after_the_right_one"])
def test_the_permutation_property_catches_a_planted_paged_bug(bug):
    """A bug that reads a block by its physical neighbour changes when the pages move."""
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        _permutation_property(mutant(paged_attention=PAGED_BUGS[bug]))
