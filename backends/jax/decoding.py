"""Greedy and cached decoding: the shared composites (backends/composite/decoding.py);
under ``attention=fused`` their attention computes no weights."""

from ..composite.beam import BeamSearch
from ..composite.decoding import Decoding
from ..composite.mla import Mla
from ._core import no_weights_unless_traced as _fast

(greedy_decode, decoder_only_init_cache, decoder_only_step, llama_init_cache,
 llama_step) = map(_fast, Decoding.bind(__package__))
mla_init_cache, mla_step = map(_fast, Mla.bind(__package__, "mla_init_cache", "mla_step"))
(beam_search,) = map(_fast, BeamSearch.bind(__package__))  # backends/composite/beam.py
