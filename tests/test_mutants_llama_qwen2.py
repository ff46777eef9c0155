"""Planted bugs in llama_decoder_only's attention_bias and tie_embeddings (Qwen2's model,
issue 25 item 6) that the llama vectors (model-bias-*, model-tied-*, model-qwen2-*, grad-019
to grad-021) must catch at every dtype."""

import math

import numpy as np
import pytest
from attnspec.backends.composite.decoding import Decoding
from attnspec.backends.numpy import embedding, layers

from .mutants import assert_rejected, composite_mutant, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails


def tied_head_scaled(self, h, eps, p, trace=None, tie=False):
    """The tied head read as the embedding is (table * sqrt(D)): logits sqrt(D) too large."""
    logits = Decoding.llama_head(self, h, eps, p, trace, tie=tie)
    return logits * math.sqrt(h.shape[-1]) if tie else logits


def bias_first_layer_only(x, mask=None, *, params, attention_bias=False, **kw):
    """attention_bias passed on to layer 0 only (the later layers' b_q, b_k, b_v unread)."""
    if attention_bias and not params.path("attn.w_q").startswith("layers.0."):
        kept = {k: params.require(k) for k in params.keys() if not k.startswith("attn.b_")}
        return layers.llama_layer(x, mask, params=kept, **kw)
    return layers.llama_layer(x, mask, params=params, attention_bias=attention_bias, **kw)


def bias_after_norm_dropped(x, mask=None, *, params, attention_bias=False, **kw):
    """attention_bias not passed on to any layer: the biases read as zero."""
    kept = {k: params.require(k) for k in params.keys() if not k.startswith("attn.b_")}
    return layers.llama_layer(x, mask, params=kept, **kw)


MUTANTS = {
    "tied-head-scaled-by-sqrt-d": composite_mutant(Decoding, methods={"llama_head": tied_head_scaled}),
    "bias-first-layer-only": composite_mutant(Decoding, kernels={"llama_layer": bias_first_layer_only}),
    "bias-not-passed-on": composite_mutant(Decoding, kernels={"llama_layer": bias_after_norm_dropped}),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_llama_model_qwen2_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[name], "llama")


def test_the_bias_mutants_fail_the_model_bias_vectors_not_only_by_a_crash():
    """The two bias bugs compute (no refused parameter): each fails the model's bias vectors
    by its numbers, at every dtype."""
    for name in ("bias-first-layer-only", "bias-not-passed-on"):
        fails = rejections(MUTANTS[name], "llama", "bias")
        assert all(n > 0 for n in fails.values()), (name, fails)


def tied_table_grad_dropped(cotangents, x, *, tied=False, params):
    """The tied head's dtable left out: d embed.table is the embedding's scatter-add only."""
    gi, g = embedding.lm_head_vjp(cotangents, x, tied=tied, params=params)
    return gi, ({k: np.zeros_like(v) for k, v in g.items()} if tied else g)


def test_tied_table_grad_dropped_fails_at_every_dtype():
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(lm_head_vjp=tied_table_grad_dropped), "llama")
