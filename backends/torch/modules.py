"""The idiomatic layer: ``torch.nn.Module``s for every layer and model.

Each module holds the spec's parameters under their canonical paths, so
``module.state_dict()`` keys *are* the spec paths (``layers.0.self_attn.w_q``), in the
spec's layout ``y = x W + b``. ``from_spec(params, **attrs)`` builds one,
``load_spec(params)`` copies values in (shapes checked, ParameterError naming the path),
``spec_params()`` exports ``{path: tensor}``. The forward pass is the backend's functional
code, so autograd, ``.to(device, dtype)``, ``state_dict`` and ``torch.compile`` work.

``need_weights=False`` (the default for the layers and models when no ``trace`` is
given) takes PyTorch's fused kernels: ``F.scaled_dot_product_attention`` and
``F.layer_norm``; ``need_weights=True`` writes attention out explicitly.
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ParameterError
from torch import nn

from . import layers, models, rnn
from ._core import skipping_weights as _fast
from .multihead import mha


class SpecModule(nn.Module):
    """A module whose parameters are the spec's, registered by canonical path."""

    def __init__(self, params: dict, **attrs):
        super().__init__()
        self.attrs = dict(attrs)
        for path, value in params.items():
            *scopes, leaf = path.split(".")
            owner = self
            for name in scopes:
                if name not in owner._modules:
                    owner.add_module(name, nn.Module())
                owner = owner._modules[name]
            value = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            owner.register_parameter(leaf, nn.Parameter(value.detach().clone()))

    @classmethod
    def from_spec(cls, params: dict, **attrs):
        return cls(params, **attrs)

    def params(self) -> dict:
        """The live parameters ``{canonical path: nn.Parameter}`` (for the functional call)."""
        return dict(self.named_parameters())

    def spec_params(self) -> dict:
        """Export ``{canonical path: tensor}`` (detached copies)."""
        return {k: v.detach().clone() for k, v in self.named_parameters()}

    def load_spec(self, params: dict) -> SpecModule:
        own = self.params()
        extra = sorted(set(params) - set(own))
        missing = sorted(set(own) - set(params))
        if extra or missing:
            raise ParameterError(f"load_spec: missing parameter(s) {missing}, unexpected "
                                 f"{extra}")
        with torch.no_grad():
            for path, value in params.items():
                value = torch.as_tensor(value)
                if tuple(value.shape) != tuple(own[path].shape):
                    raise ParameterError(f"parameter {path!r} has shape {tuple(value.shape)}, "
                                         f"expected {tuple(own[path].shape)}")
                own[path].copy_(value)
        return self

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())


class MultiHeadAttention(SpecModule):
    """``mha``: forward(query, key=None, value=None, mask=None, need_weights=True)
    -> (output, weights or None). key/value default to query (self-attention)."""

    def forward(self, query, key=None, value=None, mask=None, need_weights: bool = True):
        key = query if key is None else key
        value = key if value is None else value
        with _fast(not need_weights):
            return mha(query, key, value, mask, params=self.params(), **self.attrs)


class _Layer(SpecModule):
    fn = None

    def forward(self, *args, trace=None, need_weights: bool = False, **kwargs):
        with _fast(not need_weights and trace is None):
            return type(self).fn(*args, params=self.params(), trace=trace,
                                 **self.attrs, **kwargs)


class EncoderLayer(_Layer):
    """``encoder_layer``: forward(x, mask=None, trace=None)."""
    fn = staticmethod(layers.encoder_layer)


class DecoderLayer(_Layer):
    """``decoder_layer``: forward(x, memory, self_mask=None, memory_mask=None, trace=None)."""
    fn = staticmethod(layers.decoder_layer)


class Encoder(_Layer):
    fn = staticmethod(layers.encoder)


class Decoder(_Layer):
    fn = staticmethod(layers.decoder)


class Transformer(_Layer):
    """``transformer``: forward(src_ids, tgt_ids) -> logits."""
    fn = staticmethod(models.transformer)


class EncoderOnly(_Layer):
    """``encoder_only``: forward(ids) -> (hidden, logits)."""
    fn = staticmethod(models.encoder_only)


class DecoderOnly(_Layer):
    """``decoder_only``: forward(ids) -> logits."""
    fn = staticmethod(models.decoder_only)


class Seq2SeqAttention(_Layer):
    """GRU encoder-decoder with attention: forward(src_ids, tgt_ids) -> logits;
    ``greedy_decode(src_ids, bos_id=, eos_id=, max_len=)`` -> ids."""
    fn = staticmethod(rnn.seq2seq_attention)

    def greedy_decode(self, src_ids, *, bos_id, eos_id, max_len):
        return rnn.seq2seq_greedy_decode(src_ids, bos_id=bos_id, eos_id=eos_id,
                                         max_len=max_len, params=self.params(), **self.attrs)
