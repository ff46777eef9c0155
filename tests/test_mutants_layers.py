"""Planted bugs in the Transformer layers, stacks, models and greedy decoding that the
vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends import _checks as check
from attnspec.backends.composite.decoding import Decoding
from attnspec.backends.numpy import attention, decoding, embedding, layers, models, multihead, norm

from .mutants import assert_rejected, composite_mutant, mutant, rejections

FLIP = {"post": "pre", "pre": "post"}


def norm_swapped(fn):
    """Post-norm computed as pre-norm and vice versa."""
    def broken(*args, norm="post", **kw):
        return fn(*args, norm=FLIP[norm], **kw)
    return broken


def _cross_mha(swap):
    def mha(query, key, value, mask=None, *, num_heads, params):
        if params.prefix.endswith("cross_attn."):
            query, key, value = swap(query, key, value)
            if mask is not None and np.shape(mask)[-1] != key.shape[1]:
                mask = None
        return multihead.mha(query, key, value, mask, num_heads=num_heads, params=params)
    return mha


memory_as_query = _cross_mha(lambda q, k, v: (k, q, q))
decoder_input_as_memory = _cross_mha(lambda q, k, v: (q, q, q))


def residual_from_normed(self, x, f, p, norm_name, norm_kind, eps):
    """pre: LN(x) + f(LN(x)) (the residual taken after the norm); post: LN(f(x)) + x."""
    if norm_kind == "post":
        return norm.layer_norm(f(x), eps=eps, params=p.scope(norm_name)) + x
    h = norm.layer_norm(x, eps=eps, params=p.scope(norm_name))
    return h + f(h)


def no_final_norm(self, layer, x, num_layers, norm_kind, eps, params, trace, **kw):
    p = check.params_of(params)
    h = x
    for i in range(num_layers):
        h = layer(h, norm=norm_kind, eps=eps, params=p.scope(f"layers.{i}"),
                  trace=None if trace is None else trace.scope(f"layers.{i}"), **kw)
    if trace is not None:
        trace.record("final_norm.output", h)
    return h


def _methods(**methods):
    return composite_mutant(Decoding, methods=methods)


def _kernels(**kernels):
    return composite_mutant(Decoding, kernels=kernels)


def unscaled_embedding(ids, *, scale=True, params):
    return embedding.embedding(ids, scale=False, params=params)


def scaled_embedding(ids, *, scale=True, params):
    return embedding.embedding(ids, scale=True, params=params)


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
    # component: {mutant name: the mutant backend}
    "encoder_layer": {
        "norm-swapped": mutant(encoder_layer=norm_swapped(layers.encoder_layer)),
        "residual-from-normed": _methods(_sublayer=residual_from_normed),
    },
    "decoder_layer": {
        "norm-swapped": mutant(decoder_layer=norm_swapped(layers.decoder_layer)),
        "memory-as-query": _kernels(mha=memory_as_query),
        "decoder-input-as-memory": _kernels(mha=decoder_input_as_memory),
        "residual-from-normed": _methods(_sublayer=residual_from_normed),
    },
    "encoder": {
        "norm-swapped": mutant(encoder=norm_swapped(layers.encoder)),
        "no-final-norm": _methods(_stack=no_final_norm),
    },
    "decoder": {
        "no-final-norm": _methods(_stack=no_final_norm),
        "memory-as-query": _kernels(mha=memory_as_query),
    },
    "transformer": {
        "no-sqrt-d-scale": _kernels(embedding=unscaled_embedding),
        "causal-off-by-one": _kernels(combined_mask=causal_off_by_one),
        "padding-ignored": _kernels(padding_mask=padding_ignored),
        "decoder-input-as-memory": _kernels(mha=decoder_input_as_memory),
        "norm-swapped": mutant(transformer=norm_swapped(models.transformer)),
    },
    "encoder_only": {
        "padding-ignored": _kernels(padding_mask=padding_ignored),
        "sqrt-d-scaled": _kernels(embedding=scaled_embedding),
    },
    "decoder_only": {
        "causal-off-by-one": _kernels(combined_mask=causal_off_by_one),
        "causal-strict": _kernels(combined_mask=causal_strict),
        "padding-ignored": _kernels(combined_mask=combined_padding_ignored),
        "no-final-norm": _methods(_stack=no_final_norm),
    },
}


def _greedy_no_pad_after_eos(*args, **kw):
    """Rows go on generating after EOS (no padding)."""
    return decoding.greedy_decode(*args, **{**kw, "eos_id": -1})


def _positions_not_offset(self, ids, p, offset=0):
    """The position counter of the cache restarts at 0 each step (positions not offset)."""
    return Decoding.learned_embed(self, ids, p, 0)


MUTANTS["greedy_decode"] = {
    "no-pad-after-eos": mutant(greedy_decode=_greedy_no_pad_after_eos),
    "cache-positions-not-offset": _methods(learned_embed=_positions_not_offset),
}

CASES = [(comp, name) for comp, ms in MUTANTS.items() for name in ms]


@pytest.mark.parametrize(("component", "name"), CASES, ids=[f"{c}:{n}" for c, n in CASES])
def test_layers_mutant_is_rejected(component, name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[component][name], component)


@pytest.mark.parametrize("component", list(MUTANTS))
def test_correct_layers_backend_is_not_rejected(component):
    assert set(rejections(mutant(), component).values()) == {0}
    assert set(rejections(composite_mutant(Decoding), component).values()) == {0}
