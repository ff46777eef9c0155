"""Planted bugs in Gemma's (1 + w) RMSNorm and the Gemma 2/3 layer (issue 25) that the vectors
must catch at every dtype; the one they cannot catch at the half dtypes, (1 + w) added in
bfloat16, is caught there by tests/test_gemma_norm.py instead (one rounding, below bfloat16's
rtol)."""

import functools

import ml_dtypes
import numpy as np
import pytest
from attnspec.backends.composite.layers import GemmaLayers
from attnspec.backends.composite.models import GemmaModels
from attnspec.backends.numpy import norm

from .mutants import assert_rejected, composite_mutant, mutant, rejections


def _methods(**methods):
    return composite_mutant(GemmaLayers, methods=methods)


# -- rms_norm(unit_offset=True) ---------------------------------------------------------------

def _unit(body):
    def rms_norm(x, *, eps=1e-6, unit_offset=False, params):
        if not unit_offset:
            return norm.rms_norm(x, eps=eps, params=params)
        return body(np.asarray(x, dtype=np.float64), eps, np.asarray(params["gamma"], np.float64))
    return rms_norm


def _z(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


# 1 + w formed in bfloat16 (w kept in bfloat16), then the float32/float64 multiply
offset_in_bfloat16 = _unit(lambda x, eps, w: _z(x, eps) * (1 + w).astype(ml_dtypes.bfloat16)
                           .astype(np.float64))
offset_ignored = _unit(lambda x, eps, w: _z(x, eps) * w)          # w read as the gain
offset_twice = _unit(lambda x, eps, w: _z(x, eps) * (2 + w))      # a converter's +1 and the kernel's
norm_twice = _unit(lambda x, eps, w: _z(_z(x, eps) * (1 + w), eps) * (1 + w))


def always_offset(x, *, eps=1e-6, unit_offset=False, params):
    """1 added whatever unit_offset says."""
    return norm.rms_norm(x, eps=eps, unit_offset=True, params=params)


RMS = {"offset-ignored": offset_ignored, "offset-twice": offset_twice,
       "norm-twice": norm_twice, "always-offset": always_offset}


@pytest.mark.parametrize("name", sorted(RMS))
def test_unit_offset_mutant_is_rejected(name):
    assert_rejected(mutant(rms_norm=RMS[name]), "rms_norm")


def test_offset_in_bfloat16_rejected_at_float64_and_float32_only():
    """At float64 and float32 rms_norm/unit-offset-bf16-001 catches it; at float16 and
    bfloat16 it moves y by <= 2**-9 relative, inside rtol: tests/test_gemma_norm.py pins it."""
    fails = rejections(mutant(rms_norm=offset_in_bfloat16), "rms_norm", "unit-offset")
    assert fails["float64"] >= 1 and fails["float32"] >= 1
    assert fails["float16"] == fails["bfloat16"] == 0


# -- gemma_layer ------------------------------------------------------------------------------

def _norm_plain(self, h, eps, p, name):
    """(1 + w) dropped in the layer's norms: a Llama RMSNorm on Gemma's stored w."""
    return self.k.rms_norm(h, eps=eps, params=p.scope(name))


def _norm_twice(self, h, eps, p, name):
    once = GemmaLayers.gemma_norm(self, h, eps, p, name)
    return GemmaLayers.gemma_norm(self, once, eps, p, name)


def _no_qk_norm(self, n1, p, a):
    return GemmaLayers.gemma_qkv(self, n1, p, {**a, "qk_norm": False})


def _scalar_ignored(self, n1, keep, a, p, trace):
    return GemmaLayers.gemma_attention(self, n1, keep, {**a, "s": None}, p, trace)


def _softcap_ignored(self, n1, keep, a, p, trace):
    return GemmaLayers.gemma_attention(self, n1, keep, {**a, "softcap": None}, p, trace)


def _skipping(*names):
    def gemma_norm(self, h, eps, p, name):
        return h if name in names else GemmaLayers.gemma_norm(self, h, eps, p, name)
    return gemma_norm


def _qk_norm_after_rope(self, n1, p, a):
    q, k, v, width = GemmaLayers.gemma_qkv(self, n1, p, {**a, "qk_norm": False})
    if a["qk_norm"]:
        q, k = self.gemma_norm(q, a["eps"], p, "q_norm"), self.gemma_norm(k, a["eps"], p, "k_norm")
    return q, k, v, width


LAYER = {
    "unit-offset-dropped": _methods(gemma_norm=_norm_plain),
    "norm-applied-twice": _methods(gemma_norm=_norm_twice),
    "qk-norm-left-out": _methods(gemma_qkv=_no_qk_norm),
    "qk-norm-after-rope": _methods(gemma_qkv=_qk_norm_after_rope),
    "query-pre-attn-scalar-ignored": _methods(gemma_attention=_scalar_ignored),
    "softcap-ignored": _methods(gemma_attention=_softcap_ignored),
    "post-ffn-norm-skipped": _methods(gemma_norm=_skipping("post_ffn_norm")),
    "post-attn-norm-skipped": _methods(gemma_norm=_skipping("post_attn_norm")),
    "pre-ffn-norm-skipped": _methods(gemma_norm=_skipping("pre_ffn_norm")),
}


@pytest.mark.parametrize("name", sorted(LAYER))
def test_gemma_layer_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(LAYER[name], "gemma")


def test_correct_gemma_backend_is_not_rejected():
    assert set(rejections(composite_mutant(GemmaLayers), "gemma").values()) == {0}


# -- gemma_decoder_only ----------------------------------------------------------------------------

def _model(**methods):
    return composite_mutant(GemmaModels, methods=methods)


def _model_with(**changes):
    """The model with its embedding, window alternation or head changed."""
    def gemma_decoder_only(self, ids, **kw):
        return GemmaModels.gemma_decoder_only(_Changed(self, changes), ids, **kw)
    return _model(gemma_decoder_only=gemma_decoder_only)


class _Changed:
    """self with some kernels replaced (the model's calls go through self.k)."""

    def __init__(self, model, changes):
        self._model, self.k = model, _Kernels(model.k, changes)

    def __getattr__(self, name):
        return getattr(self._model, name)


class _Kernels:
    def __init__(self, k, changes):
        self._k, self._changes = k, changes

    def __getattr__(self, name):
        if name in self._changes:
            return functools.partial(self._changes[name], self._k)
        return getattr(self._k, name)


def _unscaled(k, ids, *, scale=True, params):
    return k.embedding(ids, scale=False, params=params)


def _window_everywhere(k, h, mask=None, **kw):
    """The window on every layer, not only the even (local) ones."""
    return k.gemma_layer(h, mask, **{**kw, "window": _window_everywhere.window or kw["window"]})


def _no_final_softcap(k, logits, *, cap):
    return logits


def _plain_final_norm(k, h, *, eps=1e-6, unit_offset=False, params):
    return k.rms_norm(h, eps=eps, params=params)


MODEL = {
    "embeddings-unscaled": _model_with(embedding=_unscaled),
    "final-softcap-ignored": _model_with(softcap=_no_final_softcap),
    "final-norm-without-offset": _model_with(rms_norm=_plain_final_norm),
}


def _window_on_all_layers():
    def gemma_decoder_only(self, ids, *, window=None, **kw):
        _window_everywhere.window = window
        return GemmaModels.gemma_decoder_only(_Changed(self, {"gemma_layer": _window_everywhere}),
                                              ids, window=window, **kw)
    return _model(gemma_decoder_only=gemma_decoder_only)


MODEL["window-on-every-layer"] = _window_on_all_layers()


@pytest.mark.parametrize("name", sorted(MODEL))
def test_gemma_model_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MODEL[name], "gemma")


def test_correct_gemma_model_is_not_rejected():
    assert set(rejections(composite_mutant(GemmaModels), "gemma").values()) == {0}
