"""Flax NNX (``flax.nnx``) modules over the spec's functions, one for every layer and model.

Each module holds the spec's parameters as ``nnx.Param``s under their canonical paths, in
the spec's layout ``y = x W + b``: ``layers.0.self_attn.w_q`` is
``module.layers["0"].self_attn.w_q`` (``getattr`` for the numeric scopes), and
``nnx.state(module, nnx.Param)`` has exactly those paths. ``Module.from_spec(params,
**attributes)`` builds one (the architecture is read from the parameters' shapes),
``load_spec(params)`` replaces the values (a missing, unexpected or misshaped parameter is a
ParameterError naming the path and both shapes), ``spec_params()`` exports
``{canonical path: jax.Array}``, exactly what was loaded. ``nnx.grad``, ``nnx.jit``,
``nnx.split``/``merge`` and ``nnx.Optimizer`` work on them as on any NNX module.

| module | spec function | call |
|---|---|---|
| ``MultiHeadAttention`` | ``mha`` | ``(query, key=None, value=None, mask=None)`` -> (output, weights) |
| ``LayerNorm`` | ``layer_norm`` | ``(x)`` |
| ``RMSNorm`` | ``rms_norm`` | ``(x)`` |
| ``FeedForward`` | ``feedforward`` | ``(x)`` |
| ``GatedFeedForward`` | ``gated_feedforward`` | ``(x)`` |
| ``EncoderLayer`` | ``encoder_layer`` | ``(x, mask=None, trace=None)`` |
| ``DecoderLayer`` | ``decoder_layer`` | ``(x, memory, self_mask=None, memory_mask=None, trace=None)`` |
| ``LlamaLayer`` | ``llama_layer`` | ``(x, mask=None, trace=None)`` |
| ``Encoder`` | ``encoder`` | ``(x, mask=None, trace=None)`` |
| ``Decoder`` | ``decoder`` | ``(x, memory, self_mask=None, memory_mask=None, trace=None)`` |
| ``Transformer`` | ``transformer`` | ``(src_ids, tgt_ids)`` -> logits; ``generate`` |
| ``EncoderOnly`` | ``encoder_only`` | ``(ids)`` -> (hidden, logits) |
| ``DecoderOnly`` | ``decoder_only`` | ``(ids)`` -> logits; ``generate`` |
| ``LlamaDecoderOnly`` | ``llama_decoder_only`` | ``(ids)`` -> logits; ``generate`` |
| ``Seq2SeqAttention`` | ``seq2seq_attention`` | ``(src_ids, tgt_ids)`` -> logits; ``generate`` |

Every call runs the JAX backend's function itself with the live parameters, so a module's
output IS the function's. The attributes (``num_heads``, ``norm``, ``pad_id``...) are static.

``nnx.jit``: the layers (the first ten rows) compile whole, masks included. The models
(the last five) read their token ids on the host (the range check, the padding masks, the
embedding lookup), and under ``jax.jit`` even ids closed over become tracers, so a model
called under ``nnx.jit``/``jax.jit`` raises DTypeError saying so (not a tracer leak from
deep inside); call a model eagerly (each kernel in it is compiled once per shape already),
or jit its layers. ``nnx.grad`` works on every module: ids are not differentiated.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
from attnspec.spec.errors import ConfigError, DTypeError, ParameterError
from flax import nnx

from . import decoding as _decoding
from . import feedforward as _ffn
from . import layers as _layers
from . import models as _models
from . import multihead as _mh
from . import norm as _norm
from . import rnn as _rnn


class _Scope(nnx.Module):
    """A path prefix (``layers``, ``layers.0``, ``self_attn``): holds what lies under it."""


def _claim(owner, name: str, path: str, node) -> None:
    """owner.name = node, unless name is taken (a method, a parameter, or a prefix)."""
    if not isinstance(owner, _Scope | SpecModule) or hasattr(type(owner), name) \
            or name in vars(owner):
        raise ParameterError(f"parameter {path!r}: {name!r} is already taken in "
                             f"{type(owner).__name__} (a method, a parameter or a prefix)")
    setattr(owner, name, node)


class SpecModule(nnx.Module):
    """A module whose ``nnx.Param``s are the spec's parameters, by canonical path;
    ``fn`` is the spec function ``__call__`` runs, ``attrs`` its attributes."""

    fn = None

    def __init__(self, params: dict, **attrs):
        self.attrs = dict(attrs)
        for path, value in params.items():
            *scopes, leaf = path.split(".")
            owner = self
            for name in scopes:
                if name not in vars(owner):
                    _claim(owner, name, path, _Scope())
                owner = getattr(owner, name)
            _claim(owner, leaf, path, nnx.Param(jnp.asarray(value)))

    @classmethod
    def from_spec(cls, params: dict, **attrs):
        """A module holding exactly ``params``; ``attrs`` are the spec function's attributes."""
        return cls(params, **attrs)

    def _variables(self) -> dict:
        state = nnx.state(self, nnx.Param)
        return {".".join(str(k) for k in path): var for path, var in nnx.to_flat_state(state)}

    def params(self) -> dict:
        """The live parameters ``{canonical path: array}`` (tracers under nnx.jit/grad)."""
        return {path: var[...] for path, var in self._variables().items()}

    def spec_params(self) -> dict:
        """Export ``{canonical path: jax.Array}``."""
        return self.params()

    def load_spec(self, params: dict) -> SpecModule:
        mine = self._variables()
        extra, missing = sorted(set(params) - set(mine)), sorted(set(mine) - set(params))
        if extra or missing:
            raise ParameterError(f"{type(self).__name__}.load_spec: missing parameter(s) "
                                 f"{missing}, unexpected {extra}")
        values = {path: jnp.asarray(v) for path, v in params.items()}
        for path, value in values.items():
            if value.shape != mine[path].shape:
                raise ParameterError(f"parameter {path!r} has shape {value.shape}, expected "
                                     f"{mine[path].shape}")
        for path, value in values.items():
            mine[path].set_value(value)
        return self

    def __call__(self, *args, **kwargs):
        return type(self).fn(*args, params=self.params(), **self.attrs, **kwargs)


