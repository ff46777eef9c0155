"""The oracle's exact dot products: the integer matmul gives what mp.fdot gives, element
for element, and falls back to it where an input is not finite; converted parameters are
not shared between calls."""

import itertools

import mpmath
import numpy as np
import pytest
from attnspec.spec.oracle import core

mp = mpmath.mp


def fdot_matmul(a, b):
    n, m, p = a.shape[0], a.shape[1], b.shape[1]
    out = np.empty((n, p), dtype=object)
    for i, j in itertools.product(range(n), range(p)):
        out[i, j] = mp.fdot((a[i, k], b[k, j]) for k in range(m))
    return out


def same(x, y) -> bool:
    return x.shape == y.shape and all(str(u) == str(v) for u, v in zip(x.flat, y.flat))


@pytest.mark.parametrize("seed", range(40))
def test_the_integer_matmul_is_fdot(seed):
    rng = np.random.default_rng(seed)
    n, m, p = rng.integers(1, 7, 3)
    with core.precision():
        a = core.mpa(rng.standard_normal((n, m)) * 10.0 ** rng.integers(-40, 40, (n, m)))
        b = core.mpa(rng.standard_normal((m, p)))
        if seed % 2:  # 50-digit entries, as an intermediate of the oracle has
            a = core.matmul(a, core.mpa(rng.standard_normal((m, m)) / 3))
        a[0, 0] = mpmath.mpf(0)
        assert same(core._exact_matmul(a, b), fdot_matmul(a, b))
        w = core.mpa(np.where(rng.random((n, m)) < 0.3, 0.0, rng.random((n, m))))
        assert same(core.weighted_sum(w, b), fdot_matmul(w, b))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_input_takes_fdot(bad):
    with core.precision():
        a = core.mpa(np.array([[1.0, bad], [2.0, 3.0]]))
        b = core.mpa(np.array([[0.5], [0.25]]))
        got = core.matmul(a, b)
        assert same(got, fdot_matmul(a, b))
        assert mpmath.isnan(got[0, 0]) or mpmath.isinf(got[0, 0])
        # a weight of exactly 0 keeps a NaN or inf value out of the sum
        v = core.mpa(np.array([[bad], [4.0]]))
        w = core.mpa(np.array([[0.0, 1.0]]))
        assert core.weighted_sum(w, v)[0, 0] == 4


def test_converted_arrays_are_not_shared():
    x = np.array([[0.1, -2.0], [3.5, 1e-300]])
    first = core.mpa(x)
    first[0, 0] = mpmath.mpf(7)
    again = core.mpa(x)
    assert again[0, 0] == mpmath.mpf(0.1) and again is not first
    assert same(again, np.array([[mpmath.mpf(float(e)) for e in r] for r in x], dtype=object))
