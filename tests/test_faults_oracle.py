"""Suite properties that must fail on planted bugs (issue 19's mutation study)."""

import numpy as np
import pytest
from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.ops import Ops
from attnspec.conformance.suite import test_properties_positional as positional
from attnspec.spec.vectors import default_spec

from .mutants import mutant

NUMPY = NumpyBackend()


def _alibi_with(slopes):
    def alibi_bias(*, num_heads, t, s):
        m = np.asarray(slopes(num_heads), dtype=np.float64)                # (H,)
        p = np.arange(t, dtype=np.float64)[:, None] + (s - t)               # (T, 1)
        return -m[:, None, None] * (p - np.arange(s, dtype=np.float64)[None, :])
    return alibi_bias


def _alibi_property(backend, h, t=3, extra=2, seed=0):
    ops = Ops(backend, default_spec(), "cpu", "float64")
    positional.test_alibi_in_sdpa_equals_the_key_position_bias_of_fairseq_and_bloom.hypothesis \
        .inner_test(ops=ops, h=h, t=t, extra=extra, seed=seed)


WRONG_SLOPES = {
    # 2^(-8 (h + 1) / H) for every H: right only for powers of two
    "geometric-for-any-h": lambda n: [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)],
    # the right slopes in reverse head order
    "reversed": lambda n: positional.paper_slopes(n)[::-1],
    # a base of 2^-4 instead of 2^-8
    "half-exponent": lambda n: positional.paper_slopes(n) ** 0.5,
}


@pytest.mark.parametrize("h", [1, 3, 4, 6])
def test_alibi_property_passes_on_the_numpy_backend(h):
    _alibi_property(NUMPY, h)


@pytest.mark.parametrize("wrong", sorted(WRONG_SLOPES))
def test_alibi_property_fails_with_wrong_slopes(wrong):
    """The property compared the backend's bias with slopes read back from that same bias,
    so any slopes passed; now the slopes come from the paper's formula."""
    h = 6  # not a power of two: the geometric rule and the paper's differ
    backend = mutant(alibi_bias=_alibi_with(WRONG_SLOPES[wrong]))
    with pytest.raises(AssertionError):
        _alibi_property(backend, h)


def test_paper_slopes_match_the_paper_for_8_and_6_heads():
    """Press et al. 2022: 8 heads get 1/2, 1/4, ..., 1/256; 6 heads get the 4-head slopes
    (1/4, 1/16, 1/64, 1/256) then the 8-head slopes 1/2 and 1/8."""
    np.testing.assert_array_equal(positional.paper_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_array_equal(positional.paper_slopes(6),
                                  [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3])