class MultiHeadAttention(SpecModule):
    """``mha``: (query, key=None, value=None, mask=None) -> (output, weights (B, H, T, S));
    key and value default to query (self-attention)."""

    def __call__(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        return _mh.mha(query, key, value, mask, params=self.params(), **self.attrs)


class LayerNorm(SpecModule):
    fn = staticmethod(_norm.layer_norm)


class RMSNorm(SpecModule):
    fn = staticmethod(_norm.rms_norm)


class FeedForward(SpecModule):
    fn = staticmethod(_ffn.feedforward)


class GatedFeedForward(SpecModule):
    fn = staticmethod(_ffn.gated_feedforward)


class EncoderLayer(SpecModule):
    fn = staticmethod(_layers.encoder_layer)


class DecoderLayer(SpecModule):
    fn = staticmethod(_layers.decoder_layer)


class LlamaLayer(SpecModule):
    fn = staticmethod(_layers.llama_layer)


class Encoder(SpecModule):
    fn = staticmethod(_layers.encoder)


class Decoder(SpecModule):
    fn = staticmethod(_layers.decoder)


def _staged() -> bool:
    """True while jax.jit (nnx.jit) traces: there even a constant's arithmetic is a tracer."""
    return isinstance(jnp.zeros((), jnp.int32) + 0, jax.core.Tracer)


def _eager(model: str) -> None:
    if _staged():
        raise DTypeError(f"{model} cannot run under jax.jit / nnx.jit: it reads its token ids "
                         f"on the host (the range check, the padding masks, the embedding "
                         f"lookup), so the ids must be concrete arrays, not tracers; call it "
                         f"eagerly (each kernel inside is compiled already) or jit its layers")


class _Model(SpecModule):
    """A model on token ids: runs eagerly (its ids are read on the host)."""

    def __call__(self, *args, **kwargs):
        _eager(type(self).__name__)
        return super().__call__(*args, **kwargs)


class _Generator(_Model):
    """``generate`` by ``greedy_decode(model=model)``, which takes some attributes without
    a default (norm, activation) and defaults eps to 1e-5: each comes from the model
    function's own defaults, then ``fixed`` (what greedy_decode requires of the model),
    then the module's attributes."""

    model: str = ""
    fixed: dict = {}

    def greedy_attributes(self) -> dict:
        defaults = {n: a.default for n, a in inspect.signature(self.fn).parameters.items()
                    if a.kind is a.KEYWORD_ONLY and a.default is not a.empty and n != "trace"}
        return {**defaults, **self.fixed, **self.attrs}

    def generate(self, prompt, *, bos_id, eos_id, max_len):
        """Greedy decoding with a key/value cache: ids (B, max_len) (the transformer's
        ``prompt`` is its src_ids)."""
        _eager(type(self).__name__)
        source = {"src_ids": prompt} if self.model == "transformer" else {"prompt": prompt}
        return _decoding.greedy_decode(**source, model=self.model, bos_id=bos_id,
                                       eos_id=eos_id, max_len=max_len, params=self.params(),
                                       **self.greedy_attributes())


class Transformer(_Generator):
    fn = staticmethod(_models.transformer)
    model = "transformer"


class EncoderOnly(_Model):
    fn = staticmethod(_models.encoder_only)


class DecoderOnly(_Generator):
    """decoder_only; with ``tie_embeddings=True`` (GPT-2) built from parameters without
    lm_head.*: the head reads the one embed.table Param, whose gradient sums both uses."""

    fn = staticmethod(_models.decoder_only)
    model = "decoder_only"


class LlamaDecoderOnly(DecoderOnly):
    """The Llama-style decoder-only model (RMSNorm, RoPE, grouped-query attention, SwiGLU,
    no biases): a DecoderOnly whose attributes ``num_kv_heads``, ``rope_base``, ``window``
    and ``eps`` are the Llama's."""

    fn = staticmethod(_models.llama_decoder_only)
    model = "llama_decoder_only"
    fixed = {"norm": "pre", "activation": "silu"}
    # llama_decoder_only's attributes that the cached path (llama_step, greedy_decode) does
    # not take (Qwen2's model, 1.4.0): left out at False, refused when set
    uncached = ("attention_bias", "tie_embeddings")

    def greedy_attributes(self) -> dict:
        attrs = super().greedy_attributes()
        for name in self.uncached:
            if attrs.get(name):
                raise ConfigError(f"{type(self).__name__}.generate: {name}=True is not in the "
                                  f"cached path (llama_step); the forward pass takes it")
        return {k: v for k, v in attrs.items() if k not in self.uncached}


class Seq2SeqAttention(_Model):
    """GRU encoder-decoder with attention: (src_ids, tgt_ids) -> logits, teacher-forced;
    ``generate(src_ids, bos_id=, eos_id=, max_len=)`` greedy (``seq2seq_greedy_decode``)."""

    fn = staticmethod(_rnn.seq2seq_attention)

    def generate(self, src_ids, *, bos_id, eos_id, max_len):
        _eager(type(self).__name__)
        return _rnn.seq2seq_greedy_decode(src_ids, bos_id=bos_id, eos_id=eos_id,
                                          max_len=max_len, params=self.params(), **self.attrs)


MODULES = {"mha": MultiHeadAttention, "layer_norm": LayerNorm, "rms_norm": RMSNorm,
           "feedforward": FeedForward, "gated_feedforward": GatedFeedForward,
           "encoder_layer": EncoderLayer, "decoder_layer": DecoderLayer,
           "llama_layer": LlamaLayer, "encoder": Encoder, "decoder": Decoder,
           "transformer": Transformer, "encoder_only": EncoderOnly,
           "decoder_only": DecoderOnly, "llama_decoder_only": LlamaDecoderOnly,
           "seq2seq_attention": Seq2SeqAttention}
"""The NNX module of each spec function that is a layer or a model."""
