"""Whole models on token ids: the shared composites (backends/composite/models.py);
under ``attention=fused`` and without a trace, their attention computes no weights."""

from ..composite.models import T5, GemmaModels, Models
from ._core import no_weights_unless_traced as _fast
from .host import bind as _bind

(transformer, encoder_only, decoder_only, llama_decoder_only,
 decoder_only_loss) = map(_fast, _bind(Models, __package__))

(gemma_decoder_only,) = map(_fast, _bind(GemmaModels, __package__))
t5_encoder, t5_decoder, t5_model = map(_fast, _bind(T5, __package__))

from ..composite.moe_layers import MoeLayers  # noqa: E402

(deepseek_decoder_only,) = map(_fast, _bind(MoeLayers, __package__, "deepseek_decoder_only"))

from ..composite.models import ParallelModels  # noqa: E402

(parallel_decoder_only,) = map(_fast, _bind(ParallelModels, __package__))
