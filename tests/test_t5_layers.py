"""t5 (the encoder and decoder stacks): planted bugs in the composite, each caught by the
t5 vectors at every dtype."""

import math

import pytest
from attnspec.backends.composite.models import T5
from attnspec.backends.numpy.attention import sdpa as numpy_sdpa
from attnspec.backends.numpy.positional import t5_bias as numpy_t5_bias

from .mutants import assert_rejected, composite_mutant, rejections
from .test_t5_bias import _broken


class _CrossBias(T5):
    """The self-attention bias added in cross-attention too."""

    def t5_position_bias(self, *args):
        self.shared_bias = T5.t5_position_bias(self, *args)
        return self.shared_bias

    def t5_attention(self, a, memory, bias, keep, heads, p):
        return T5.t5_attention(self, a, memory, self.shared_bias if bias is None else bias,
                               keep, heads, p)


class _OwnTable(T5):
    """Each layer's self-attention recomputes the bias from a table of its own."""

    def t5_attention(self, a, memory, bias, keep, heads, p):
        if bias is not None:
            n = p.scope("rel_bias").require("table", (None, None)).shape[0]
            bias = self.k.t5_bias(t=a.shape[1], s=a.shape[1], bidirectional="self" not in p.path(""),
                                  num_buckets=n, max_distance=16 if n == 8 else 128,
                                  params=p.scope("rel_bias"))
        return T5.t5_attention(self, a, memory, bias, keep, heads, p)


def _scaled_sdpa(q, k, v, mask=None, bias=None, *, scale=None, **kw):
    return numpy_sdpa(q, k, v, mask, bias, scale=1 / math.sqrt(q.shape[-1]), **kw)


def _encoder_buckets_everywhere(**kw):
    return numpy_t5_bias(**{**kw, "bidirectional": True})


BUGS = {
    "bias-in-cross-attention": dict(family=_CrossBias),
    "scores-scaled-by-rsqrt-k": dict(kernels={"sdpa": _scaled_sdpa}),
    "bidirectional-buckets-in-decoder": dict(kernels={"t5_bias": _encoder_buckets_everywhere}),
    "log-bucket-rounded": dict(kernels={"t5_bias": _broken(rounding=round)}),
    "bias-recomputed-per-layer": dict(family=_OwnTable),
}


def _mutant(family=T5, kernels=None):
    return composite_mutant(family, kernels=kernels)


def test_the_unmutated_t5_family_passes():
    assert not any(rejections(_mutant(), "t5").values())


@pytest.mark.parametrize("name", sorted(BUGS))
def test_planted_t5_bug_is_rejected(name):
    assert_rejected(_mutant(**BUGS[name]), "t5")


def test_decoder_bucket_bug_is_caught_by_a_value_not_a_crash():
    """The decoder's buckets matter where T = S: the wrong ones give wrong numbers."""
    fails = rejections(_mutant(kernels={"t5_bias": _encoder_buckets_everywhere}), "t5")
    assert all(n >= 1 for n in fails.values()), fails
