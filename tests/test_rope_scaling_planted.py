"""Planted bugs in rope's scaling and rotary_dim and in rope_frequencies (issue 25 item 1): each
fails at least one vector at every dtype's tolerance (tests/mutants.py)."""

from unittest import mock

import numpy as np
import pytest
from attnspec.backends import _rope
from attnspec.backends.numpy import positional

from .mutants import assert_rejected, mutant, rejections


def _patched(fn, **rules):
    """fn with some of backends/_rope.py's rules replaced for the length of each call."""
    def broken(*args, **kwargs):
        with mock.patch.multiple(_rope, **rules):
            return fn(*args, **kwargs)
    return broken


def _llama3_edges_swapped(theta, s, l0, low, high):
    """Meta's apply_scaling with high_freq_wavelen = L0 / low and low_freq_wavelen = L0 / high."""
    w = 2 * np.pi / theta
    sigma = (l0 / w - low) / (high - low)
    smooth = (1 - sigma) * theta / s + sigma * theta
    return np.where(w < l0 / low, theta, np.where(w > l0 / high, theta / s, smooth))


def _yarn_attention_dropped(*_):
    return 1.0


def _dynamic_exponent_k_minus_1(k, base, exponent, s, l0, seq_len):
    length = l0 if seq_len is None else max(seq_len, l0)
    return (base * (s * length / l0 - (s - 1)) ** (k / (k - 1))) ** -exponent


RULE_BUGS = {
    "llama3_band_edges_swapped": {"_llama3": _llama3_edges_swapped},
    "yarn_attention_factor_dropped": {"_yarn_attention": _yarn_attention_dropped},
    "dynamic_exponent_k_over_k_minus_1": {"_dynamic": _dynamic_exponent_k_minus_1},
}


@pytest.mark.parametrize("bug", sorted(RULE_BUGS))
def test_rope_scaling_rule_bug_is_rejected(bug):
    assert_rejected(mutant(rope=_patched(positional.rope, **RULE_BUGS[bug])), "rope")


@pytest.mark.parametrize("bug", sorted(RULE_BUGS))
def test_rope_frequencies_rule_bug_fails_float64_and_float32(bug):
    """rope_frequencies' vectors are judged at float64 and float32 only (configuration)."""
    broken = mutant(rope_frequencies=_patched(positional.rope_frequencies, **RULE_BUGS[bug]))
    fails = rejections(broken, "rope_frequencies")
    assert fails["float64"] and fails["float32"], fails


def rope_linear_on_positions_too(x, *, scaling=None, **kw):
    """Position interpolation applied twice: p / s times theta_i / s (theta_i / s^2 in effect)."""
    if scaling and scaling.get("rope_type") == "linear":
        scaling = dict(scaling, factor=scaling["factor"] ** 2)
    return positional.rope(x, scaling=scaling, **kw)


def rope_rotates_last_dims(x, *, rotary_dim=None, **kw):
    """The last rotary_dim features rotated and the first passed through."""
    x = np.asarray(x)
    if rotary_dim is None or rotary_dim == x.shape[-1]:
        return positional.rope(x, **kw)
    cut = x.shape[-1] - rotary_dim
    return np.concatenate([x[..., :cut], positional.rope(x[..., cut:], **kw)], axis=-1)


def rope_rotary_dim_ignored(x, *, rotary_dim=None, **kw):
    return positional.rope(x, **kw)


def rope_theta_from_full_width(x, *, rotary_dim=None, base=10000.0, **kw):
    """theta_i = base^(-2i/K) on the first R features instead of base^(-2i/R)."""
    x = np.asarray(x)
    k = x.shape[-1]
    r = k if rotary_dim is None else rotary_dim
    if r in (0, k):
        return positional.rope(x, base=base, **kw)
    # (base^(R/K))^(-2i/R) = base^(-2i/K)
    return np.concatenate([positional.rope(x[..., :r], base=base ** (r / k), **kw), x[..., r:]], axis=-1)


@pytest.mark.parametrize("broken", [rope_linear_on_positions_too, rope_rotates_last_dims,
                                    rope_rotary_dim_ignored, rope_theta_from_full_width],
                         ids=lambda f: f.__name__)
def test_rope_partial_or_scaling_bug_is_rejected(broken):
    assert_rejected(mutant(rope=broken), "rope")
