"""Greedy and cached decoding: the shared composites (backends/composite/decoding.py)."""

from ..composite.beam import BeamSearch
from ..composite.decoding import Decoding
from ..composite.mla import Mla

(greedy_decode, decoder_only_init_cache, decoder_only_step, llama_init_cache,
 llama_step) = Decoding.bind(__package__)
mla_init_cache, mla_step = Mla.bind(__package__, "mla_init_cache", "mla_step")
(beam_search,) = BeamSearch.bind(__package__)  # backends/composite/beam.py
