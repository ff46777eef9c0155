"""t5_bias: planted bugs in the bucket rule, each caught by the vectors at every dtype;
the backends' integer bucket rule against the oracle's; the oracle's VJP against
central differences."""

import math

import mpmath
import numpy as np
import pytest
from attnspec.backends import _checks as check
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle import t5_bias as oracle
from attnspec.spec.oracle.core import mp, mpa, precision

from .mutants import assert_rejected, mutant


def _float_buckets(t, s, bidirectional, n_buckets, m, offset, *, rounding=math.floor,
                   upper_for_earlier=False, ignore_direction=False, ignore_offset=False,
                   clamp=-1):
    """The transformers-style float rule, with one mistake switched on."""
    if ignore_direction:
        bidirectional = True
    half = n_buckets // 2 if bidirectional else n_buckets
    exact = half // 2
    out = np.zeros((t, s), dtype=np.int64)
    for i in range(t):
        for j in range(s):
            r = j - (i if ignore_offset else offset + i)
            if bidirectional:
                later = r < 0 if upper_for_earlier else r > 0
                base, n = (half if later else 0), abs(r)
            else:
                base, n = 0, max(-r, 0)
            if n < exact:
                out[i, j] = base + n
                continue
            k = rounding(math.log(n / exact) / math.log(m / exact) * (half - exact))
            out[i, j] = base + min(half + clamp, exact + k)
    return out


def _broken(**mistake):
    def t5_bias(*, t, s, bidirectional=True, num_buckets=32, max_distance=128, offset=0, params):
        table = np.asarray(params["table"])
        b = _float_buckets(t, s, bidirectional, num_buckets, max_distance, offset, **mistake)
        return np.transpose(table[np.minimum(b, table.shape[0] - 1)], (2, 0, 1))
    return t5_bias


MISTAKES = {
    "rounded-log-bucket": {"rounding": round},
    "halves-swapped": {"upper_for_earlier": True},
    "bidirectional-in-decoder": {"ignore_direction": True},
    "offset-ignored": {"ignore_offset": True},
    "clamp-at-n-prime": {"clamp": 0},
}


def test_the_float_rule_without_a_mistake_passes():
    """The sketch the mutants start from is correct: every mistake below is the one change."""
    from .mutants import rejections
    assert not any(rejections(mutant(t5_bias=_broken()), "t5_bias").values())


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_planted_t5_bias_bug_is_rejected(name):
    assert_rejected(mutant(t5_bias=_broken(**MISTAKES[name])), "t5_bias")


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("n_buckets,m", [(4, 3), (8, 8), (11, 10), (32, 128), (32, 33), (64, 1000)])
def test_integer_buckets_equal_the_oracle(bidirectional, n_buckets, m):
    if m <= (n_buckets // 2 if bidirectional else n_buckets) // 2:
        pytest.skip("not a valid configuration")  # parameter grid, not a missing backend
    for t, s, o in ((7, 9, 0), (3, 300, 0), (4, 6, 997)):
        got = check.t5_buckets(t, s, bidirectional, n_buckets, m, o)
        want = oracle.buckets(t, s, bidirectional, n_buckets, m, o)
        np.testing.assert_array_equal(got, want)


def test_a_distance_on_a_log_boundary_takes_the_upper_bucket():
    """N = 32 bidirectional, M = 128: n = 16, 32, 64 sit exactly on boundaries 10, 12, 14."""
    r = np.array([-15, -16, -31, -32, -63, -64, -127, -128, -129])
    want = [9, 10, 11, 12, 13, 14, 15, 15, 15]
    assert [oracle.bucket(int(x), True, 32, 128) for x in r] == want
    got = check.t5_buckets(1, 130, True, 32, 128, 129)[0, 129 + r]
    assert got.tolist() == want


def test_oracle_vjp_equals_central_differences():
    r = Rng("t5_bias/test-vjp")
    table, cot = r.weights((8, 2)), r.uniform((2, 4, 5))
    attrs = dict(t=4, s=5, bidirectional=False, num_buckets=8, max_distance=16, offset=1)
    h = mpmath.mpf("1e-15")
    with precision():
        _, grads = oracle.t5_bias_vjp({"bias": cot}, **attrs, params={"table": table})

        def f(w):
            out = oracle.t5_bias(**attrs, params={"table": w})["bias"]
            return mp.fsum(np.ravel(out * mpa(cot)))

        for idx in np.ndindex(table.shape):
            up, down = mpa(table), mpa(table)
            up[idx] += h
            down[idx] -= h
            assert abs((f(up) - f(down)) / (2 * h) - grads["table"][idx]) < mpmath.mpf("1e-25")
