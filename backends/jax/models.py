"""Whole models on token ids: the shared composites (backends/composite/models.py);
under ``attention=fused`` and without a trace, their attention computes no weights."""

from ..composite.models import T5, GemmaModels, Models
from ._core import no_weights_unless_traced as _fast

(transformer, encoder_only, decoder_only, llama_decoder_only,
 decoder_only_loss) = map(_fast, Models.bind(__package__))

(gemma_decoder_only,) = map(_fast, GemmaModels.bind(__package__))
t5_encoder, t5_decoder, t5_model = map(_fast, T5.bind(__package__))

from ..composite.moe_layers import MoeLayers  # noqa: E402

(deepseek_decoder_only,) = map(_fast, MoeLayers.bind(__package__, "deepseek_decoder_only"))

from ..composite.models import ParallelModels  # noqa: E402

(parallel_decoder_only,) = map(_fast, ParallelModels.bind(__package__))
