"""Converters between the spec's decoder-only models and the zoo's whole models in
``transformers`` (issue 25 item 6), built on the layer converters (:mod:`.hf_zoo`,
:mod:`.hf_gemma`) and registered in :mod:`.hf` (``from_hf``, ``to_hf(..., model=)``,
``forward``):

- ``MistralForCausalLM``, ``Phi3ForCausalLM``, ``Qwen2ForCausalLM`` -> ``llama_decoder_only``:
  ``embed_tokens`` (unscaled) is ``embed.table``, each ``model.layers.<i>`` the layer
  converter's ``layers.<i>.*``, ``model.norm`` ``norm.gamma``, ``lm_head`` ``lm_head.w``
  (transposed) or, with ``tie_word_embeddings``, nothing (``tie_embeddings=True``: the head is
  ``embed.table^T``). Mistral's ``sliding_window`` is the spec's ``window`` (every layer),
  Phi-3's ``partial_rotary_factor`` its ``rotary_dim``, Qwen2's q/k/v biases its
  ``attention_bias``; a Qwen2 whose layers differ (``max_window_layers``: a window on some
  layers only) has no spec equivalent: the spec's window is one for every layer.
- ``Gemma2ForCausalLM``, ``Gemma3ForCausalLM`` (text) -> ``gemma_decoder_only``: the embedding
  scaled by sqrt(D) (transformers' ``normalizer`` / ``embed_scale``), the layers alternating
  ``sliding_attention`` (even i, ``window``, Gemma 3's local ``rope_theta`` = the spec's
  ``rope_local_base``) and ``full_attention`` (odd i, ``rope_base``), the final (1 + w)
  RMSNorm, the head tied to the embedding (Gemma always ties), ``final_logit_softcapping``
  = ``final_softcap``. Gemma 3's default ``layer_types`` (five local layers per global one)
  is not the spec's alternation: its converter writes ``layer_types`` explicitly, and from_hf
  refuses any other pattern, naming ``layer_types``. A Gemma 3 ``rope_local_base`` without a
  window becomes sliding layers with ``sliding_window`` = 2**30 (transformers gives the local
  base to the sliding layers only), which from_hf reads back as ``window=2**30``.

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
from transformers.models.gemma2.modeling_gemma2 import Gemma2ForCausalLM
from transformers.models.gemma3.modeling_gemma3 import Gemma3ForCausalLM
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXForCausalLM
from transformers.models.mistral.modeling_mistral import MistralForCausalLM
from transformers.models.phi3.modeling_phi3 import Phi3ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

from .. import _checks
from . import hf_base as hf
from . import hf_gemma, hf_zoo

SPEC_FUNCTION = {"MistralForCausalLM": "llama_decoder_only", "Qwen2ForCausalLM": "llama_decoder_only",
                 "Phi3ForCausalLM": "llama_decoder_only", "Gemma2ForCausalLM": "gemma_decoder_only",
                 "Gemma3ForCausalLM": "gemma_decoder_only",
                 "GPTNeoXForCausalLM": "parallel_decoder_only",
                 "FalconForCausalLM": "parallel_decoder_only"}
CLASSES = {"GPTNeoXForCausalLM": GPTNeoXForCausalLM, "FalconForCausalLM": FalconForCausalLM,
           "MistralForCausalLM": MistralForCausalLM, "Qwen2ForCausalLM": Qwen2ForCausalLM,
           "Phi3ForCausalLM": Phi3ForCausalLM, "Gemma2ForCausalLM": Gemma2ForCausalLM,
           "Gemma3ForCausalLM": Gemma3ForCausalLM}
MODELS = tuple(CLASSES.values())
LAYER = {"MistralForCausalLM": "MistralDecoderLayer", "Qwen2ForCausalLM": "Qwen2DecoderLayer",
         "Phi3ForCausalLM": "Phi3DecoderLayer"}
UNBOUNDED = 1 << 30  # Gemma 3's local layers without a window: a sliding window that never binds
_MODEL_ATTRS = ("num_layers", "pad_id", "tie_embeddings")
_GEMMA_MODEL_ATTRS = ("num_layers", "pad_id", "final_softcap", "rope_local_base")


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


# -- Mistral, Qwen2, Phi-3 <-> llama_decoder_only ------------------------------------------------


def llama_like_from_hf(model) -> tuple[dict, dict]:
    """A MistralForCausalLM, Qwen2ForCausalLM or Phi3ForCausalLM -> (attributes, params) of
    llama_decoder_only; ``pad_id`` is config.pad_token_id when set."""
    who = type(model).__name__
    layers = list(model.model.layers)
    convert = hf_zoo.FROM[type(layers[0])]
    attributes, params = None, {"embed.table": hf._t(model.model.embed_tokens.weight)}
    for i, layer in enumerate(layers):
        a, p = convert(layer)
        if attributes is None:
            attributes = a
        for field in sorted(set(a) | set(attributes)):
            _same(who, i, field, a.get(field), attributes.get(field))
        params.update({f"layers.{i}.{k}": v for k, v in p.items()})
    attributes = {**attributes, "num_layers": len(layers)}
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


# -- Gemma 2 / Gemma 3 <-> gemma_decoder_only ----------------------------------------------------


def gemma_from_hf(model) -> tuple[dict, dict]:
    """A Gemma2ForCausalLM or Gemma3ForCausalLM -> (attributes, params) of gemma_decoder_only.
    The even layers must be the window layers (all, or none where the model has no window) and
    the odd ones full attention; the even layers' RoPE base is ``rope_local_base``, the odd
    ones' ``rope_base`` (with one layer: the config's full-attention rope_theta)."""
    who = type(model).__name__
    c = model.config
    if not c.tie_word_embeddings:
        hf._unsupported(who, "tie_word_embeddings", False, "gemma_decoder_only's head is tied")
    layers = list(model.model.layers)
    params = {"embed.table": hf._t(model.model.embed_tokens.weight)}
    first, _ = hf_gemma.gemma_layer_from_hf(layers[0])
    window = first.get("window")
    local = first.get("rope_base")
    odd = None
    for i, layer in enumerate(layers):
        a, p = hf_gemma.gemma_layer_from_hf(layer)
        want_window = window if i % 2 == 0 else None
        if a.get("window") != want_window:
            hf._unsupported(who, "layer_types", list(getattr(c, "layer_types", None) or []),
                            "gemma_decoder_only alternates window layers (even i) with full "
                            "attention (odd i)")
        if i % 2:
            odd = a.get("rope_base") if odd is None else odd
            _same(who, i, "rope_base", a.get("rope_base"), odd)
        else:
            _same(who, i, "rope_base", a.get("rope_base"), local)
        rest = {k: v for k, v in a.items() if k not in ("window", "rope_base")}
        for field in sorted(set(rest) | set(first)):
            if field not in ("window", "rope_base"):
                _same(who, i, field, rest.get(field), first.get(field))
        params.update({f"layers.{i}.{k}": v for k, v in p.items()})
    if odd is None:  # one layer: the global base is the config's full-attention theta
        rope = dict(c.rope_parameters or {})
        odd = float(dict(rope.get("full_attention", rope)).get("rope_theta", local))
    attributes = {k: v for k, v in first.items() if k not in ("rope_base", "window")}
    attributes.update(num_layers=len(layers), rope_base=odd, window=window)
    if local != odd:
        attributes["rope_local_base"] = local
    if c.pad_token_id is not None:
        attributes["pad_id"] = int(c.pad_token_id)
    cap = c.final_logit_softcapping
    attributes["final_softcap"] = None if cap is None else float(cap)
    params["norm.gamma"] = hf._t(model.model.norm.weight)
    return attributes, params


def gemma_to_hf(params, attributes: dict):
    """Spec gemma_decoder_only -> Gemma3ForCausalLM (qk_norm) or Gemma2ForCausalLM, eager
    attention, ``layer_types`` alternating sliding (even i, where a window is given) and full,
    the head tied; Gemma 2 has one RoPE base, so ``rope_local_base`` other than ``rope_base``
    needs Gemma 3."""
    qk_norm = _checks.flag("qk_norm", attributes.get("qk_norm", False))
    who = "Gemma3ForCausalLM" if qk_norm else "Gemma2ForCausalLM"
    n = _num_layers(attributes, who)
    layer_attrs = {k: v for k, v in attributes.items() if k not in _GEMMA_MODEL_ATTRS}
    base = layer_attrs.get("rope_base", 10000.0)
    local = attributes.get("rope_local_base")
    local = base if local is None else local
    window = layer_attrs.pop("window", None)
    if not qk_norm and local != base:
        raise ConfigError(f"{who}: rope_local_base={local!r} differs from rope_base={base!r}; "
                          f"Gemma 2 has one rope_theta (Gemma 3, qk_norm=True, has two)")
    if qk_norm and window is None and local != base:
        # transformers ties the local base to the sliding layers: a window that never binds
        window = UNBOUNDED
    table = {s for _, s, _ in hf_gemma.GEMMA + (hf_gemma.QK_NORM if qk_norm else [])}
    p = hf._spec_params(params, _layer_paths(n, table, {"embed.table", "norm.gamma"}), who)
    emb = p.require("embed.table", (None, None))
    vocab, d = emb.shape
    built = []
    for i in range(n):
        a = {**layer_attrs, "rope_base": base if i % 2 else local,
             "window": window if i % 2 == 0 else None}
        built.append(hf_gemma.gemma_layer_to_hf(p.scope(f"layers.{i}"), a))
    config = built[0].self_attn.config
    kinds = [type(m.self_attn.config) for m in built]
    assert len(set(kinds)) == 1, kinds
    config.vocab_size, config.num_hidden_layers = vocab, n
    config.layer_types = [m.self_attn.layer_type or "full_attention" for m in built]
    if window is not None:
        config.sliding_window = window
    config.tie_word_embeddings, config.pad_token_id = True, None
    config.final_logit_softcapping = _checks.softcap(attributes.get("final_softcap"),
                                                     f"{who}: final_softcap")
    if qk_norm:  # each layer type's rope_parameters from a layer of that type
        rope = dict(config.rope_parameters)
        for m in built:
            kind = m.self_attn.layer_type or "full_attention"
            rope[kind] = m.self_attn.config.rope_parameters[kind]
        if window is None:
            rope["sliding_attention"] = rope["full_attention"]
        config.rope_parameters = rope
    out = CLASSES[who](config)
    state = {"model.embed_tokens.weight": emb, "lm_head.weight": emb,
             "model.norm.weight": p.require("norm.gamma", (d,))}
    for i, module in enumerate(built):
        state.update({f"model.layers.{i}.{k}": v for k, v in module.state_dict().items()})
    out = hf._load(out, state, emb.dtype, emb.device)
    if out.lm_head.weight.data_ptr() != out.model.embed_tokens.weight.data_ptr():
        raise ConfigError(f"{who}: transformers did not tie lm_head to embed_tokens")  # pragma: no cover
    return out


# -- GPT-NeoX / Falcon <-> parallel_decoder_only --------------------------------------------------

# model -> (layer converter's name, the base model's attribute, its embedding, its layers, its
# final LayerNorm)
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
    layers = list(getattr(body, stack))
    convert = hf_zoo.FROM[type(layers[0])]
    attributes, params = None, {"embed.table": hf._t(getattr(body, embed).weight)}
    for i, layer in enumerate(layers):
        a, p = convert(layer)
        if attributes is None:
            attributes = a
        for field in sorted(set(a) | set(attributes)):
            _same(who, i, field, a.get(field), attributes.get(field))
        params.update({f"layers.{i}.{k}": v for k, v in p.items()})
    attributes = {**attributes, "num_layers": len(layers)}
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
    if isinstance(model, (Gemma2ForCausalLM, Gemma3ForCausalLM)):
        return gemma_from_hf(model)
    if isinstance(model, (GPTNeoXForCausalLM, FalconForCausalLM)):
        return parallel_from_hf(model)
    return llama_like_from_hf(model)


def to_hf(params, attributes: dict, model: str):
    """Spec parameters and attributes -> the transformers model ``model`` (a key of
    :data:`SPEC_FUNCTION`)."""
    if model in LAYER:
        return llama_like_to_hf(params, attributes, model)
    if model in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        qk = bool(attributes.get("qk_norm", False))
        if qk != (model == "Gemma3ForCausalLM"):
            raise ConfigError(f"{model} needs qk_norm={model == 'Gemma3ForCausalLM'}, got "
                              f"{attributes.get('qk_norm')!r}")
        return gemma_to_hf(params, attributes)
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
    """The attributes of vector ``v`` (a llama_decoder_only or gemma_decoder_only value
    vector) for ``to_hf(..., model=model)``, or None where the model cannot express it: Qwen2
    without attention_bias or the others with it, a rotary_dim below K but for Phi-3, a
    rope_scaling rule Phi-3 refuses, a head width other than D / H (only Mistral and Gemma
    have head_dim), Gemma 2 with qk_norm or a local base, Gemma 3 without qk_norm; a row
    where a query sees no key (causal, not pad_id, within the window): transformers gives it
    uniform weights (NaN under Gemma 2's soft-capping), the spec zeros."""
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
    if model in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        if bool(a.get("qk_norm", False)) != (model == "Gemma3ForCausalLM"):
            return None
        local = a.get("rope_local_base")
        if model == "Gemma2ForCausalLM" and local not in (None, a.get("rope_base", 10000.0)):
            return None
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

