"""Converters between the spec's decoder-only models and the zoo's whole models in
``transformers`` (issue 25 item 6), built on the layer converters (:mod:`.hf_zoo`)
and registered in :mod:`.hf` (``from_hf``, ``to_hf(..., model=)``,
``forward``):

- ``MistralForCausalLM``, ``Phi3ForCausalLM``, ``Qwen2ForCausalLM`` -> ``llama_decoder_only``:
  ``embed_tokens`` (unscaled) is ``embed.table``, each ``model.layers.<i>`` the layer
  converter's ``layers.<i>.*``, ``model.norm`` ``norm.gamma``, ``lm_head`` ``lm_head.w``
  (transposed) or, with ``tie_word_embeddings``, nothing (``tie_embeddings=True``: the head is
  ``embed.table^T``). Mistral's ``sliding_window`` is the spec's ``window`` (every layer),
  Phi-3's ``partial_rotary_factor`` its ``rotary_dim``, Qwen2's q/k/v biases its
  ``attention_bias``; a Qwen2 whose layers differ (``max_window_layers``: a window on some
  layers only) has no spec equivalent: the spec's window is one for every layer.
- ``GPTNeoXForCausalLM``, ``FalconForCausalLM`` -> ``parallel_decoder_only``: ``embed_in`` /
  ``word_embeddings`` (unscaled) is ``embed.table``, each layer the layer converter's
  (GPT-NeoX's per-head fused qkv, Falcon's three layouts), ``final_layer_norm`` / ``ln_f``
  ``final_norm.gamma``, ``.beta``, ``lm_head`` ``lm_head.w`` or, tied (Falcon's default),
  nothing (``tie_embeddings=True``).

``forward(model, ids, pad_id)`` calls the model as the spec function is called:
``attention_mask = ids != pad_id`` (the model adds the causal or window mask itself).
A config the spec function cannot express raises ``ConfigError`` naming the config field.
See spec/components/huggingface.md.
"""

from __future__ import annotations

import numpy as np
import torch
from attnspec.spec.errors import ConfigError
from transformers.models.falcon.modeling_falcon import FalconForCausalLM
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXForCausalLM
from transformers.models.mistral.modeling_mistral import MistralForCausalLM
from transformers.models.phi3.modeling_phi3 import Phi3ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

from .. import _checks
from . import hf_base as hf
from . import hf_zoo

SPEC_FUNCTION = {"MistralForCausalLM": "llama_decoder_only", "Qwen2ForCausalLM": "llama_decoder_only",
                 "Phi3ForCausalLM": "llama_decoder_only",
                 "GPTNeoXForCausalLM": "parallel_decoder_only",
                 "FalconForCausalLM": "parallel_decoder_only"}
CLASSES = {"GPTNeoXForCausalLM": GPTNeoXForCausalLM, "FalconForCausalLM": FalconForCausalLM,
           "MistralForCausalLM": MistralForCausalLM, "Qwen2ForCausalLM": Qwen2ForCausalLM,
           "Phi3ForCausalLM": Phi3ForCausalLM}
MODELS = tuple(CLASSES.values())
LAYER = {"MistralForCausalLM": "MistralDecoderLayer", "Qwen2ForCausalLM": "Qwen2DecoderLayer",
         "Phi3ForCausalLM": "Phi3DecoderLayer"}
_MODEL_ATTRS = ("num_layers", "pad_id", "tie_embeddings")


def _num_layers(attributes: dict, who: str) -> int:
    n = attributes.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{who}: num_layers must be a positive integer, got {n!r}")
    return n


def _layer_paths(n: int, layer_paths: set, head: set):
    layers = {str(i) for i in range(n)}

    def known(path: str) -> bool:
        if path in head:
            return True
        parts = path.split(".", 2)
        return len(parts) == 3 and parts[0] == "layers" and parts[1] in layers \
            and parts[2] in layer_paths
    return known


def _same(who: str, i: int, field: str, got, want):
    if got != want:
        raise ConfigError(f"{who}: layer {i} has {field}={got!r}, layer 0 {want!r}; the spec "
                          f"model has one {field} for every layer (config.layer_types, "
                          f"max_window_layers)")


def _layers_from_hf(who: str, layers: list) -> tuple[dict, dict]:
    """The layers through their layer converter: the attributes they share (a field that
    differs between layers raises, :func:`_same`) with ``num_layers``, and ``layers.<i>.*``."""
    convert = hf_zoo.FROM[type(layers[0])]
    attributes, params = None, {}
    for i, layer in enumerate(layers):
        a, p = convert(layer)
        if attributes is None:
            attributes = a
        for field in sorted(set(a) | set(attributes)):
            _same(who, i, field, a.get(field), attributes.get(field))
        params.update({f"layers.{i}.{k}": v for k, v in p.items()})
    return {**attributes, "num_layers": len(layers)}, params


