"""Transformer layers and stacks: the shared composites (backends/composite/layers.py)."""

from ..composite.layers import Layers
from ..composite.mla import Mla

encoder_layer, decoder_layer, encoder, decoder, llama_layer, parallel_layer = Layers.bind(__package__)
(mla,) = Mla.bind(__package__, "mla")

from ..composite.layers import GemmaLayers  # noqa: E402

(gemma_layer,) = GemmaLayers.bind(__package__)

from ..composite.moe_layers import MoeLayers  # noqa: E402

mixtral_layer, deepseek_layer = MoeLayers.bind(__package__, "mixtral_layer", "deepseek_layer")
