"""Greedy and cached decoding: the shared composites (backends/composite/decoding.py);
under ``attention=fused`` their attention computes no weights."""

from ..composite.beam import BeamSearch
from ..composite.decoding import Decoding
from ..composite.mla import Mla
from ._core import no_weights_unless_traced as _fast
from .host import bind as _bind

(greedy_decode, decoder_only_init_cache, decoder_only_step, llama_init_cache,
 llama_step) = map(_fast, _bind(Decoding, __package__))
mla_init_cache, mla_step = map(_fast, _bind(Mla, __package__, "mla_init_cache", "mla_step"))
(beam_search,) = map(_fast, _bind(BeamSearch, __package__))  # backends/composite/beam.py
