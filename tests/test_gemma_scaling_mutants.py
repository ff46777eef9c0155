"""Planted bugs in Gemma's RoPE scaling (gemma_layer's and gemma_decoder_only's rope_scaling,
issue 25 item 1: Gemma 3's linear factor 8 on the global layers only), each rejected by the
gemma vectors at every dtype, and backward bugs in the scaled RoPE rejected by the gradient
vectors."""

import numpy as np
import pytest
from attnspec.backends.composite.layers import GemmaLayers
from attnspec.backends.composite.models import GemmaModels

from .mutants import assert_rejected, composite_mutant, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails
from .test_mutants_llama_rope import GRAD_BUGS


def _layers(**methods):
    return composite_mutant(GemmaLayers, methods=methods)


def _with_rope(change):
    """gemma_qkv with the layer's rope attributes ({} or {"scaling": ...}) passed through
    ``change(rope, a)`` -> (rope of q, rope of k, base)."""
    def gemma_qkv(self, n1, p, a):
        rq, rk, base = change(dict(a["rope"]), a)
        q, _, v, width = GemmaLayers.gemma_qkv(self, n1, p, {**a, "rope": rq, "base": base})
        _, k, _, _ = GemmaLayers.gemma_qkv(self, n1, p, {**a, "rope": rk, "base": base})
        return q, k, v, width
    return gemma_qkv


def scaling_ignored(rope, a):
    """rope_scaling accepted and dropped: the default frequencies, m = 1."""
    return {}, {}, a["base"]


def factor_on_base(rope, a):
    """The factor applied to the base (base * factor, NTK-style) instead of dividing the
    frequencies (the positions): theta_0 = 1 unchanged where linear gives 1 / factor."""
    s = rope.get("scaling")
    if not s or "factor" not in s:
        return rope, rope, a["base"]
    return {}, {}, a["base"] * s["factor"]


def scaling_on_queries_only(rope, a):
    """The keys rotated with the default frequencies, the queries with the scaled ones."""
    return rope, {}, a["base"]


def attention_factor_dropped(rope, a):
    """yarn's m left out of cos and sin (the scaled frequencies kept)."""
    s = rope.get("scaling")
    if not s or s.get("rope_type") not in ("yarn", "longrope"):
        return rope, rope, a["base"]
    r = {"scaling": {**s, "attention_factor": 1.0}}
    return r, r, a["base"]


def seq_len_from_chunk(rope, a):
    """dynamic's rule at seq_len = 1 (a per-token evaluation), not offset + T."""
    s = rope.get("scaling")
    if not s:
        return rope, rope, a["base"]
    r = {"scaling": {**s, "seq_len": 1}}
    return r, r, a["base"]


def windowed_layer_unscaled(self, x, mask=None, *, window=None, rope_scaling=None, **kw):
    """The layer deciding its type by its window: a windowed layer drops its rope_scaling
    (the spec: a layer applies the scaling it is given; the model chooses the layers)."""
    return GemmaLayers.gemma_layer(self, x, mask, window=window,
                                   rope_scaling=None if window is not None else rope_scaling,
                                   **kw)


LAYER = {
    "scaling-ignored": _layers(gemma_qkv=_with_rope(scaling_ignored)),
    "factor-on-base": _layers(gemma_qkv=_with_rope(factor_on_base)),
    "scaling-on-queries-only": _layers(gemma_qkv=_with_rope(scaling_on_queries_only)),
    "attention-factor-dropped": _layers(gemma_qkv=_with_rope(attention_factor_dropped)),
    "seq-len-per-token": _layers(gemma_qkv=_with_rope(seq_len_from_chunk)),
    "windowed-layer-unscaled": _layers(gemma_layer=windowed_layer_unscaled),
}


@pytest.mark.parametrize("name", sorted(LAYER))
def test_gemma_scaling_layer_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(LAYER[name], "gemma")


# -- which layers the model scales -----------------------------------------------------------------

