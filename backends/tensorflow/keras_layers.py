"""Keras 3 layers and models over the spec's functions, one for every layer and model of
the spec. Weights are Keras variables, one per canonical parameter path; a layer is
loaded with ``Layer.from_spec(params, **attributes)`` (the parameter shapes, and so
the architecture, are read from ``params``) or ``layer.load_spec(params)``, and exported
with ``layer.spec_params()`` ({canonical path: ndarray}, exactly what was loaded).
They train with ``tf.GradientTape`` and save with Keras' own format
(``model.save("m.keras")`` / ``keras.models.load_model``): every class is registered
serialisable and its ``get_config`` holds the spec attributes and the parameter shapes.

| layer | spec function | call |
|---|---|---|
| ``MultiHeadAttention`` | ``mha`` | ``(query, key=None, value=None, mask=None)`` |
| ``LayerNorm`` | ``layer_norm`` | ``(x)`` |
| ``FeedForward`` | ``feedforward`` | ``(x)`` |
| ``EncoderLayer`` | ``encoder_layer`` | ``(x, mask=None)`` |
| ``DecoderLayer`` | ``decoder_layer`` | ``(x, memory, self_mask=None, memory_mask=None)`` |
| ``Encoder`` | ``encoder`` | ``(x, mask=None)`` |
| ``Decoder`` | ``decoder`` | ``(x, memory, self_mask=None, memory_mask=None)`` |
| ``Transformer`` | ``transformer`` | ``(src_ids, tgt_ids)`` -> logits; ``generate`` |
| ``EncoderOnly`` | ``encoder_only`` | ``(ids)`` -> (hidden, logits) |
| ``DecoderOnly`` | ``decoder_only`` | ``(ids)`` -> logits; ``generate`` |
| ``Seq2SeqAttention`` | ``seq2seq_attention`` | ``(src_ids, tgt_ids)`` -> logits; ``generate`` |

Every call runs the backend function itself, so a layer's output is the function's.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
from attnspec.spec.errors import ParameterError

from . import decoding as _decoding
from . import feedforward as _ffn
from . import layers as _layers
from . import models as _models
from . import multihead as _mh
from . import norm as _norm
from . import rnn as _rnn

PACKAGE = "attnspec"


# ---- default parameter shapes (canonical paths) for a freshly built layer -----------------

def _scoped(prefix: str, shapes: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in shapes.items()}


def mha_shapes(d: int, hk: int | None = None, bias: bool = True, kv: int | None = None) -> dict:
    """w_q (D, H*K), w_k and w_v (D, H_kv*K) with kv = H_kv*K (None: H*K), w_o (H*K, D)."""
    hk = hk or d
    s = {}
    for n, width in (("q", hk), ("k", kv or hk), ("v", kv or hk)):
        s[f"w_{n}"] = (d, width)
        if bias:
            s[f"b_{n}"] = (width,)
    s["w_o"] = (hk, d)
    if bias:
        s["b_o"] = (d,)
    return s


def ln_shapes(d: int) -> dict:
    return {"gamma": (d,), "beta": (d,)}


def ffn_shapes(d: int, f: int) -> dict:
    return {"w1": (d, f), "b1": (f,), "w2": (f, d), "b2": (d,)}


def encoder_layer_shapes(d: int, f: int, bias: bool = True) -> dict:
    return {**_scoped("self_attn", mha_shapes(d, bias=bias)), **_scoped("norm1", ln_shapes(d)),
            **_scoped("ffn", ffn_shapes(d, f)), **_scoped("norm2", ln_shapes(d))}


def decoder_layer_shapes(d: int, f: int, bias: bool = True) -> dict:
    return {**_scoped("self_attn", mha_shapes(d, bias=bias)), **_scoped("norm1", ln_shapes(d)),
            **_scoped("cross_attn", mha_shapes(d, bias=bias)),
            **_scoped("norm2", ln_shapes(d)), **_scoped("ffn", ffn_shapes(d, f)),
            **_scoped("norm3", ln_shapes(d))}


def stack_shapes(layer_shapes: dict, num_layers: int, norm: str, d: int) -> dict:
    s = {}
    for i in range(num_layers):
        s.update(_scoped(f"layers.{i}", layer_shapes))
    if norm == "pre":
        s.update(_scoped("final_norm", ln_shapes(d)))
    return s


def gru_shapes(inputs: int, hidden: int) -> dict:
    return {"w_ih": (inputs, 3 * hidden), "w_hh": (hidden, 3 * hidden),
            "b_ih": (3 * hidden,), "b_hh": (3 * hidden,)}


def _require(name: str, value):
    if value is None:
        raise ValueError(f"{name} is needed to build a fresh layer (or use from_spec(params))")
    return value


# ---- the base class ---------------------------------------------------------------------------

class SpecLayer(keras.layers.Layer):
    """A layer whose weights are the spec's parameters, by canonical path.

    ``ATTRIBUTES`` are the spec function's attributes (stored on the layer, passed to
    every call, saved in the config); ``param_shapes`` fixes the parameters
    ({path: shape}); without it ``default_shapes()`` builds them from the architecture
    arguments (``d_model``, ``d_ff``, vocabulary sizes, ...).
    """

    ATTRIBUTES: tuple = ()
    ARCHITECTURE: tuple = ()

    def __init__(self, *, param_shapes=None, **kw):
        super().__init__(**kw)
        self.param_shapes = None if param_shapes is None else {
            str(k): tuple(int(d) for d in v) for k, v in param_shapes.items()}

    def default_shapes(self) -> dict:
        raise NotImplementedError

    def _shapes(self) -> dict:  # canonical path -> shape
        return dict(self.param_shapes) if self.param_shapes is not None else self.default_shapes()

    def build(self, *input_shapes, **kw):
        self.spec_weights = {}
        for path, shape in self._shapes().items():
            leaf = path.rsplit(".", 1)[-1]
            init = ("ones" if leaf == "gamma" else
                    "zeros" if leaf.startswith("b") else "glorot_uniform")
            if leaf == "table":
                init = "random_normal"
            self.spec_weights[path] = self.add_weight(name=path.replace(".", "__"), shape=shape,
                                                      initializer=init)
        self.built = True

    def compute_output_spec(self, *args, **kwargs):
        shape = self.output_shape_of(*[getattr(a, "shape", None) for a in args])
        if isinstance(shape, list):
            return [keras.KerasTensor(s, dtype=self.compute_dtype) for s in shape]
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def output_shape_of(self, first, *rest):
        return first  # (..., D) -> (..., D)

    def params(self) -> dict:
        if not self.built:
            self.build()
        return dict(self.spec_weights)

    def attributes(self) -> dict:
        return {a: getattr(self, a) for a in self.ATTRIBUTES}

    def spec_params(self) -> dict:
        """{canonical path: ndarray}."""
        return {k: np.asarray(v.numpy()) for k, v in self.params().items()}

    def load_spec(self, params) -> SpecLayer:
        mine = self.params()
        extra = sorted(set(params) - set(mine))
        if extra:
            raise ParameterError(f"{type(self).__name__} has no parameter(s) {extra}; "
                                 f"expected {sorted(mine)}")
        for path, var in mine.items():
            if path not in params:
                raise ParameterError(f"missing parameter {path!r}")
            value = np.asarray(params[path])
            if value.shape != tuple(var.shape):
                raise ParameterError(f"parameter {path!r} has shape {value.shape}, "
                                     f"expected {tuple(var.shape)}")
            var.assign(value)
        return self

    @classmethod
    def from_spec(cls, params, **attributes):
        """A layer holding exactly ``params``; ``attributes`` are the spec's (num_heads, ...)."""
        shapes = {k: np.shape(v) for k, v in params.items()}
        return cls(param_shapes=shapes, **attributes).load_spec(params)

    def get_config(self):
        arch = {a: getattr(self, a) for a in self.ARCHITECTURE}
        shapes = None if self.param_shapes is None else {
            k: list(v) for k, v in self.param_shapes.items()}
        return {**super().get_config(), **arch, **self.attributes(), "param_shapes": shapes}


