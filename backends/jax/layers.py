"""Transformer layers and stacks: the shared composites (backends/composite/layers.py);
under ``attention=fused`` and without a trace, their attention computes no weights."""

from ..composite.layers import Layers
from ..composite.mla import Mla
from ._core import no_weights_unless_traced as _fast
from .host import bind as _bind

(encoder_layer, decoder_layer, encoder, decoder, llama_layer,
 parallel_layer) = map(_fast, _bind(Layers, __package__))
(mla,) = map(_fast, _bind(Mla, __package__, "mla"))

from ..composite.layers import GemmaLayers  # noqa: E402

(gemma_layer,) = map(_fast, _bind(GemmaLayers, __package__))

from ..composite.moe_layers import MoeLayers  # noqa: E402

mixtral_layer, deepseek_layer = map(_fast, _bind(MoeLayers, __package__, "mixtral_layer", "deepseek_layer"))
