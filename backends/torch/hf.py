"""Converters between spec parameters ``{canonical path: tensor}`` and Hugging Face
``transformers`` layers (the optional ``hf`` extra: ``pip install 'attnspec[hf]'``).

- ``BertLayer`` -> ``encoder_layer``: ``norm="post"``, ``eps=layer_norm_eps`` (1e-12);
- ``GPT2Block`` -> ``encoder_layer``: ``norm="pre"``, ``mask=causal(T)`` (GPT2Model's);
- ``GPT2LMHeadModel`` -> ``decoder_only``: wte, wpe, the blocks, ln_f, the head tied to wte
  (``tie_embeddings=True``, no bias) (``hf_gpt2.py``);
- ``LlamaDecoderLayer`` -> ``llama_layer``: causal always, RoPE ``"half"`` (rotate_half);
- ``LlamaForCausalLM`` -> ``llama_decoder_only``: ids, ``attention_mask = ids != pad_id``.
- ``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock``, ``DeepseekV3MoE`` -> ``moe``
  (``hf_moe.py``).
- ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Phi3ForCausalLM`` -> ``llama_decoder_only``,
  ``GPTNeoXForCausalLM``, ``FalconForCausalLM`` -> ``parallel_decoder_only`` (``hf_models.py``);
  ``Gemma2ForCausalLM``, ``Gemma3ForCausalLM`` -> ``gemma_decoder_only`` (``hf_gemma.py``).
- ``DeepseekV2Moe``, ``DeepseekV2Attention``, ``DeepseekV2DecoderLayer`` -> ``moe``, ``mla``,
  ``deepseek_layer`` (``hf_deepseek_v2.py``; ``to_hf(..., model="DeepseekV2...")``).

``from_hf(module) -> (attributes, params)`` and ``to_hf(params, attributes) -> module``;
``forward(module, x, mask=None, offset=0)`` calls a module as the spec function is called
(spec boolean mask -> HF's 4-D additive float mask, RoPE cos/sin for positions
``offset..offset+T-1``). The layout conversion happens here and nowhere else:

- ``nn.Linear`` (Bert, Llama) stores W as (out, in): every weight is transposed. GPT-2's
  ``Conv1D`` already stores W as (in, out) (``x @ W + b``) and packs ``W_q, W_k, W_v``
  into ``c_attn`` (D, 3D): the three column blocks, not transposed.
- Head h owns rows ``h*K:(h+1)*K`` of an HF projection (``view(..., -1, head_dim)``),
  the spec's columns; Llama's query head h reads kv head ``h // (H / H_kv)``
  (``repeat_kv``), as the spec's GQA.
- Masks: HF layers take an additive float mask (0 = attend, the dtype's minimum =
  masked) broadcastable to (B, H, T, S); the spec's is boolean, True = may attend.
  A row with nothing to attend to gets uniform weights in HF and zeros in the spec.

A config the spec function cannot express (another activation, cross-attention,
Llama biases, a RoPE rule the spec does not state...) raises ``ConfigError`` naming the config
field. ``rope_parameters`` (rope_theta, rope_type and its fields) becomes ``rope_base`` and
``rope_scaling`` (:mod:`.hf_rope`). See
spec/components/huggingface.md.
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError, DeviceError, DomainError, DTypeError, ShapeError
from transformers import BertConfig, LlamaConfig
from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaRotaryEmbedding,
)

from .. import _checks
from .._checks import params_of
from . import hf_deepseek_v2, hf_gpt2, hf_mla, hf_models, hf_moe_layers, hf_rope, hf_t5, hf_zoo
from .hf_base import (  # noqa: F401 (the converters' shared helpers, re-exported)
    _TO_HF_ACTIVATION,
    ACTIVATIONS,
    LLAMA,
    _activation,
    _activation_to_hf,
    _check_attributes,
    _eps,
    _from_state,
    _heads,
    _load,
    _mask,
    _spec_params,
    _t,
    _to_state,
    _unsupported,
    additive_mask,
)
from .hf_gemma import GAIN as _GEMMA_GAIN
from .hf_gemma import LAYERS as _GEMMA_LAYERS
from .hf_gemma import MODEL_FUNCTION as _GEMMA_MODEL_FUNCTION
from .hf_gemma import MODELS as _GEMMA_MODELS
from .hf_gemma import SPEC_FUNCTION as _GEMMA_FUNCTION
from .hf_gemma import forward as _gemma_forward
from .hf_gemma import (
    gemma_for_causal_lm_from_hf,
    gemma_for_causal_lm_to_hf,
    gemma_layer_from_hf,
    gemma_layer_to_hf,
)
from .hf_gemma import model_forward as _gemma_model_forward
from .hf_gpt2 import (  # noqa: F401 (the GPT-2 converters, re-exported)
    _GPT2_PATHS,
    GPT2,
    GPT2Block,
    _bias,
    _gpt2_config,
    gpt2_block_from_hf,
    gpt2_block_to_hf,
)
from .hf_mla import mla_to_hf
from .hf_moe import MOE_CLASSES, moe_forward, moe_from_hf, moe_to_hf
from .hf_moe import SPEC_FUNCTION as _MOE_FUNCTION
from .hf_moe_layers import LAYERS as _MOE_LAYERS
from .hf_moe_layers import SPEC_FUNCTION as _MOE_LAYER_FUNCTION

SPEC_FUNCTION = {"BertLayer": "encoder_layer", "GPT2Block": "encoder_layer",
                 "LlamaDecoderLayer": "llama_layer", "LlamaForCausalLM": "llama_decoder_only",
                 **hf_gpt2.SPEC_FUNCTION, **hf_t5.SPEC_FUNCTION,
                 **_MOE_FUNCTION, **_GEMMA_FUNCTION, **hf_zoo.SPEC_FUNCTION,
                 "DeepseekV3Attention": "mla", **_MOE_LAYER_FUNCTION, **_GEMMA_MODEL_FUNCTION,
                 **hf_models.SPEC_FUNCTION, **hf_deepseek_v2.SPEC_FUNCTION}

# (HF state_dict name, spec path, transposed); a spec path ending in b_* is an optional bias.
BERT = [
    ("attention.self.query.weight", "self_attn.w_q", True),
    ("attention.self.query.bias", "self_attn.b_q", False),
    ("attention.self.key.weight", "self_attn.w_k", True),
    ("attention.self.key.bias", "self_attn.b_k", False),
    ("attention.self.value.weight", "self_attn.w_v", True),
    ("attention.self.value.bias", "self_attn.b_v", False),
    ("attention.output.dense.weight", "self_attn.w_o", True),
    ("attention.output.dense.bias", "self_attn.b_o", False),
    ("attention.output.LayerNorm.weight", "norm1.gamma", False),
    ("attention.output.LayerNorm.bias", "norm1.beta", False),
    ("intermediate.dense.weight", "ffn.w1", True),
    ("intermediate.dense.bias", "ffn.b1", False),
    ("output.dense.weight", "ffn.w2", True),
    ("output.dense.bias", "ffn.b2", False),
    ("output.LayerNorm.weight", "norm2.gamma", False),
    ("output.LayerNorm.bias", "norm2.beta", False),
]


_BERT_PATHS = {spec for _, spec, _ in BERT}
_LLAMA_PATHS = {spec for _, spec, _ in LLAMA}


# -- BertLayer <-> encoder_layer (post-norm) --------------------------------------------------


def bert_layer_from_hf(layer: BertLayer) -> tuple[dict, dict]:
    c = layer.attention.self.config
    if c.is_decoder or c.add_cross_attention:
        _unsupported("BertLayer", "is_decoder" if c.is_decoder else "add_cross_attention",
                     True, "only the encoder's self-attention layer maps to encoder_layer")
    attributes = {"num_heads": c.num_attention_heads, "norm": "post",
                  "eps": float(c.layer_norm_eps),
                  "activation": _activation("BertLayer", "hidden_act", c.hidden_act)}
    return attributes, _from_state(layer, BERT)


def bert_layer_to_hf(params, attributes: dict) -> BertLayer:
    """Spec ``encoder_layer`` (norm="post") -> ``BertLayer`` (eager attention, dropout 0)."""
    who = "BertLayer"
    _check_attributes(attributes, {"norm": "post"}, {"num_heads", "norm", "eps", "activation"}, who)
    p = _spec_params(params, _BERT_PATHS, who)
    w1 = p.require("ffn.w1", (None, None))
    d, f = w1.shape
    config = BertConfig(hidden_size=d, num_attention_heads=_heads(attributes, d, who),
                        intermediate_size=f, hidden_act=_activation_to_hf(attributes, who),
                        layer_norm_eps=_eps(attributes, 1e-5, who), hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, attn_implementation="eager")
    layer = BertLayer(config)
    return _load(layer, _to_state(p, BERT, layer.state_dict()), w1.dtype, w1.device)


# -- LlamaDecoderLayer <-> llama_layer -----------------------------------------------------------


def _llama_config(layer: LlamaDecoderLayer) -> LlamaConfig:
    c = layer.self_attn.config
    for field, ok in (("attention_bias", False), ("mlp_bias", False)):
        if bool(getattr(c, field)) != ok:
            _unsupported("LlamaDecoderLayer", field, getattr(c, field),
                         "llama_layer has no biases")
    if c.hidden_act != "silu":
        _unsupported("LlamaDecoderLayer", "hidden_act", c.hidden_act,
                     "llama_layer's feed-forward is SwiGLU (silu)")
    return c


def llama_layer_from_hf(layer: LlamaDecoderLayer) -> tuple[dict, dict]:
    c = _llama_config(layer)
    attributes = {"num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
                  "eps": float(c.rms_norm_eps),
                  **hf_rope.from_hf("LlamaDecoderLayer", c, c.rope_parameters,
                                    layer.self_attn.head_dim, partial=False)}
    return attributes, _from_state(layer, LLAMA)


def llama_layer_to_hf(params, attributes: dict) -> LlamaDecoderLayer:
    """Spec ``llama_layer`` -> ``LlamaDecoderLayer`` (eager attention, no biases; rope_base
    and rope_scaling as ``rope_parameters``, :mod:`.hf_rope`). ``offset`` is a call-time
    argument of :func:`forward`; a ``window`` has no LlamaConfig field (Mistral's
    ``sliding_window``) and a ``rotary_dim`` below K none either (Llama rotates whole heads):
    both raise ConfigError."""
    who = "LlamaDecoderLayer"
    _check_attributes(attributes, {"window": None, "offset": 0},
                      {"num_heads", "num_kv_heads", "eps", "rope_base", "window", "offset",
                       "rope_scaling", "rotary_dim"}, who)
    p = _spec_params(params, _LLAMA_PATHS, who)
    w_q, w_k = p.require("attn.w_q", (None, None)), p.require("attn.w_k", (None, None))
    w_up = p.require("ffn.w_up", (None, None))
    d, f = w_up.shape
    h = _heads(attributes, d, who)
    h_kv = attributes.get("num_kv_heads") or h
    if isinstance(h_kv, bool) or not isinstance(h_kv, int) or h_kv < 1 or h % h_kv:
        raise ConfigError(f"{who}: num_kv_heads={h_kv!r} must divide num_heads={h}")
    if w_q.shape[1] % h:
        raise ConfigError(f"{who}: num_heads={h} does not divide attn.w_q's width {w_q.shape[1]}")
    rope, extra = hf_rope.to_hf(who, attributes, w_q.shape[1] // h, partial=False)
    config = LlamaConfig(hidden_size=d, intermediate_size=f, num_attention_heads=h,
                         num_key_value_heads=h_kv, head_dim=w_q.shape[1] // h,
                         rms_norm_eps=_eps(attributes, 1e-6, who), hidden_act="silu",
                         rope_parameters=rope, attention_bias=False, mlp_bias=False,
                         attention_dropout=0.0, attn_implementation="eager", **extra)
    layer = LlamaDecoderLayer(config, layer_idx=0)
    if w_k.shape[1] != h_kv * config.head_dim:
        raise ConfigError(f"{who}: attn.w_k has width {w_k.shape[1]}, expected "
                          f"num_kv_heads * K = {h_kv} * {config.head_dim}")
    return _load(layer, _to_state(p, LLAMA, layer.state_dict()), w_up.dtype, w_up.device)


# -- LlamaForCausalLM <-> llama_decoder_only ---------------------------------------------------


def llama_for_causal_lm_from_hf(model: LlamaForCausalLM) -> tuple[dict, dict]:
    """``pad_id`` is config.pad_token_id when set: transformers masks the keys its
    ``attention_mask`` marks 0, which :func:`forward` builds from ``ids != pad_id``."""
    layers = list(model.model.layers)
    attributes, _ = llama_layer_from_hf(layers[0])
    attributes["num_layers"] = len(layers)
    if model.config.pad_token_id is not None:
        attributes["pad_id"] = model.config.pad_token_id
    params = {"embed.table": _t(model.model.embed_tokens.weight)}
    for i, layer in enumerate(layers):
        params.update({f"layers.{i}.{k}": v for k, v in llama_layer_from_hf(layer)[1].items()})
    params["norm.gamma"] = _t(model.model.norm.weight)
    params["lm_head.w"] = _t(model.lm_head.weight.T)
    return attributes, params


def llama_for_causal_lm_to_hf(params, attributes: dict) -> LlamaForCausalLM:
    """Spec ``llama_decoder_only`` -> ``LlamaForCausalLM`` (untied lm_head, eager attention);
    ``pad_id`` is a call-time argument of :func:`forward`."""
    who = "LlamaForCausalLM"
    layer_attrs = {k: v for k, v in attributes.items() if k not in ("num_layers", "pad_id")}
    n = attributes.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{who}: num_layers must be a positive integer, got {n!r}")
    p = _spec_params(params, lambda path: path in ("embed.table", "norm.gamma", "lm_head.w") or (
        path.startswith("layers.") and path.split(".", 2)[1] in {str(i) for i in range(n)}
        and path.split(".", 2)[2:] and path.split(".", 2)[2] in _LLAMA_PATHS), who)
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    first = llama_layer_to_hf(p.scope("layers.0"), layer_attrs)
    config = first.self_attn.config
    config.vocab_size, config.num_hidden_layers, config.tie_word_embeddings = vocab, n, False
    model = LlamaForCausalLM(config)
    state = {"model.embed_tokens.weight": table,
             "model.norm.weight": p.require("norm.gamma", (d,)),
             "lm_head.weight": p.require("lm_head.w", (d, vocab)).T}
    like = first.state_dict()
    for i in range(n):
        layer = _to_state(p.scope(f"layers.{i}"), LLAMA, like)
        state.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    return _load(model, state, table.dtype, table.device)


# -- dispatch -------------------------------------------------------------------------------------


_FROM = {BertLayer: bert_layer_from_hf, GPT2Block: gpt2_block_from_hf,
         hf_gpt2.GPT2LMHeadModel: hf_gpt2.gpt2_lm_from_hf,
         LlamaDecoderLayer: llama_layer_from_hf, LlamaForCausalLM: llama_for_causal_lm_from_hf,
         **dict.fromkeys(MOE_CLASSES, moe_from_hf),
         **dict.fromkeys(_GEMMA_LAYERS, gemma_layer_from_hf),
         **dict.fromkeys(_MOE_LAYERS, hf_moe_layers.from_hf),
         **dict.fromkeys(_GEMMA_MODELS, gemma_for_causal_lm_from_hf),
         **dict.fromkeys(hf_deepseek_v2.CLASSES, hf_deepseek_v2.from_hf)}


def from_hf(module) -> tuple[dict, dict]:
    """A ``BertLayer``, ``GPT2Block``, ``LlamaDecoderLayer`` or ``LlamaForCausalLM`` ->
    ``(attributes, params)`` of its spec function (:data:`SPEC_FUNCTION`), params in the
    canonical layout."""
    for cls, convert in _FROM.items():
        if isinstance(module, cls):
            return convert(module)
    for cls, convert in hf_zoo.FROM.items():
        if isinstance(module, cls):
            return convert(module)
    if isinstance(module, hf_models.MODELS):  # Mistral/Qwen2/Phi3/GPT-NeoX/Falcon ForCausalLM
        return hf_models.from_hf(module)
    if isinstance(module, hf_mla.DeepseekV3Attention):
        return hf_mla.mla_from_hf(module)
    if isinstance(module, hf_t5.T5ForConditionalGeneration):  # t5_model
        return hf_t5.t5_model_from_hf(module)
    if isinstance(module, hf_t5.T5Stack):  # t5_encoder or t5_decoder (config.is_decoder)
        return hf_t5.t5_stack_from_hf(module)[1:]
    if isinstance(module, hf_t5.T5Block):  # one layer's layers.<i>.* parameters
        return hf_t5.t5_block_from_hf(module)
    raise ConfigError(f"module: {type(module).__name__} has no converter; supported: "
                      f"{', '.join(SPEC_FUNCTION)}")


def to_hf(params, attributes: dict, model: str | None = None):
    """Spec parameters and attributes -> the transformers module: ``decoder_only``
    parameters (``embed.table`` and ``pos.table``) give a ``GPT2LMHeadModel``,
    ``llama_decoder_only`` ones (``embed.table``, no ``pos.table``) a ``LlamaForCausalLM``,
    ``llama_layer`` ones (``attn_norm.gamma``) a ``LlamaDecoderLayer``; ``encoder_layer`` ones a ``BertLayer``
    (norm="post", the default) or a ``GPT2Block`` (norm="pre"); ``moe`` ones (``router.w``)
    a MoE block, ``mla`` ones (``w_kv_a``) a ``DeepseekV3Attention``; ``t5_encoder`` /
    ``t5_decoder`` ones (``layers.0.<attn>.rel_bias.table``) a ``T5Stack``
    (``hf_t5.t5_block_to_hf`` builds one ``T5Block``). ``model`` names one
    of :data:`.hf_zoo.SPEC_FUNCTION` (``"Qwen2DecoderLayer"``, ``"GPTNeoXLayer"``...)
    instead, or one of :data:`.hf_models.SPEC_FUNCTION` (``"Qwen2ForCausalLM"``...) or
    ``"Gemma2ForCausalLM"`` / ``"Gemma3ForCausalLM"``."""
    if model == "T5Stack":
        return hf_t5.t5_stack_to_hf(params, attributes)
    if model == hf_t5.MODEL or (model is None and "shared.table" in params_of(params)):
        return hf_t5.t5_model_to_hf(params, attributes)  # t5_model
    if model in hf_models.SPEC_FUNCTION:
        return hf_models.to_hf(params, attributes, model)
    if model in _GEMMA_MODEL_FUNCTION:  # qk_norm picks the class: it must be the one named
        qk = _checks.flag("qk_norm", attributes.get("qk_norm", False))
        if qk != (model == "Gemma3ForCausalLM"):
            raise ConfigError(f"model={model!r} needs qk_norm={model == 'Gemma3ForCausalLM'}, "
                              f"got qk_norm={qk!r}")
        return gemma_for_causal_lm_to_hf(params, attributes)
    if model in hf_deepseek_v2.SPEC_FUNCTION:
        return hf_deepseek_v2.to_hf(params, attributes, model)
    if model is not None:
        return hf_zoo.to_hf(params, attributes, model)
    if hf_t5.is_t5_stack(params_of(params)):  # t5_encoder / t5_decoder: a T5Stack
        return hf_t5.t5_stack_to_hf(params, attributes)
    if ("moe.router.w" in params_of(params) or "attn.w_kv_a" in params_of(params)
            or "layers.0.attn.w_kv_a" in params_of(params)):
        return hf_moe_layers.to_hf(params, attributes)  # mixtral/deepseek layer, deepseek model
    if "router.w" in params_of(params):
        return moe_to_hf(params, attributes)  # MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock
    if "w_kv_a" in params_of(params):  # mla: a DeepseekV3Attention (hf_mla.py)
        return mla_to_hf(params, attributes)
    if "input_norm.gamma" in params_of(params):  # gemma_layer (hf_gemma.py)
        return gemma_layer_to_hf(params, attributes)
    if "layers.0.input_norm.gamma" in params_of(params):  # gemma_decoder_only (hf_gemma.py)
        return gemma_for_causal_lm_to_hf(params, attributes)
    if "embed.table" in params_of(params) and "pos.table" in params_of(params):
        return hf_gpt2.gpt2_lm_to_hf(params, attributes)  # decoder_only: GPT2LMHeadModel
    if "embed.table" in params_of(params):
        return llama_for_causal_lm_to_hf(params, attributes)
    if "attn_norm.gamma" in params_of(params):
        return llama_layer_to_hf(params, attributes)
    if attributes.get("norm", "post") == "pre":
        return gpt2_block_to_hf(params, attributes)
    return bert_layer_to_hf(params, attributes)


# -- calling a layer as the spec function is called -----------------------------------------------


def forward(module, x, mask=None, *, offset: int = 0, pad_id: int | None = None) -> torch.Tensor:
    """``y`` of the spec function for ``module`` on ``x`` (B, T, D) with the spec's boolean
    ``mask``. A ``LlamaDecoderLayer`` is causal (ANDed with ``mask``) and gets RoPE cos/sin
    from ``LlamaRotaryEmbedding`` for positions ``offset..offset+T-1``; a ``BertLayer`` or
    ``GPT2Block`` gets the mask as given (GPT-2 as in GPT2Model: pass ``causal(T)``).
    A ``LlamaForCausalLM`` takes ids (B, T) as ``x`` and returns the logits; its
    ``attention_mask`` is ``ids != pad_id`` (the model adds the causal mask itself).
    A ``T5ForConditionalGeneration`` takes ``x = (src_ids, tgt_ids)`` and ``pad_id``
    (t5_model's logits, ``hf_t5.model_forward``)."""
    if isinstance(module, hf_t5.T5ForConditionalGeneration):  # t5_model: x = (src, tgt) ids
        if mask is not None or offset or pad_id is None or not isinstance(x, tuple):
            raise ConfigError("T5ForConditionalGeneration: pass x = (src_ids, tgt_ids) and "
                              "pad_id, not mask or offset")
        return hf_t5.model_forward(module, *x, pad_id)
    if isinstance(module, hf_deepseek_v2.CLASSES):
        if pad_id is not None:
            raise ConfigError(f"{type(module).__name__}: pad_id is the model's, not a layer's")
        return hf_deepseek_v2.forward(module, x, mask, offset=offset)
    if isinstance(module, MOE_CLASSES):
        if mask is not None or offset or pad_id is not None:
            raise ConfigError(f"{type(module).__name__}: moe takes no mask, offset or pad_id")
        return moe_forward(module, x)
    if isinstance(module, _MOE_LAYERS):
        return hf_moe_layers.forward(module, x, mask, offset=offset, pad_id=pad_id)
    if isinstance(module, hf_models.MODELS):
        if mask is not None or offset:
            raise ConfigError(f"{type(module).__name__}: pass pad_id, not mask or offset")
        _forward_checks(module, x, offset, pad_id)
        return hf_models.forward(module, x, pad_id)
    zoo = hf_zoo
    if isinstance(module, tuple(zoo.FROM)) and pad_id is None:
        return zoo.forward(module, x, mask, offset=offset)
    if isinstance(module, _GEMMA_MODELS):
        return _gemma_model_forward(module, x, mask, offset=offset, pad_id=pad_id)
    who = _forward_checks(module, x, offset, pad_id)
    if isinstance(module, _GEMMA_LAYERS):
        return _gemma_forward(module, x, mask, offset=offset)
    if isinstance(module, hf_gpt2.GPT2LMHeadModel):
        if mask is not None or offset:
            raise ConfigError("GPT2LMHeadModel: pass pad_id, not mask or offset")
        return hf_gpt2.forward(module, x, pad_id)
    if isinstance(module, LlamaForCausalLM):
        if mask is not None or offset:
            raise ConfigError("LlamaForCausalLM: pass pad_id, not mask or offset")
        keep = torch.ones_like(x) if pad_id is None else (x != pad_id).long()
        with torch.no_grad():
            return module(input_ids=x, attention_mask=keep).logits
    kwargs = {}
    if isinstance(module, LlamaDecoderLayer):
        t = x.shape[1]
        keep = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        mask = keep if mask is None else torch.as_tensor(mask, device=x.device) & keep
        positions = torch.arange(offset, offset + t, device=x.device)[None]
        rotary = LlamaRotaryEmbedding(module.self_attn.config).to(x.device)
        kwargs["position_embeddings"] = rotary(x, positions)
        kwargs["position_ids"] = positions
    elif offset:
        raise ConfigError(f"offset={offset} applies to LlamaDecoderLayer only")
    attention_mask = None if mask is None else additive_mask(_mask(mask, x, who), x.dtype).to(x.device)
    with torch.no_grad():
        out = module(x, attention_mask=attention_mask, **kwargs)
    return out[0] if isinstance(out, tuple) else out  # transformers < 5 returned tuples


# a (D,) parameter of each layer: its width
_GAIN = {BertLayer: "attention.output.LayerNorm.weight", GPT2Block: "ln_1.weight",
         LlamaDecoderLayer: "input_layernorm.weight", **_GEMMA_GAIN}


def _forward_checks(module, x, offset, pad_id) -> str:
    """The spec's errors for :func:`forward`'s arguments (transformers' own would be
    tracebacks deep in the layer); returns the module's class name."""
    who = type(module).__name__
    if not isinstance(module, tuple(_FROM) + hf_models.MODELS):
        raise ConfigError(f"module: {who} has no converter; supported: {', '.join(SPEC_FUNCTION)}")
    if not isinstance(x, torch.Tensor):
        raise DTypeError(f"{who}: x must be a torch.Tensor, got {type(x).__name__}")
    _checks.integer("offset", offset, lo=0)
    weight = next(module.parameters())
    if x.device != weight.device:
        raise DeviceError(f"{who}: x is on {x.device}, the module on {weight.device}")
    if isinstance(module, (LlamaForCausalLM, hf_gpt2.GPT2LMHeadModel, *hf_models.MODELS)):
        return _ids_checks(module, x, pad_id, who)
    if pad_id is not None:
        raise ConfigError(f"pad_id applies to LlamaForCausalLM and GPT2LMHeadModel only, not {who}")
    gain = next(name for cls, name in _GAIN.items() if isinstance(module, cls))
    d = module.get_parameter(gain).shape[0]
    if x.dim() != 3 or x.shape[-1] != d:
        raise ShapeError(f"{who}: x must have shape (B, T, D = {d}), got {tuple(x.shape)}")
    if x.dtype != weight.dtype:
        raise DTypeError(f"{who}: x has dtype {x.dtype}, the module's parameters {weight.dtype}")
    return who


def _ids_checks(module, x, pad_id, who: str) -> str:
    if x.dim() != 2 or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise DTypeError(f"{who}: x must be integer token ids of shape (B, T), got "
                         f"{x.dtype} {tuple(x.shape)}")
    vocab = module.config.vocab_size
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab):
        raise DomainError(f"{who}: token ids must be in [0, {vocab}), got values in "
                          f"[{int(x.min())}, {int(x.max())}]")
    if pad_id is not None:
        _checks.integer("pad_id", pad_id, lo=0, hi=vocab - 1)
    return who


