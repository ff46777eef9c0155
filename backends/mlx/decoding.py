"""Greedy and cached decoding: the shared composites (backends/composite/decoding.py)."""

from ..composite.decoding import Decoding

(greedy_decode, decoder_only_init_cache, decoder_only_step, llama_init_cache,
 llama_step) = Decoding.bind(__package__)
