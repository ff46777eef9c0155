"""t5_model (T5 on token ids): planted bugs in the composite, each caught by the t5_model
vectors alone (flag encoder-decoder) at every dtype; planted bugs in the tied head's
gradient, caught by the t5 gradient vectors. (Properties: conformance/suite/
test_properties_t5.py.)"""

import numpy as np
import pytest
from attnspec.backends.composite.models import T5
from attnspec.backends.numpy.attention import causal_mask as numpy_causal_mask
from attnspec.backends.numpy.embedding import embedding as numpy_embedding
from attnspec.backends.numpy.embedding import lm_head as numpy_lm_head
from attnspec.backends.numpy.embedding import lm_head_vjp as numpy_lm_head_vjp

from .mutants import composite_mutant, gradient_rejections, mutant, rejections
from .test_t5_layers import _CrossBias


def _tied_unscaled(x, *, tied=False, params):
    """The tied head without T5's D^-0.5 (logits = h E^T, as GPT-2)."""
    return numpy_lm_head(x * np.sqrt(x.shape[-1]) if tied else x, tied=tied, params=params)


def _untied_rescaled(x, *, tied=False, params):
    """The rescale applied to the untied head too (T5 v1.1 has none)."""
    return numpy_lm_head(x if tied else x / np.sqrt(x.shape[-1]), tied=tied, params=params)


def _no_causal(*, t, s):
    return np.ones_like(numpy_causal_mask(t=t, s=s))


def _scaled_embedding(ids, *, scale=True, params):
    """sqrt(D)-scaled embeddings (the original Transformer's), where T5 has none."""
    return numpy_embedding(ids, scale=True, params=params)


class _NoMemoryMask(T5):
    """Cross-attention sees the source's padding."""

    def t5_decoder(self, x, memory, self_mask=None, memory_mask=None, **kw):
        return T5.t5_decoder(self, x, memory, self_mask, None, **kw)


class _TargetPadMasked(T5):
    """The decoder's keys masked where tgt_ids == pad_id (T5's start token is the pad id)."""

    def t5_model(self, src_ids, tgt_ids, *, pad_id, **kw):
        self.tgt, self.pad = tgt_ids, pad_id
        return T5.t5_model(self, src_ids, tgt_ids, pad_id=pad_id, **kw)

    def t5_decoder(self, x, memory, self_mask=None, memory_mask=None, **kw):
        if self_mask is None and getattr(self, "tgt", None) is not None:
            self_mask = self.k.padding_mask(self.tgt, pad_id=self.pad)
        return T5.t5_decoder(self, x, memory, self_mask, memory_mask, **kw)


BUGS = {
    "tied-head-not-rescaled": dict(kernels={"lm_head": _tied_unscaled}),
    "untied-head-rescaled": dict(kernels={"lm_head": _untied_rescaled}),
    "decoder-not-causal": dict(kernels={"causal_mask": _no_causal}),
    "bias-in-cross-attention": dict(family=_CrossBias),
    "embeddings-scaled-by-sqrt-d": dict(kernels={"embedding": _scaled_embedding}),
    "memory-mask-dropped": dict(family=_NoMemoryMask),
    "target-pads-masked": dict(family=_TargetPadMasked),
}


def _mutant(family=T5, kernels=None):
    return composite_mutant(family, kernels=kernels)


def test_the_unmutated_t5_model_passes():
    assert not any(rejections(_mutant(), "t5", "encoder-decoder").values())


@pytest.mark.parametrize("name", sorted(BUGS))
def test_planted_t5_model_bug_is_rejected(name):
    fails = rejections(_mutant(**BUGS[name]), "t5", "encoder-decoder", until_each=True)
    assert all(fails.values()), f"{name} passes the t5_model vectors at some dtype: {fails}"


# -- gradients -------------------------------------------------------------------------------


def _tied_table_grad_dropped(cot, x, *, tied=False, params):
    """The tied head's dlogits^T (h D^-0.5) lost: shared.table gets the two scatter-adds only."""
    gi, gp = numpy_lm_head_vjp(cot, x, tied=tied, params=params)
    return gi, ({**gp, "table": 0 * gp["table"]} if tied else gp)


def _tied_input_grad_unscaled(cot, x, *, tied=False, params):
    """dh without the rescale's D^-0.5 (the head's input gradient times sqrt(D))."""
    gi, gp = numpy_lm_head_vjp(cot, x, tied=tied, params=params)
    return ({**gi, "x": gi["x"] * np.sqrt(x.shape[-1])} if tied else gi), gp


def test_the_unmutated_t5_gradients_pass():
    assert not any(gradient_rejections(mutant(), "t5").values())


@pytest.mark.parametrize("bug", [_tied_table_grad_dropped, _tied_input_grad_unscaled],
                         ids=lambda f: f.__name__.strip("_"))
def test_t5_model_gradient_bug_is_caught_at_every_dtype(bug):
    with np.errstate(all="ignore"):
        fails = gradient_rejections(mutant(lm_head_vjp=bug), "t5", until_each=True)
    assert all(fails.values()), fails
