"""Planted bugs in gemma_decoder_only's separate RoPE bases (rope_local_base on the even,
local layers, rope_base on the odd, global ones: Gemma 3's rope_local_base_freq and
rope_theta), each rejected by the gemma vectors at every dtype."""

import numpy as np
import pytest
from attnspec.backends.composite.models import GemmaModels

from .mutants import assert_rejected, composite_mutant


def _bases(pick):
    """gemma_decoder_only whose layer i rotates with pick(i, rope_base, rope_local_base)."""
    def gemma_decoder_only(self, ids, *, rope_base=10000.0, rope_local_base=None, **kw):
        local = rope_base if rope_local_base is None else rope_local_base
        layer = self.k.gemma_layer
        count = iter(range(10**6))

        def gemma_layer(h, mask=None, **a):
            i = next(count)
            return layer(h, mask, **{**a, "rope_base": pick(i, rope_base, local)})
        self.k.gemma_layer = gemma_layer
        try:
            return GemmaModels.gemma_decoder_only(self, ids, rope_base=rope_base,
                                                  rope_local_base=rope_local_base, **kw)
        finally:
            self.k.gemma_layer = layer
    return composite_mutant(GemmaModels, methods={"gemma_decoder_only": gemma_decoder_only})


MUTANTS = {
    "local-base-ignored": _bases(lambda i, glob, local: glob),
    "local-base-everywhere": _bases(lambda i, glob, local: local),
    "bases-swapped": _bases(lambda i, glob, local: glob if i % 2 == 0 else local),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_gemma_local_base_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[name], "gemma")


def test_correct_model_passes_the_local_base_vectors():
    from .mutants import rejections

    assert set(rejections(composite_mutant(GemmaModels), "gemma", "base").values()) == {0}

