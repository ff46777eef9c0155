"""The sampling filters (spec/components/sampling.md) against transformers' warpers
(`generation/logits_process.py`) of the installed release: the same order and the same rules."""

import numpy as np
import pytest

pytest.importorskip("transformers")  # as the other tests/hf modules: run by tox -e hf

import torch
from attnspec.backends.numpy import sampling
from transformers.generation import logits_process as lp


def _transformers_probs(x, temperature, top_k, top_p, min_p, m):
    """softmax of the scores transformers' warpers leave, in the order generate() adds them."""
    warpers = [lp.TemperatureLogitsWarper(temperature), lp.TopKLogitsWarper(top_k, min_tokens_to_keep=m),
               lp.TopPLogitsWarper(top_p, min_tokens_to_keep=m),
               lp.MinPLogitsWarper(min_p, min_tokens_to_keep=m)]
    scores = torch.tensor(x)
    for w in warpers:
        scores = w(None, scores)
    return torch.softmax(scores, dim=-1).numpy()


@pytest.mark.parametrize("attrs", [(0.5, 3, 0.8, 0.1, 1), (1.5, 6, 0.6, 0.05, 2), (1.0, 2, 0.99, 0.5, 3)])
def test_filters_equal_transformers_warpers_without_ties(attrs):
    """Distinct logits: the spec's filters are transformers' warpers (same order, same rules)."""
    x = np.array([[1.5, -0.25, 0.75, 2.0, -1.0, 0.5, 0.0, -2.0],
                  [-1.5, 0.25, 1.25, -0.5, 3.0, -0.75, 1.0, 0.5]])
    t, k, p, min_p, m = attrs
    ours = sampling.sampling_filter(x, temperature=t, top_k=k, top_p=p, min_p=min_p,
                                    min_tokens_to_keep=m)
    np.testing.assert_allclose(ours, _transformers_probs(x, t, k, p, min_p, m), atol=1e-12)


def test_top_k_ties_are_kept_as_transformers_keeps_them():
    x = np.array([[1.0, 3.0, 1.0, 2.0, 1.0, 0.0]])
    ours = sampling.sampling_filter(x, top_k=3)
    theirs = _transformers_probs(x, 1.0, 3, 1.0, 0.0, 1)
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
