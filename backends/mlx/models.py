"""Whole models on token ids: the shared composites (backends/composite/models.py)."""

from ..composite.models import T5, GemmaModels, Models

(transformer, encoder_only, decoder_only, llama_decoder_only,
 decoder_only_loss) = Models.bind(__package__)

(gemma_decoder_only,) = GemmaModels.bind(__package__)
t5_encoder, t5_decoder, t5_model = T5.bind(__package__)

from ..composite.moe_layers import MoeLayers  # noqa: E402

(deepseek_decoder_only,) = MoeLayers.bind(__package__, "deepseek_decoder_only")

from ..composite.models import ParallelModels  # noqa: E402

(parallel_decoder_only,) = ParallelModels.bind(__package__)
