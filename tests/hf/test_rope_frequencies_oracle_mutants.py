"""Planted bugs in the rope_frequencies oracle: transformers' reference values catch each one
(a guard that the comparison in test_rope_scaling_oracle.py can fail)."""

import mpmath
import numpy as np
import pytest
from attnspec.spec.oracle import rope_frequencies as rf

from tests.hf.test_rope_frequencies_oracle import BASE, CASES, K, _hf


def _llama3_edges_swapped(theta, factor, l0, low, high):
    return _llama3_edges_swapped.__wrapped__(theta, factor, l0, high, low)


def _yarn_attention_dropped(*_):
    return mpmath.mpf(1)


def _dynamic_wrong_exponent(k, b, factor, l0, seq_len):
    length = max(mpmath.mpf(seq_len), l0)
    b2 = b * mpmath.power(factor * length / l0 - (factor - 1), mpmath.mpf(k) / (k - 1))
    return [mpmath.power(b2, -mpmath.mpf(2 * i) / k) for i in range(k // 2)]


def _linear_twice(theta, factor, l0, low, high):  # stands in: llama3 dividing every theta by s
    return [t / factor for t in theta]


MUTANTS = {
    "llama3-band-edges-swapped": ("_llama3", _llama3_edges_swapped, "llama3"),
    "yarn-attention-factor-dropped": ("_yarn_attention", _yarn_attention_dropped, "yarn"),
    "dynamic-exponent-k-over-k-minus-1": ("_dynamic", _dynamic_wrong_exponent, "dynamic"),
    "llama3-no-band": ("_llama3", _linear_twice, "llama3"),
}


def _agrees(rope_type, params, seq_len):
    inv, att, max_pos = _hf(rope_type, params, seq_len)
    kw = dict(params)
    if rope_type == "dynamic":
        kw["original_max_position_embeddings"] = max_pos
    out = rf.rope_frequencies(head_dim=K, base=BASE, rope_type=rope_type, seq_len=seq_len,
                              max_position_embeddings=max_pos, **kw)
    return (np.allclose(np.array(out["inv_freq"], float), inv, rtol=2e-6)
            and abs(float(out["attention_factor"]) - att) <= 1e-12 * abs(att))


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_bug_is_caught(name, monkeypatch):
    attr, mutant, rope_type = MUTANTS[name]
    original = getattr(rf, attr)
    mutant.__wrapped__ = original
    monkeypatch.setattr(rf, attr, mutant)
    relevant = [c for c in CASES if c[0] == rope_type]
    assert relevant and not all(_agrees(*c) for c in relevant), name


def test_unmutated_oracle_agrees_on_every_case():
    assert all(_agrees(*c) for c in CASES)