def _serializable(cls):
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)


# ---- blocks -----------------------------------------------------------------------------------

@_serializable
class MultiHeadAttention(SpecLayer):
    """spec ``mha``: call(query, key=None, value=None, mask=None) -> output
    (``return_weights=True``: (output, weights (B, H, T, S))). ``num_kv_heads``: grouped-query
    attention (None: num_heads)."""

    ATTRIBUTES = ("num_heads", "num_kv_heads")
    ARCHITECTURE = ("d_model", "key_dim", "use_bias")

    def __init__(self, d_model=None, num_heads=None, *, key_dim=None, use_bias=True,
                 num_kv_heads=None, **kw):
        super().__init__(**kw)
        self.d_model, self.num_heads, self.use_bias = d_model, num_heads, use_bias
        self.num_kv_heads = num_kv_heads
        self.key_dim = key_dim or (d_model // num_heads if d_model and num_heads else None)

    def default_shapes(self):
        d = _require("d_model", self.d_model)
        kv = None if self.num_kv_heads is None else self.num_kv_heads * self.key_dim
        return mha_shapes(d, self.num_heads * self.key_dim, self.use_bias, kv)

    def call(self, query, key=None, value=None, mask=None, return_weights=False):
        key = query if key is None else key
        value = key if value is None else value
        out, w = _mh.mha(query, key, value, mask, num_heads=self.num_heads,
                         num_kv_heads=self.num_kv_heads, params=self.params())
        return (out, w) if return_weights else out

    @classmethod
    def from_keras(cls, layer, **kw) -> MultiHeadAttention:
        """The same attention as a built ``keras.layers.MultiHeadAttention`` (convert.py)."""
        from . import convert

        return cls.from_spec(convert.mha_from_keras(layer), num_heads=layer.num_heads, **kw)

    def to_keras(self, dtype=None):
        """A built ``keras.layers.MultiHeadAttention`` with these weights, or with
        num_kv_heads a ``keras.layers.GroupQueryAttention`` (convert.py)."""
        from . import convert

        dtype = dtype or self.variable_dtype
        if self.num_kv_heads is not None:
            return convert.gqa_to_keras(self.spec_params(), num_heads=self.num_heads,
                                        num_kv_heads=self.num_kv_heads, dtype=dtype)
        return convert.mha_to_keras(self.spec_params(), num_heads=self.num_heads, dtype=dtype)

    def compute_output_spec(self, query, *args, return_weights=False, **kw):
        d_out = self._shapes()["w_o"][1]
        out = keras.KerasTensor(tuple(query.shape[:-1]) + (d_out,), dtype=self.compute_dtype)
        return out  # the symbolic call gives the output only


@_serializable
class LayerNorm(SpecLayer):
    """spec ``layer_norm``: call(x) -> y."""

    ATTRIBUTES = ("eps", "variant")
    ARCHITECTURE = ("d_model",)

    def __init__(self, d_model=None, *, eps=1e-5, variant="canonical", **kw):
        super().__init__(**kw)
        self.d_model, self.eps, self.variant = d_model, eps, variant

    def default_shapes(self):
        return ln_shapes(_require("d_model", self.d_model))

    def call(self, x):
        return _norm.layer_norm(x, params=self.params(), **self.attributes())

    @classmethod
    def from_keras(cls, layer, **kw) -> LayerNorm:
        """The same normalisation as a ``keras.layers.LayerNormalization(axis=-1)``."""
        from . import convert

        params, eps = convert.layer_norm_from_keras(layer)
        return cls.from_spec(params, eps=eps, **kw)

    def to_keras(self, dtype=None):
        from . import convert

        return convert.layer_norm_to_keras(self.spec_params(), eps=self.eps,
                                           dtype=dtype or self.variable_dtype)


@_serializable
class FeedForward(SpecLayer):
    """spec ``feedforward``: call(x) -> y."""

    ATTRIBUTES = ("activation",)
    ARCHITECTURE = ("d_model", "d_ff")

    def __init__(self, d_model=None, d_ff=None, *, activation="relu", **kw):
        super().__init__(**kw)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation

    def default_shapes(self):
        return ffn_shapes(_require("d_model", self.d_model), _require("d_ff", self.d_ff))

    def call(self, x):
        return _ffn.feedforward(x, params=self.params(), **self.attributes())


class _TransformerLayer(SpecLayer):
    """Shared constructor of the Transformer layers and stacks."""

    ATTRIBUTES = ("num_heads", "norm", "eps", "activation")
    ARCHITECTURE = ("d_model", "d_ff", "use_bias")

    def __init__(self, d_model=None, num_heads=None, d_ff=None, *, norm="post", eps=1e-5,
                 activation="relu", use_bias=True, **kw):
        super().__init__(**kw)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm, self.eps, self.activation, self.use_bias = norm, eps, activation, use_bias

    def _dims(self):
        return _require("d_model", self.d_model), _require("d_ff", self.d_ff)


@_serializable
class EncoderLayer(_TransformerLayer):
    """spec ``encoder_layer``: self_attn.*, norm1.*, ffn.*, norm2.*; call(x, mask=None)."""

    def default_shapes(self):
        return encoder_layer_shapes(*self._dims(), self.use_bias)

    def call(self, x, mask=None):
        return _layers.encoder_layer(x, mask, params=self.params(), **self.attributes())


@_serializable
class DecoderLayer(_TransformerLayer):
    """spec ``decoder_layer``: self_attn.*, norm1.*, cross_attn.*, norm2.*, ffn.*, norm3.*;
    call(x, memory, self_mask=None, memory_mask=None)."""

    def default_shapes(self):
        return decoder_layer_shapes(*self._dims(), self.use_bias)

    def call(self, x, memory, self_mask=None, memory_mask=None):
        return _layers.decoder_layer(x, memory, self_mask, memory_mask, params=self.params(),
                                     **self.attributes())


class _Stack(_TransformerLayer):
    ATTRIBUTES = ("num_layers",) + _TransformerLayer.ATTRIBUTES

    def __init__(self, d_model=None, num_heads=None, d_ff=None, *, num_layers=None, **kw):
        super().__init__(d_model, num_heads, d_ff, **kw)
        self.num_layers = num_layers


@_serializable
class Encoder(_Stack):
    """spec ``encoder``: layers.<i>.*, final_norm.* (pre-norm); call(x, mask=None)."""

    def default_shapes(self):
        d, f = self._dims()
        return stack_shapes(encoder_layer_shapes(d, f, self.use_bias), self.num_layers,
                            self.norm, d)

    def call(self, x, mask=None):
        return _layers.encoder(x, mask, params=self.params(), **self.attributes())


@_serializable
class Decoder(_Stack):
    """spec ``decoder``: layers.<i>.*, final_norm.* (pre-norm);
    call(x, memory, self_mask=None, memory_mask=None)."""

    def default_shapes(self):
        d, f = self._dims()
        return stack_shapes(decoder_layer_shapes(d, f, self.use_bias), self.num_layers,
                            self.norm, d)

    def call(self, x, memory, self_mask=None, memory_mask=None):
        return _layers.decoder(x, memory, self_mask, memory_mask, params=self.params(),
                               **self.attributes())


# ---- models on token ids ------------------------------------------------------------------------

class _Model(_Stack):
    """Shared by the Transformer models: vocabulary and maximum length as architecture."""

    ATTRIBUTES = ("pad_id",) + _Stack.ATTRIBUTES
    ARCHITECTURE = _Stack.ARCHITECTURE + ("vocab_size", "max_len")

    def __init__(self, d_model=None, num_heads=None, d_ff=None, *, pad_id=None,
                 vocab_size=None, max_len=None, **kw):
        super().__init__(d_model, num_heads, d_ff, **kw)
        self.pad_id, self.vocab_size, self.max_len = pad_id, vocab_size, max_len

    def _vocab(self):
        return _require("vocab_size", self.vocab_size)

    def _lm_head(self, d):
        return {"lm_head.w": (d, self._vocab()), "lm_head.b": (self._vocab(),)}


@_serializable
class Transformer(_Model):
    """spec ``transformer`` (encoder-decoder, sinusoidal positions):
    call(src_ids, tgt_ids) -> logits (B, T, L); ``generate(src_ids, ...)`` greedy."""

    ATTRIBUTES = _Model.ATTRIBUTES + ("tie_embeddings",)

    def __init__(self, *args, tie_embeddings=False, **kw):
        super().__init__(*args, **kw)
        self.tie_embeddings = tie_embeddings

    def default_shapes(self):
        d, f = self._dims()
        s = {"src_embed.table": (self._vocab(), d), "tgt_embed.table": (self._vocab(), d)}
        s.update(_scoped("encoder", stack_shapes(encoder_layer_shapes(d, f, self.use_bias),
                                                 self.num_layers, self.norm, d)))
        s.update(_scoped("decoder", stack_shapes(decoder_layer_shapes(d, f, self.use_bias),
                                                 self.num_layers, self.norm, d)))
        if not self.tie_embeddings:
            s.update(self._lm_head(d))
        return s

    def call(self, src_ids, tgt_ids):
        return _models.transformer(src_ids, tgt_ids, params=self.params(), **self.attributes())

    def output_shape_of(self, src, tgt):
        return tuple(tgt) + (self._shapes()["tgt_embed.table"][0],)

    def generate(self, src_ids, *, bos_id, eos_id, max_len):
        a = self.attributes()
        return _decoding.greedy_decode(None, src_ids, model="transformer", bos_id=bos_id,
                                       eos_id=eos_id, max_len=max_len, params=self.params(), **a)


@_serializable
class EncoderOnly(_Model):
    """spec ``encoder_only`` (BERT-style, learned positions): call(ids) -> (hidden, logits)."""

    def __init__(self, *args, activation="gelu", **kw):
        super().__init__(*args, activation=activation, **kw)

    def default_shapes(self):
        d, f = self._dims()
        s = {"embed.table": (self._vocab(), d),
             "pos.table": (_require("max_len", self.max_len), d)}
        s.update(_scoped("encoder", stack_shapes(encoder_layer_shapes(d, f, self.use_bias),
                                                 self.num_layers, self.norm, d)))
        s.update(self._lm_head(d))
        return s

    def call(self, ids):
        return _models.encoder_only(ids, params=self.params(), **self.attributes())

    def output_shape_of(self, ids):
        table = self._shapes()["embed.table"]
        return [tuple(ids) + (table[1],), tuple(ids) + (table[0],)]


@_serializable
class DecoderOnly(_Model):
    """spec ``decoder_only`` (GPT-style, learned positions, pre-norm by default):
    call(ids) -> logits (B, T, L); ``generate(prompt, ...)`` greedy with a KV cache.
    ``tie_embeddings=True`` (GPT-2): no lm_head.* weights; the head is embed.table^T, the
    one variable the embedding reads too (its gradient is the sum of both uses)."""

    ATTRIBUTES = _Model.ATTRIBUTES + ("tie_embeddings",)

    def __init__(self, *args, norm="pre", activation="gelu", tie_embeddings=False, **kw):
        super().__init__(*args, norm=norm, activation=activation, **kw)
        self.tie_embeddings = tie_embeddings

    def default_shapes(self):
        d, f = self._dims()
        s = {"embed.table": (self._vocab(), d),
             "pos.table": (_require("max_len", self.max_len), d)}
        s.update(stack_shapes(encoder_layer_shapes(d, f, self.use_bias), self.num_layers,
                              self.norm, d))
        if not self.tie_embeddings:
            s.update(self._lm_head(d))
        return s

    def call(self, ids):
        return _models.decoder_only(ids, params=self.params(), **self.attributes())

    def output_shape_of(self, ids):
        return tuple(ids) + (self._shapes()["embed.table"][0],)

    def generate(self, prompt, *, bos_id, eos_id, max_len):
        return _decoding.greedy_decode(prompt, model="decoder_only", bos_id=bos_id,
                                       eos_id=eos_id, max_len=max_len, params=self.params(),
                                       **self.attributes())


@_serializable
class Seq2SeqAttention(SpecLayer):
    """spec ``seq2seq_attention`` (GRU encoder-decoder with Bahdanau ``additive`` or Luong
    ``dot``/``general``/``concat`` attention): call(src_ids, tgt_ids) -> logits (B, T, L)
    teacher-forced; ``generate(src_ids, ...)`` greedy (``seq2seq_greedy_decode``)."""

    ATTRIBUTES = ("attention", "pad_id")
    ARCHITECTURE = ("src_vocab", "tgt_vocab", "embed_dim", "hidden", "attention_dim")

    def __init__(self, src_vocab=None, tgt_vocab=None, embed_dim=None, hidden=None, *,
                 attention="additive", pad_id=None, attention_dim=None, **kw):
        super().__init__(**kw)
        self.src_vocab, self.tgt_vocab, self.embed_dim, self.hidden = (
            src_vocab, tgt_vocab, embed_dim, hidden)
        self.attention, self.pad_id = attention, pad_id
        self.attention_dim = attention_dim or hidden

    def default_shapes(self):
        e, h = _require("embed_dim", self.embed_dim), _require("hidden", self.hidden)
        a = self.attention_dim
        s = {"encoder.embed.table": (_require("src_vocab", self.src_vocab), e),
             **_scoped("encoder.gru", gru_shapes(e, h)),
             "decoder.embed.table": (_require("tgt_vocab", self.tgt_vocab), e)}
        if self.attention == "additive":
            s.update(_scoped("decoder.gru", gru_shapes(e + h, h)))
            s.update({"attention.w_q": (h, a), "attention.w_k": (h, a), "attention.v": (a,)})
        else:
            s.update(_scoped("decoder.gru", gru_shapes(e, h)))
            s["decoder.combine.w"] = (2 * h, h)
            if self.attention == "general":
                s["attention.w"] = (h, h)
            elif self.attention == "concat":
                s.update({"attention.w": (2 * h, a), "attention.v": (a,)})
        s.update({"out.w": (h, self.tgt_vocab), "out.b": (self.tgt_vocab,)})
        return s

    def call(self, src_ids, tgt_ids):
        return _rnn.seq2seq_attention(src_ids, tgt_ids, params=self.params(),
                                      **self.attributes())

    def output_shape_of(self, src, tgt):
        return tuple(tgt) + (self._shapes()["out.w"][1],)

    def generate(self, src_ids, *, bos_id, eos_id, max_len):
        return _rnn.seq2seq_greedy_decode(src_ids, bos_id=bos_id, eos_id=eos_id,
                                          max_len=max_len, params=self.params(),
                                          **self.attributes())


LAYERS = {"mha": MultiHeadAttention, "layer_norm": LayerNorm, "feedforward": FeedForward,
          "encoder_layer": EncoderLayer, "decoder_layer": DecoderLayer, "encoder": Encoder,
          "decoder": Decoder, "transformer": Transformer, "encoder_only": EncoderOnly,
          "decoder_only": DecoderOnly, "seq2seq_attention": Seq2SeqAttention}
"""The Keras layer of each spec function that is a layer or a model."""