# -- Mistral, Qwen2, Phi-3 <-> llama_decoder_only ------------------------------------------------


def llama_like_from_hf(model) -> tuple[dict, dict]:
    """A MistralForCausalLM, Qwen2ForCausalLM or Phi3ForCausalLM -> (attributes, params) of
    llama_decoder_only; ``pad_id`` is config.pad_token_id when set."""
    who = type(model).__name__
    attributes, params = _layers_from_hf(who, list(model.model.layers))
    params["embed.table"] = hf._t(model.model.embed_tokens.weight)
    c = model.config
    if c.pad_token_id is not None:
        attributes["pad_id"] = int(c.pad_token_id)
    params["norm.gamma"] = hf._t(model.model.norm.weight)
    if c.tie_word_embeddings:
        attributes["tie_embeddings"] = True
    else:
        params["lm_head.w"] = hf._t(model.lm_head.weight.T)
    return attributes, params


def llama_like_to_hf(params, attributes: dict, model: str):
    """Spec llama_decoder_only -> ``model`` (a key of :data:`LAYER`), eager attention,
    dropout 0, ``pad_token_id`` None (``pad_id`` is a call-time argument of :func:`forward`);
    tied (``tie_embeddings=True``) or with an untied ``lm_head``."""
    who = model
    n = _num_layers(attributes, who)
    tied = _checks.flag("tie_embeddings", attributes.get("tie_embeddings", False))
    layer_attrs = {k: v for k, v in attributes.items() if k not in _MODEL_ATTRS}
    layer = LAYER[model]
    table_paths = {s for _, s, _ in (hf_zoo.QWEN2 if layer == "Qwen2DecoderLayer" else hf.LLAMA)}
    head = {"embed.table", "norm.gamma"} | (set() if tied else {"lm_head.w"})
    p = hf._spec_params(params, _layer_paths(n, table_paths, head), who)
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    built = [hf_zoo.to_hf(p.scope(f"layers.{i}"), layer_attrs, model=layer) for i in range(n)]
    config = built[0].self_attn.config
    config.vocab_size, config.num_hidden_layers = vocab, n
    config.tie_word_embeddings, config.pad_token_id = tied, None
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [config.layer_types[0]] * n
    out = CLASSES[model](config)
    state = {"model.embed_tokens.weight": table,
             "model.norm.weight": p.require("norm.gamma", (d,)),
             "lm_head.weight": table if tied else p.require("lm_head.w", (d, vocab)).T}
    for i, module in enumerate(built):
        state.update({f"model.layers.{i}.{k}": v for k, v in module.state_dict().items()})
    out = hf._load(out, state, table.dtype, table.device)
    if tied and out.lm_head.weight.data_ptr() != out.model.embed_tokens.weight.data_ptr():
        raise ConfigError(f"{who}: transformers did not tie lm_head to embed_tokens")  # pragma: no cover
    return out


PARALLEL = {"GPTNeoXForCausalLM": ("GPTNeoXLayer", "gpt_neox", "embed_in", "layers",
                                   "final_layer_norm"),
            "FalconForCausalLM": ("FalconDecoderLayer", "transformer", "word_embeddings", "h",
                                  "ln_f")}


def parallel_from_hf(model) -> tuple[dict, dict]:
    """A GPTNeoXForCausalLM or FalconForCausalLM -> (attributes, params) of
    parallel_decoder_only; ``pad_id`` is config.pad_token_id when set."""
    who = type(model).__name__
    _, base, embed, stack, final = PARALLEL[who]
    body = getattr(model, base)
    attributes, params = _layers_from_hf(who, list(getattr(body, stack)))
    params["embed.table"] = hf._t(getattr(body, embed).weight)
    c = model.config
    if c.pad_token_id is not None:
        attributes["pad_id"] = int(c.pad_token_id)
    norm = getattr(body, final)
    params["final_norm.gamma"], params["final_norm.beta"] = hf._t(norm.weight), hf._t(norm.bias)
    if c.tie_word_embeddings:
        attributes["tie_embeddings"] = True
    else:
        params["lm_head.w"] = hf._t(model.lm_head.weight.T)
    return attributes, params


