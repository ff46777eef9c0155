"""Planted bugs in the Transformer layers, stacks, models and greedy decoding that the
vectors must catch at every dtype."""

from unittest.mock import patch

import numpy as np
import pytest
from attnspec.backends.numpy import attention, decoding, layers, models

from .mutants import assert_rejected, mutant, rejections

FLIP = {"post": "pre", "pre": "post"}


def norm_swapped(fn):
    """Post-norm computed as pre-norm and vice versa."""
    def broken(*args, norm="post", **kw):
        return fn(*args, norm=FLIP[norm], **kw)
    return broken


def _with(target, name, replacement, fn):
    def broken(*args, **kw):
        with patch.object(target, name, replacement):
            return fn(*args, **kw)
    return broken


def _cross_mha(swap):
    real = layers.mha

    def mha(query, key, value, mask=None, *, num_heads, params):
        if params.prefix.endswith("cross_attn."):
            query, key, value = swap(query, key, value)
            if mask is not None and np.shape(mask)[-1] != key.shape[1]:
                mask = None
        return real(query, key, value, mask, num_heads=num_heads, params=params)
    return mha


memory_as_query = _cross_mha(lambda q, k, v: (k, q, q))
decoder_input_as_memory = _cross_mha(lambda q, k, v: (q, q, q))


def residual_from_normed(x, f, p, norm_name, norm, eps):
    """pre: LN(x) + f(LN(x)) (the residual taken after the norm); post: LN(f(x)) + x."""
    if norm == "post":
        return layers.layer_norm(f(x), eps=eps, params=p.scope(norm_name)) + x
    h = layers.layer_norm(x, eps=eps, params=p.scope(norm_name))
    return h + f(h)


def no_final_norm(layer, x, num_layers, norm, eps, params, trace, **kw):
    p = layers.check.params_of(params)
    h = x
    for i in range(num_layers):
        h = layer(h, norm=norm, eps=eps, params=p.scope(f"layers.{i}"),
                  trace=layers.scope(trace, f"layers.{i}"), **kw)
    layers.record(trace, "final_norm.output", h)
    return h


_embedding = models.embedding


def causal_off_by_one(ids, *, pad_id, t, num_heads=1, causal=True):
    """j < i + 1 + 1: every query also sees the next token."""
    keep = attention.padding_mask(ids, pad_id=pad_id)
    s = keep.shape[-1]
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return np.broadcast_to(keep & (j <= i + 1 + (s - t)), (keep.shape[0], num_heads, t, s))


def causal_strict(ids, *, pad_id, t, num_heads=1, causal=True):
    """j < i: the diagonal is masked (the first query attends nothing)."""
    keep = attention.padding_mask(ids, pad_id=pad_id)
    s = keep.shape[-1]
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return np.broadcast_to(keep & (j < i + (s - t)), (keep.shape[0], num_heads, t, s))


def padding_ignored(ids, *, pad_id):
    return np.ones((ids.shape[0], 1, 1, ids.shape[1]), dtype=bool)


def combined_padding_ignored(ids, *, pad_id, t, num_heads=1, causal=True):
    return attention.combined_mask(np.ones_like(ids), pad_id=0, t=t, num_heads=num_heads,
                                   causal=causal)


MUTANTS = {
    # component: {mutant name: overrides}
    "encoder_layer": {
        "norm-swapped": dict(encoder_layer=norm_swapped(layers.encoder_layer)),
        "residual-from-normed": dict(encoder_layer=_with(
            layers, "_sublayer", residual_from_normed, layers.encoder_layer)),
    },
    "decoder_layer": {
        "norm-swapped": dict(decoder_layer=norm_swapped(layers.decoder_layer)),
        "memory-as-query": dict(decoder_layer=_with(
            layers, "mha", memory_as_query, layers.decoder_layer)),
        "decoder-input-as-memory": dict(decoder_layer=_with(
            layers, "mha", decoder_input_as_memory, layers.decoder_layer)),
        "residual-from-normed": dict(decoder_layer=_with(
            layers, "_sublayer", residual_from_normed, layers.decoder_layer)),
    },
    "encoder": {
        "norm-swapped": dict(encoder=norm_swapped(layers.encoder)),
        "no-final-norm": dict(encoder=_with(layers, "_stack", no_final_norm, layers.encoder)),
    },
    "decoder": {
        "no-final-norm": dict(decoder=_with(layers, "_stack", no_final_norm, layers.decoder)),
        "memory-as-query": dict(decoder=_with(layers, "mha", memory_as_query, layers.decoder)),
    },
    "transformer": {
        "no-sqrt-d-scale": dict(transformer=_with(
            models, "embedding",
            lambda ids, *, scale=True, params: _embedding(ids, scale=False, params=params),
            models.transformer)),
        "causal-off-by-one": dict(transformer=_with(
            models, "combined_mask", causal_off_by_one, models.transformer)),
        "padding-ignored": dict(transformer=_with(
            models, "padding_mask", padding_ignored, models.transformer)),
        "decoder-input-as-memory": dict(transformer=_with(
            layers, "mha", decoder_input_as_memory, models.transformer)),
        "norm-swapped": dict(transformer=norm_swapped(models.transformer)),
    },
    "encoder_only": {
        "padding-ignored": dict(encoder_only=_with(
            models, "padding_mask", padding_ignored, models.encoder_only)),
        "sqrt-d-scaled": dict(encoder_only=_with(
            models, "embedding",
            lambda ids, *, scale=True, params: _embedding(ids, scale=True, params=params),
            models.encoder_only)),
    },
    "decoder_only": {
        "causal-off-by-one": dict(decoder_only=_with(
            models, "combined_mask", causal_off_by_one, models.decoder_only)),
        "causal-strict": dict(decoder_only=_with(
            models, "combined_mask", causal_strict, models.decoder_only)),
        "padding-ignored": dict(decoder_only=_with(
            models, "combined_mask", combined_padding_ignored, models.decoder_only)),
        "no-final-norm": dict(decoder_only=_with(
            layers, "_stack", no_final_norm, models.decoder_only)),
    },
}


def _greedy_no_pad_after_eos(*args, **kw):
    """Rows go on generating after EOS (no padding)."""
    return decoding.greedy_decode(*args, **{**kw, "eos_id": -1})


def _greedy_positions_not_offset(*args, **kw):
    """The position counter of the cache restarts at 0 each step (positions not offset)."""
    real = models.learned_embed
    with patch.object(decoding, "learned_embed", lambda ids, p, offset=0: real(ids, p, 0)):
        return decoding.greedy_decode(*args, **kw)


MUTANTS["greedy_decode"] = {
    "no-pad-after-eos": dict(greedy_decode=_greedy_no_pad_after_eos),
    "cache-positions-not-offset": dict(greedy_decode=_greedy_positions_not_offset),
}

CASES = [(comp, name) for comp, ms in MUTANTS.items() for name in ms]


@pytest.mark.parametrize(("component", "name"), CASES, ids=[f"{c}:{n}" for c, n in CASES])
def test_layers_mutant_is_rejected(component, name):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(**MUTANTS[component][name]), component)


@pytest.mark.parametrize("component", list(MUTANTS))
def test_correct_layers_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}
