"""rope_frequencies' rules (backends/_rope.py, float64, which the vectors tie to the mpmath
oracle) against transformers' ROPE_INIT_FUNCTIONS, the reference for the conventions (float32
there, so rtol 2e-6); and planted bugs in the rules, each caught by transformers' values."""

from unittest import mock

import numpy as np
import pytest
from attnspec.backends import _rope

K, BASE, L0 = 16, 10000.0, 64
SHORT, LONG = [1.0 + i / 8 for i in range(K // 2)], [2.0 + i for i in range(K // 2)]

CASES = [
    ("default", {}, None),
    ("linear", {"factor": 4.0}, None),
    ("dynamic", {"factor": 2.0}, 200),
    ("dynamic", {"factor": 2.0}, 30),
    ("yarn", {"factor": 8.0, "original_max_position_embeddings": L0}, None),
    ("yarn", {"factor": 8.0, "original_max_position_embeddings": L0, "beta_fast": 4.0,
              "beta_slow": 0.5, "mscale": 1.0, "mscale_all_dim": 0.5}, None),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": L0, "truncate": False}, None),
    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": L0}, None),
    ("longrope", {"short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": L0}, 100),
    ("longrope", {"short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": L0}, 40),
]


def _hf(rope_type, params, seq_len):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    max_pos = 4 * L0 if rope_type == "longrope" else L0
    cfg = LlamaConfig(hidden_size=2 * K, num_attention_heads=2, max_position_embeddings=max_pos,
                      rope_parameters={"rope_type": rope_type, "rope_theta": BASE, **params})
    if rope_type == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        inv, att = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        inv, att = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    return inv.double().numpy(), float(att), max_pos


def _agrees(rope_type, params, seq_len):
    inv, att, max_pos = _hf(rope_type, params, seq_len)
    got, m = _rope.frequencies(head_dim=K, base=BASE, rope_type=rope_type, seq_len=seq_len,
                               max_position_embeddings=max_pos, **params)
    return np.allclose(got, inv, rtol=2e-6, atol=0) and abs(m - att) <= 1e-12 * abs(att)


@pytest.mark.parametrize("rope_type,params,seq_len", CASES)
def test_rules_match_transformers(rope_type, params, seq_len):
    assert _agrees(rope_type, params, seq_len)


def _llama3_edges_swapped(theta, s, l0, low, high):
    w = 2 * np.pi / theta
    sigma = (l0 / w - low) / (high - low)
    smooth = (1 - sigma) * theta / s + sigma * theta
    return np.where(w < l0 / low, theta, np.where(w > l0 / high, theta / s, smooth))


def _dynamic_exponent_k_minus_1(k, base, exponent, s, l0, seq_len):
    length = l0 if seq_len is None else max(seq_len, l0)
    return (base * (s * length / l0 - (s - 1)) ** (k / (k - 1))) ** -exponent


MUTANTS = {
    "llama3-band-edges-swapped": ("llama3", {"_llama3": _llama3_edges_swapped}),
    "llama3-no-band": ("llama3", {"_llama3": lambda theta, s, l0, low, high: theta / s}),
    "yarn-attention-factor-dropped": ("yarn", {"_yarn_attention": lambda *_: 1.0}),
    "dynamic-exponent-k-over-k-minus-1": ("dynamic", {"_dynamic": _dynamic_exponent_k_minus_1}),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_rule_bug_is_caught_by_transformers(name):
    rope_type, rules = MUTANTS[name]
    relevant = [c for c in CASES if c[0] == rope_type]
    with mock.patch.multiple(_rope, **rules):
        assert relevant and not all(_agrees(*c) for c in relevant), name