def parallel_to_hf(params, attributes: dict, model: str):
    """Spec parallel_decoder_only -> GPTNeoXForCausalLM or FalconForCausalLM (eager
    attention, dropout 0, ``pad_token_id`` None), tied or with an untied head."""
    who = model
    layer, base, embed, stack, final = PARALLEL[model]
    n = _num_layers(attributes, who)
    tied = _checks.flag("tie_embeddings", attributes.get("tie_embeddings", False))
    layer_attrs = {k: v for k, v in attributes.items() if k not in _MODEL_ATTRS}
    if layer == "GPTNeoXLayer":
        paths = {s for _, s, _ in hf_zoo.NEOX}
    else:
        paths = {s for _, s, _ in hf_zoo.FALCON + hf_zoo._FALCON_NORMS.get(
            attributes.get("num_norms", 2), [])}
    paths |= {f"attn.{w}_{c}" for w in "wb" for c in "qkv"}
    head = {"embed.table", "final_norm.gamma", "final_norm.beta"} | (
        set() if tied else {"lm_head.w"})
    p = hf._spec_params(params, _layer_paths(n, paths, head), who)
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    built = [hf_zoo.to_hf(p.scope(f"layers.{i}"), layer_attrs, model=layer) for i in range(n)]
    config = hf_zoo._config(built[0])
    config.vocab_size, config.num_hidden_layers = vocab, n
    config.tie_word_embeddings, config.pad_token_id = tied, None
    config.bos_token_id = config.eos_token_id = None
    out = CLASSES[model](config)
    prefix = f"{base}.{stack}"
    state = {f"{base}.{embed}.weight": table,
             f"{base}.{final}.weight": p.require("final_norm.gamma", (d,)),
             f"{base}.{final}.bias": p.require("final_norm.beta", (d,)),
             "lm_head.weight": table if tied else p.require("lm_head.w", (d, vocab)).T}
    for i, module in enumerate(built):
        state.update({f"{prefix}.{i}.{k}": v for k, v in module.state_dict().items()})
    out = hf._load(out, state, table.dtype, table.device)
    if tied and out.lm_head.weight.data_ptr() != getattr(out, base).get_input_embeddings(
            ).weight.data_ptr():
        raise ConfigError(f"{who}: transformers did not tie lm_head to the embedding")  # pragma: no cover
    return out


# -- dispatch --------------------------------------------------------------------------------


def from_hf(model) -> tuple[dict, dict]:
    if isinstance(model, (GPTNeoXForCausalLM, FalconForCausalLM)):
        return parallel_from_hf(model)
    return llama_like_from_hf(model)


def to_hf(params, attributes: dict, model: str):
    """Spec parameters and attributes -> the transformers model ``model`` (a key of
    :data:`SPEC_FUNCTION`)."""
    if model in LAYER:
        return llama_like_to_hf(params, attributes, model)
    if model in PARALLEL:
        return parallel_to_hf(params, attributes, model)
    raise ConfigError(f"model: {model!r} has no converter; supported: {', '.join(SPEC_FUNCTION)}")


def forward(model, ids: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """The logits (B, T, L) of the spec model on ``ids``: ``attention_mask = ids != pad_id``
    (the model adds the causal mask, the window and the positions 0..T-1 itself)."""
    keep = torch.ones_like(ids) if pad_id is None else (ids != pad_id).long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=keep, use_cache=False).logits


# -- which vectors a model can express ------------------------------------------------------


def expressible(v, model: str):
    """The attributes of vector ``v`` (a llama_decoder_only or parallel_decoder_only value
    vector) for ``to_hf(..., model=model)``, or None where the model cannot express it: Qwen2
    without attention_bias or the others with it, a rotary_dim below K but for Phi-3, a
    rope_scaling rule Phi-3 refuses, a head width other than D / H (only Mistral has
    head_dim); a row where a query sees no key (causal, not pad_id, within the window):
    transformers gives it uniform weights, the spec zeros."""
    a = dict(v.attributes)
    ids = np.asarray(v.inputs["ids"])
    t = ids.shape[1]
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    keep = (j <= i)[None] & (ids != a.get("pad_id"))[:, None, :]  # (B, T, T)
    if a.get("window") is not None:
        keep = keep & (i - j < a["window"])[None]
    if not keep.any(-1).all():
        return None
    p = v.params
    if model in PARALLEL:
        h, w_q = a["num_heads"], p["layers.0.attn.w_q"]
        if w_q.shape[1] != p["embed.table"].shape[1]:
            return None
        if model == "GPTNeoXForCausalLM" and (a.get("num_kv_heads") not in (None, h)
                                              or a.get("num_norms", 2) != 2):
            return None
        if model == "FalconForCausalLM" and a.get("rotary_dim") not in (None, w_q.shape[1] // h):
            return None  # Falcon rotates whole heads
        return a
    if (model == "Qwen2ForCausalLM") != bool(a.get("attention_bias")):
        return None
    h = a["num_heads"]
    w_q = p["layers.0.attn.w_q"]
    d = p["embed.table"].shape[1]
    if model != "MistralForCausalLM" and w_q.shape[1] != d:
        return None
    r = a.get("rotary_dim")
    if r is not None and r != w_q.shape[1] // h and model != "Phi3ForCausalLM":
        return None
    kind = (a.get("rope_scaling") or {}).get("rope_type", "default")
    if model == "Phi3ForCausalLM" and kind not in hf_zoo.PHI3_ROPE:
        return None
    return a

