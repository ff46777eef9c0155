"""Whole models on token ids: the shared composites (backends/composite/models.py)."""

from ..composite.models import Models

(transformer, encoder_only, decoder_only, llama_decoder_only,
 decoder_only_loss) = Models.bind(__package__)

from ..composite.models import GemmaModels  # noqa: E402

(gemma_decoder_only,) = GemmaModels.bind(__package__)
