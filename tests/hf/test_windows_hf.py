"""Hugging Face Transformers' window and chunk mask functions against local_window_mask and
chunked_mask (masks.md, "Local windows (left, right)", "Chunked local attention"), evaluated
at absolute positions (q_idx = i + S - T, kv_idx = j, as with a cache), on the vectors."""

import numpy as np
import pytest
import torch
from attnspec.spec.vectors import default_spec
from transformers import masking_utils as mu
from transformers.models.gemma3 import configuration_gemma3, modeling_gemma3

SPEC = default_spec()


def evaluate(fn, t: int, s: int, causal: bool) -> np.ndarray:
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        p = i + s - t
        for j in range(s):
            out[i, j] = bool(fn(0, 0, p, j)) and (j <= p or not causal)
    return out


def vectors(function, where=lambda a: True):
    return [v for v in SPEC.vectors if v.function == function and v.expect == "value"
            and not v.deprecated and where(v.attributes)]


@pytest.mark.parametrize("v", vectors("sliding_window_mask"), ids=lambda v: v.id)
def test_sliding_window_overlay_w_is_sliding_window_w(v):
    a = v.attributes
    got = evaluate(mu.sliding_window_overlay(a["window"]), a["t"], a["s"], causal=True)
    assert np.array_equal(got, v.outputs["mask"])


@pytest.mark.parametrize("v", vectors("local_window_mask", lambda a: a["left"] is not None
                                      and a["left"] == a["right"]), ids=lambda v: v.id)
def test_bidirectional_overlay_w_is_local_window_w_w(v):
    a = v.attributes
    got = evaluate(mu.sliding_window_bidirectional_overlay(a["left"]), a["t"], a["s"], causal=False)
    assert np.array_equal(got, v.outputs["mask"])


def test_gemma3_bidirectional_sliding_window_w_is_local_window_w_half():
    """config.sliding_window = 4 becomes 4 // 2 + 1 = 3 and |q - k| < 3: left = right = 2,
    masks/local-009."""
    v = SPEC.vector("masks/local-009")
    config = configuration_gemma3.Gemma3TextConfig(sliding_window=4, use_bidirectional_attention=True)
    assert config.sliding_window == 3
    fn = modeling_gemma3._bidirectional_window_overlay(config.sliding_window)
    assert np.array_equal(evaluate(fn, 7, 7, causal=False), v.outputs["mask"])


@pytest.mark.parametrize("v", vectors("chunked_mask", lambda a: a.get("causal", True)),
                         ids=lambda v: v.id)
def test_chunked_overlay_is_chunked_mask(v):
    a = v.attributes
    fn = mu.chunked_overlay(a["chunk"], torch.zeros(1, dtype=torch.long))
    assert np.array_equal(evaluate(fn, a["t"], a["s"], causal=True), v.outputs["mask"])