def _scaled_layers(pick):
    """gemma_decoder_only whose layer i gets the model's rope_scaling where pick(i, N)."""
    def gemma_decoder_only(self, ids, *, num_layers, rope_scaling=None, **kw):
        layer = self.k.gemma_layer
        count = iter(range(10**6))

        def gemma_layer(h, mask=None, **a):
            i = next(count)
            a.pop("rope_scaling", None)
            if rope_scaling is not None and pick(i, num_layers):
                a["rope_scaling"] = rope_scaling
            return layer(h, mask, **a)
        self.k.gemma_layer = gemma_layer
        try:
            return GemmaModels.gemma_decoder_only(self, ids, num_layers=num_layers,
                                                  rope_scaling=rope_scaling, **kw)
        finally:
            self.k.gemma_layer = layer
    return composite_mutant(GemmaModels, methods={"gemma_decoder_only": gemma_decoder_only})


MODEL = {
    "scaling-on-every-layer": _scaled_layers(lambda i, n: True),
    "scaling-on-local-layers": _scaled_layers(lambda i, n: i % 2 == 0),
    "scaling-on-no-layer": _scaled_layers(lambda i, n: False),
    # Gemma 3's 5:1 pattern misread as "every layer from the first global one on"
    "scaling-from-first-global-on": _scaled_layers(lambda i, n: i >= 1),
    "scaling-on-last-layer-only": _scaled_layers(lambda i, n: i == n - 1),
}


def _global_layers(is_global):
    """gemma_decoder_only whose layer i is global (no window, rope_base, the scaling) where
    is_global(i, sliding_window_pattern), local otherwise."""
    def gemma_decoder_only(self, ids, *, sliding_window_pattern=2, window=None,
                           rope_base=10000.0, rope_local_base=None, rope_scaling=None, **kw):
        layer = self.k.gemma_layer
        count = iter(range(10**6))
        local = rope_base if rope_local_base is None else rope_local_base

        def gemma_layer(h, mask=None, **a):
            i = next(count)
            a.pop("rope_scaling", None)
            if is_global(i, sliding_window_pattern):
                a.update(window=None, rope_base=rope_base)
                if rope_scaling is not None:
                    a["rope_scaling"] = rope_scaling
            else:
                a.update(window=window, rope_base=local)
            return layer(h, mask, **a)
        self.k.gemma_layer = gemma_layer
        try:
            return GemmaModels.gemma_decoder_only(
                self, ids, sliding_window_pattern=sliding_window_pattern, window=window,
                rope_base=rope_base, rope_local_base=rope_local_base, rope_scaling=rope_scaling,
                **kw)
        finally:
            self.k.gemma_layer = layer
    return composite_mutant(GemmaModels, methods={"gemma_decoder_only": gemma_decoder_only})


MODEL.update({
    # Gemma 2's alternation whatever sliding_window_pattern says
    "pattern-ignored": _global_layers(lambda i, p: i % 2 == 1),
    # the first layer of each group global (i % p == 0), not the last
    "pattern-first-of-group-global": _global_layers(lambda i, p: i % p == 0),
})


@pytest.mark.parametrize("name", sorted(MODEL))
def test_gemma_scaling_model_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MODEL[name], "gemma")


def test_correct_backend_passes_the_scaled_gemma_vectors():
    assert set(rejections(composite_mutant(GemmaLayers), "gemma", "rope-scaling").values()) == {0}
    assert set(rejections(composite_mutant(GemmaModels), "gemma", "rope-scaling").values()) == {0}


# -- gradients: RoPE's backward under scaling ------------------------------------------------------

@pytest.mark.parametrize("name", ["rope-backward-unscaled", "rope-backward-without-m"])
def test_gemma_scaling_backward_bug_fails_at_every_dtype(name):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(rope_vjp=GRAD_BUGS[name]), "gemma")


# -- the property: the scaling touches the global layers only ----------------------------------------

def _touches_global_only(backend):
    from attnspec.conformance.ops import Ops
    from attnspec.conformance.suite import test_properties_gemma as props
    from attnspec.spec.vectors import default_spec

    props.test_gemma_model_rope_scaling_touches_the_global_layers_only.hypothesis.inner_test(
        ops=Ops(backend, default_spec(), "cpu", "float64"), seed=0, cfg=(16, 2, 1, 8),
        window=None, qk_norm=False, rule="linear", factor=8.0, t=6)


@pytest.mark.parametrize("name", ["scaling-on-every-layer", "scaling-on-local-layers",
                                  "scaling-on-no-layer"])
def test_model_scaling_bug_is_caught_by_the_property(name):
    with pytest.raises(AssertionError), np.errstate(all="ignore"):
        _touches_global_only(MODEL[name])


def test_correct_model_passes_the_property():
    _touches_global_only(composite_mutant(GemmaModels))
