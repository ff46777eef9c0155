"""Planted bugs in the mixture-of-experts decoder layers and the DeepSeek-V3-style model
(moe_layers, issue 26 item 4) that the vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.composite.layers import Layers
from attnspec.backends.composite.moe_layers import MoeLayers
from attnspec.backends.numpy import embedding, layers, moe, norm

from .mutants import assert_rejected, composite_mutant, rejections


def _mutant(methods=None, kernels=None):
    return composite_mutant(MoeLayers, methods=methods, kernels=kernels)


def _router(**changes):
    """moe_tokens with some router attributes forced."""
    def moe_tokens(self, h, top_k, router, p):
        return MoeLayers.moe_tokens(self, h, top_k, {**router, **changes}, p)
    return moe_tokens


def _fold_time_major(self, h, top_k, router, p):
    """Tokens flattened b-major (b T + t) but folded back as if t-major (t B + b)."""
    b, t, d = h.shape
    flat = h.reshape(b * t, d)
    y, _ = moe.moe(flat, top_k=top_k, params=p, **router)
    return y.reshape(t, b, d).transpose(1, 0, 2)


def _no_bias(self, *args, bias=False, **kw):
    return Layers.llama_attention(self, *args, bias=False, **kw)


def _skip_norm(which):
    """rms_norm returning its input for the norm whose gain is ``which`` (a path suffix)."""
    def rms_norm(x, *, eps=1e-6, unit_offset=False, params):
        if getattr(params, "prefix", "").endswith(which):
            return x
        return norm.rms_norm(x, eps=eps, unit_offset=unit_offset, params=params)
    return rms_norm


def _mla_default_eps(x, mask=None, *, eps=1e-6, **kw):
    """The layer's eps not passed on to mla's latent norms."""
    return layers.mla(x, mask, **kw)


def _scaled_embedding(ids, *, scale=False, params):
    return embedding.embedding(ids, scale=True, params=params)


LAYER = {
    "renormalize-ignored": _mutant({"moe_tokens": _router(renormalize=False)}),
    "renormalize-always": _mutant({"moe_tokens": _router(renormalize=True)}),
    "routed-scaling-factor-ignored": _mutant({"moe_tokens": _router(routed_scaling_factor=1.0)}),
    "softmax-for-sigmoid": _mutant({"moe_tokens": _router(scoring="softmax")}),
    "tokens-folded-time-major": _mutant({"moe_tokens": _fold_time_major}),
    "attention-bias-ignored": _mutant({"llama_attention": _no_bias}),
    "window-ignored": _mutant({"llama_window": staticmethod(lambda window: None)}),
    "ffn-norm-skipped": _mutant(kernels={"rms_norm": _skip_norm("ffn_norm.")}),
    "attn-norm-skipped": _mutant(kernels={"rms_norm": _skip_norm("attn_norm.")}),
    "mla-eps-default": _mutant(kernels={"mla": _mla_default_eps}),
    "embeddings-scaled": _mutant(kernels={"embedding": _scaled_embedding}),
}


def _final_norm(x, *, eps=1e-6, unit_offset=False, params):
    if getattr(params, "prefix", "") == "norm.":
        return x
    return norm.rms_norm(x, eps=eps, unit_offset=unit_offset, params=params)


LAYER["final-norm-skipped"] = _mutant(kernels={"rms_norm": _final_norm})


@pytest.mark.parametrize("name", sorted(LAYER))
def test_moe_layers_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(LAYER[name], "moe_layers")


def test_correct_moe_layers_backend_is_not_rejected():
    assert set(rejections(_mutant(), "moe_layers").values()) == {0}
