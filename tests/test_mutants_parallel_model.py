"""Planted bugs in parallel_decoder_only (GPT-NeoX's and Falcon's whole model, issue 25 item
6) that the parallel_layer vectors (model-*, grad-006 to grad-009) must catch at every dtype."""

import math

import numpy as np
import pytest
from attnspec.backends.composite.models import ParallelModels
from attnspec.backends.numpy import embedding, norm

from .mutants import assert_rejected, composite_mutant, mutant
from .test_mutants_grad import assert_gradient_bug_fails


def _final(params) -> bool:
    return params.path("gamma") == "final_norm.gamma" if hasattr(params, "path") else False


def final_norm_rms(x, *, eps=1e-5, params):
    """The final norm an RMSNorm (Llama's) where GPT-NeoX and Falcon have a LayerNorm."""
    if _final(params):
        return norm.rms_norm(x, eps=eps, params={"gamma": params.require("gamma")})
    return norm.layer_norm(x, eps=eps, params=params)


def final_norm_no_beta(x, *, eps=1e-5, params):
    """final_norm.beta left out."""
    if _final(params):
        return norm.layer_norm(x, eps=eps, params={"gamma": params.require("gamma"),
                                                   "beta": 0 * params.require("beta")})
    return norm.layer_norm(x, eps=eps, params=params)


def embedding_scaled(ids, *, scale=True, params):
    """The embedding scaled by sqrt(D) (the 2017 Transformer's and Gemma's), not GPT-NeoX's."""
    return embedding.embedding(ids, scale=True, params=params)


def no_padding(ids, *, pad_id):
    """pad_id keys not masked (the causal mask alone)."""
    return np.ones((ids.shape[0], 1, 1, ids.shape[1]), dtype=bool)


def tied_head_scaled(x, *, tied=False, params):
    """The tied head read as the embedding is (table * sqrt(D))."""
    logits = embedding.lm_head(x, tied=tied, params=params)
    return logits * math.sqrt(x.shape[-1]) if tied else logits


def _k(**kernels):
    return composite_mutant(ParallelModels, kernels=kernels)


MUTANTS = {
    "final-norm-rms": _k(layer_norm=final_norm_rms),
    "final-norm-no-beta": _k(layer_norm=final_norm_no_beta),
    "embedding-scaled-by-sqrt-d": _k(embedding=embedding_scaled),
    "pad-id-not-masked": _k(padding_mask=no_padding),
    "tied-head-scaled-by-sqrt-d": _k(lm_head=tied_head_scaled),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_parallel_model_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[name], "parallel_layer")


def final_norm_grad_no_beta(cotangents, x, *, eps=1e-5, variant="canonical", params):
    """d final_norm.beta (and every LayerNorm's dbeta) left out."""
    gi, g = norm.layer_norm_vjp(cotangents, x, eps=eps, variant=variant, params=params)
    return gi, {k: (0 * v if k == "beta" else v) for k, v in g.items()}


def tied_table_grad_dropped(cotangents, x, *, tied=False, params):
    """The tied head's dtable left out."""
    gi, g = embedding.lm_head_vjp(cotangents, x, tied=tied, params=params)
    return gi, ({k: np.zeros_like(v) for k, v in g.items()} if tied else g)


@pytest.mark.parametrize("bug", [final_norm_grad_no_beta, tied_table_grad_dropped])
def test_parallel_model_backward_bug_fails_at_every_dtype(bug):
    name = "layer_norm_vjp" if bug is final_norm_grad_no_beta else "lm_head_vjp"
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(**{name: bug}), "parallel_layer")


def test_correct_parallel_model_is_not_rejected():
    from .mutants import rejections

    assert set(rejections(_k(), "parallel_layer").values()) == {0}
