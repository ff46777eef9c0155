"""Converters between the spec's ``gemma_layer`` and transformers' ``Gemma2DecoderLayer`` and
``Gemma3DecoderLayer`` (text), registered in :mod:`.hf` (``from_hf``, ``to_hf``, ``forward``).

- Every ``nn.Linear`` weight is transposed (HF stores (out, in)); the four sandwich norms and
  Gemma 3's ``q_norm``/``k_norm`` keep HF's stored ``w`` (the layer multiplies by ``1 + w``).
- ``query_pre_attn_scalar``, ``attn_logit_softcapping`` and, on a layer whose ``layer_types``
  entry is ``"sliding_attention"``, ``sliding_window`` become the spec's
  ``query_pre_attn_scalar``, ``softcap`` and ``window``; Gemma 3 sets ``qk_norm=True`` and
  takes its layer type's ``rope_parameters`` (``rope_theta``: 10000 local, 1e6 global by
  default; a ``rope_type`` other than default, e.g. the linear factor 8 of Gemma 3
  4B/12B/27B's ``full_attention`` layers, becomes ``rope_scaling`` through :mod:`.hf_rope`).
  ``to_hf`` puts ``rope_scaling`` on the layer's own type (``sliding_attention`` with a
  window, else ``full_attention``); the other type stays unscaled.
- ``forward`` builds HF's additive mask from the causal (or window) mask ANDed with the spec's
  boolean mask, and the RoPE cos/sin of positions ``offset..offset+T-1`` from the model's
  rotary module for that layer type.

What the spec cannot express (biases, another activation, a partial rotary, a rope_type the
spec does not state) raises ConfigError naming the config field. See
spec/components/huggingface.md (Gemma 2 and 3).
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError
from transformers import Gemma2Config, Gemma3TextConfig
from transformers.models.gemma2.modeling_gemma2 import (
    Gemma2DecoderLayer,
    Gemma2ForCausalLM,
    Gemma2RotaryEmbedding,
)
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3RotaryEmbedding,
)

from .. import _checks
from . import hf_base as hf
from . import hf_rope

SPEC_FUNCTION = {"Gemma2DecoderLayer": "gemma_layer", "Gemma3DecoderLayer": "gemma_layer"}
LAYERS = (Gemma2DecoderLayer, Gemma3DecoderLayer)
GAIN = {Gemma2DecoderLayer: "input_layernorm.weight", Gemma3DecoderLayer: "input_layernorm.weight"}

# (HF state_dict name, spec path, transposed)
GEMMA = [
    ("input_layernorm.weight", "input_norm.gamma", False),
    ("self_attn.q_proj.weight", "attn.w_q", True),
    ("self_attn.k_proj.weight", "attn.w_k", True),
    ("self_attn.v_proj.weight", "attn.w_v", True),
    ("self_attn.o_proj.weight", "attn.w_o", True),
    ("post_attention_layernorm.weight", "post_attn_norm.gamma", False),
    ("pre_feedforward_layernorm.weight", "pre_ffn_norm.gamma", False),
    ("mlp.gate_proj.weight", "ffn.w_gate", True),
    ("mlp.up_proj.weight", "ffn.w_up", True),
    ("mlp.down_proj.weight", "ffn.w_down", True),
    ("post_feedforward_layernorm.weight", "post_ffn_norm.gamma", False),
]
QK_NORM = [("self_attn.q_norm.weight", "attn.q_norm.gamma", False),
           ("self_attn.k_norm.weight", "attn.k_norm.gamma", False)]
ATTRIBUTES = {"num_heads", "num_kv_heads", "eps", "rope_base", "window", "offset",
              "query_pre_attn_scalar", "softcap", "qk_norm", "rope_scaling"}


def _table(qk_norm: bool) -> list:
    return GEMMA + QK_NORM if qk_norm else GEMMA


def _layer_type(layer) -> str:
    return layer.self_attn.layer_type or "full_attention"


def _rope(layer, c, layer_type: str) -> dict:
    """rope_base and, for a rope_type other than default, rope_scaling of the layer's
    rope_parameters: Gemma 2 has one dict, Gemma 3 one per layer type."""
    rope = dict(c.rope_parameters or {})
    rope = dict(rope.get(layer_type, rope))
    return hf_rope.from_hf(type(layer).__name__, c, rope, layer.self_attn.head_dim, partial=False)


def _config(layer):
    who = type(layer).__name__
    c = layer.self_attn.config
    if bool(c.attention_bias):
        hf._unsupported(who, "attention_bias", c.attention_bias, "gemma_layer has no biases")
    if c.hidden_activation != "gelu_pytorch_tanh":
        hf._unsupported(who, "hidden_activation", c.hidden_activation,
                        "gemma_layer's feed-forward is GeGLU with the tanh GELU")
    return c


def gemma_layer_from_hf(layer) -> tuple[dict, dict]:
    """A Gemma2DecoderLayer or Gemma3DecoderLayer -> (attributes, params) of gemma_layer."""
    c = _config(layer)
    qk_norm = isinstance(layer, Gemma3DecoderLayer)
    kind = _layer_type(layer)
    softcap = c.attn_logit_softcapping
    rope = _rope(layer, c, kind)
    attributes = {"num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
                  "eps": float(c.rms_norm_eps), "rope_base": rope["rope_base"],
                  "window": layer.self_attn.sliding_window,
                  "query_pre_attn_scalar": float(c.query_pre_attn_scalar),
                  "softcap": None if softcap is None else float(softcap), "qk_norm": qk_norm}
    if "rope_scaling" in rope:
        attributes["rope_scaling"] = rope["rope_scaling"]
    return attributes, hf._from_state(layer, _table(qk_norm))


def _kv_heads(attributes: dict, h: int, who: str) -> int:
    h_kv = attributes.get("num_kv_heads") or h
    if isinstance(h_kv, bool) or not isinstance(h_kv, int) or h_kv < 1 or h % h_kv:
        raise ConfigError(f"{who}: num_kv_heads={h_kv!r} must divide num_heads={h}")
    return h_kv


def _scalar(value, width: int, who: str) -> int:
    """The config's query_pre_attn_scalar, an int in transformers (None: the head width)."""
    if value is None:
        return width
    s = _checks.eps(value, f"{who}: query_pre_attn_scalar")
    if s != int(s):
        raise ConfigError(f"{who}: query_pre_attn_scalar={value!r} is not an integer "
                          f"(Gemma's configs hold an int)")
    return int(s)


def gemma_layer_to_hf(params, attributes: dict):
    """Spec gemma_layer -> Gemma3DecoderLayer (qk_norm) or Gemma2DecoderLayer, one layer of
    type "sliding_attention" (window given) or "full_attention", eager attention; its
    rope_base and rope_scaling in that type's rope_parameters. ``offset`` is a call-time
    argument of :func:`forward`."""
    qk_norm = _checks.flag("qk_norm", attributes.get("qk_norm", False))
    who = "Gemma3DecoderLayer" if qk_norm else "Gemma2DecoderLayer"
    hf._check_attributes(attributes, {}, ATTRIBUTES, who)
    p = hf._spec_params(params, {s for _, s, _ in _table(qk_norm)}, who)
    w_q, w_up = p.require("attn.w_q", (None, None)), p.require("ffn.w_up", (None, None))
    d, f = w_up.shape
    h = attributes.get("num_heads")
    if isinstance(h, bool) or not isinstance(h, int) or h < 1 or w_q.shape[1] % h:
        raise ConfigError(f"{who}: num_heads={h!r} must divide attn.w_q's width {w_q.shape[1]}")
    h_kv = _kv_heads(attributes, h, who)
    window = attributes.get("window")
    kind = "full_attention" if window is None else "sliding_attention"
    head_dim = w_q.shape[1] // h
    rope, extra = hf_rope.to_hf(who, attributes, head_dim, partial=False)
    scalar = attributes.get("query_pre_attn_scalar")
    softcap = _checks.softcap(attributes.get("softcap"), f"{who}: softcap")
    common = dict(hidden_size=d, intermediate_size=f, num_attention_heads=h,
                  num_key_value_heads=h_kv, head_dim=w_q.shape[1] // h, num_hidden_layers=1,
                  rms_norm_eps=hf._eps(attributes, 1e-6, who),
                  hidden_activation="gelu_pytorch_tanh", layer_types=[kind],
                  sliding_window=window if window is not None else 4096,
                  query_pre_attn_scalar=_scalar(scalar, w_q.shape[1] // h, who),
                  attn_logit_softcapping=softcap, attention_bias=False, attention_dropout=0.0,
                  attn_implementation="eager", **extra)
    if qk_norm:
        plain = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
        per_type = {k: dict(rope) if k == kind else dict(plain)
                    for k in ("full_attention", "sliding_attention")}
        layer = Gemma3DecoderLayer(Gemma3TextConfig(**common, rope_parameters=per_type),
                                   layer_idx=0)
    else:
        layer = Gemma2DecoderLayer(Gemma2Config(**common, rope_parameters=rope), layer_idx=0)
    return hf._load(layer, hf._to_state(p, _table(qk_norm), layer.state_dict()), w_up.dtype,
                    w_up.device)


def forward(module, x, mask=None, *, offset: int = 0) -> torch.Tensor:
    """``y`` of gemma_layer for a Gemma 2/3 decoder layer: causal (within its sliding window
    on a "sliding_attention" layer) ANDed with ``mask``, RoPE at offset..offset+T-1."""
    t = x.shape[1]
    i = torch.arange(t, device=x.device)
    keep = i[None, :] <= i[:, None]  # (T, T)
    window = module.self_attn.sliding_window
    if window is not None:
        keep = keep & (i[:, None] - i[None, :] < window)
    mask = keep if mask is None else torch.as_tensor(mask, device=x.device) & keep
    positions = torch.arange(offset, offset + t, device=x.device)[None]
    config = module.self_attn.config
    if isinstance(module, Gemma3DecoderLayer):
        rotary = Gemma3RotaryEmbedding(config).to(x.device)
        cos_sin = rotary(x, positions, _layer_type(module))
    else:
        cos_sin = Gemma2RotaryEmbedding(config).to(x.device)(x, positions)
    attention_mask = hf.additive_mask(hf._mask(mask, x, type(module).__name__), x.dtype)
    with torch.no_grad():
        out = module(x, attention_mask=attention_mask.to(x.device), position_embeddings=cos_sin,
                     position_ids=positions)
    return out[0] if isinstance(out, tuple) else out


# -- Gemma2ForCausalLM / Gemma3ForCausalLM <-> gemma_decoder_only -------------------------------
#
# gemma_decoder_only's layer i is global ("full_attention": rope_base and rope_scaling) where
# (i + 1) % sliding_window_pattern == 0, local ("sliding_attention": the window,
# rope_local_base, unscaled) otherwise: Gemma 2's alternation (2) and Gemma 3's 5:1 (6). A
# config whose layer_types follow no such pattern is refused.

MODELS = (Gemma2ForCausalLM, Gemma3ForCausalLM)
MODEL_FUNCTION = {"Gemma2ForCausalLM": "gemma_decoder_only",
                  "Gemma3ForCausalLM": "gemma_decoder_only"}
MODEL_ATTRIBUTES = (ATTRIBUTES - {"offset"}) | {"num_layers", "pad_id", "final_softcap",
                                                 "rope_local_base", "sliding_window_pattern"}
NO_WINDOW = 4096  # a local layer's sliding_window where the spec has none (T below it: none)


def _kind(i: int, pattern: int) -> str:
    return "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"


def _pattern(c, who: str) -> int:
    """The sliding_window_pattern whose layer types are the config's (its own
    ``_sliding_window_pattern`` first, else the smallest)."""
    n, types = c.num_hidden_layers, list(c.layer_types)
    own = getattr(c, "_sliding_window_pattern", None)
    for p in ([own] if isinstance(own, int) and own >= 1 else []) + list(range(1, n + 2)):
        if types == [_kind(i, p) for i in range(n)]:
            return p
    hf._unsupported(who, "layer_types", types, "gemma_decoder_only's layer i is global where "
                    "(i + 1) % sliding_window_pattern == 0, local otherwise")


def gemma_for_causal_lm_from_hf(model) -> tuple[dict, dict]:
    """A Gemma2ForCausalLM or Gemma3ForCausalLM -> (attributes, params) of gemma_decoder_only:
    ``sliding_window_pattern`` from layer_types, the first local layer's window and base
    (rope_local_base), the first global layer's base and rope_scaling (rope_base), the tied
    head, final_logit_softcapping; ``pad_id`` from config.pad_token_id."""
    who = type(model).__name__
    c = model.config
    n = c.num_hidden_layers
    pattern = _pattern(c, who)
    if not c.tie_word_embeddings:
        hf._unsupported(who, "tie_word_embeddings", False, "gemma_decoder_only's head is tied")
    layers = [gemma_layer_from_hf(layer) for layer in model.model.layers[:n]]
    kinds = [_kind(i, pattern) for i in range(n)]
    local = next((a for (a, _), k in zip(layers, kinds) if k == "sliding_attention"), None)
    glob = next((a for (a, _), k in zip(layers, kinds) if k == "full_attention"), None)
    if local is not None and "rope_scaling" in local:
        hf._unsupported(who, "rope_parameters.sliding_attention.rope_type",
                        local["rope_scaling"]["rope_type"],
                        "gemma_decoder_only scales its global layers only")
    attributes = {k: v for k, v in (local or glob).items() if k != "rope_scaling"}
    attributes["sliding_window_pattern"] = pattern
    if glob is not None:
        attributes["rope_base"] = glob["rope_base"]
        if local is not None:
            attributes["rope_local_base"] = local["rope_base"]
        else:
            attributes["window"] = None  # no local layer: no window
        if "rope_scaling" in glob:
            attributes["rope_scaling"] = glob["rope_scaling"]
    softcap = c.final_logit_softcapping
    attributes.update({"num_layers": n, "final_softcap": None if softcap is None else float(softcap)})
    if c.pad_token_id is not None:
        attributes["pad_id"] = int(c.pad_token_id)
    params = {"embed.table": hf._t(model.model.embed_tokens.weight),
              "norm.gamma": hf._t(model.model.norm.weight)}
    for i, (_, p) in enumerate(layers):
        params.update({f"layers.{i}.{k}": v for k, v in p.items()})
    return attributes, params


def gemma_for_causal_lm_to_hf(params, attributes: dict):
    """Spec gemma_decoder_only -> Gemma3ForCausalLM (qk_norm: a rope_parameters dict per layer
    type, so rope_local_base and the global layers' rope_scaling) or Gemma2ForCausalLM (one
    rope_parameters for every layer: refused with rope_scaling or a rope_local_base of its
    own when it has both layer types), layer_types from sliding_window_pattern, the head
    tied, eager attention. A spec window of None is sliding_window 4096 (no effect below 4096 tokens).
    ``pad_id`` is a call-time argument of :func:`model_forward`."""
    qk_norm = _checks.flag("qk_norm", attributes.get("qk_norm", False))
    who = "Gemma3ForCausalLM" if qk_norm else "Gemma2ForCausalLM"
    hf._check_attributes(attributes, {}, MODEL_ATTRIBUTES, who)
    n = _checks.integer(f"{who}: num_layers", attributes.get("num_layers"), lo=1)
    pattern = _checks.integer(f"{who}: sliding_window_pattern",
                              attributes.get("sliding_window_pattern", 2), lo=1)
    kinds = [_kind(i, pattern) for i in range(n)]
    paths = {s for _, s, _ in _table(qk_norm)}
    p = hf._spec_params(params, lambda path: path in ("embed.table", "norm.gamma") or (
        path.startswith("layers.") and path.split(".", 2)[1] in {str(i) for i in range(n)}
        and path.split(".", 2)[2:] and path.split(".", 2)[2] in paths), who)
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    base = _checks.eps(attributes.get("rope_base", 10000.0), f"{who}: rope_base")
    local = attributes.get("rope_local_base")
    local = base if local is None else _checks.eps(local, f"{who}: rope_local_base")
    scaling = attributes.get("rope_scaling")
    both = len(set(kinds)) == 2
    if not qk_norm and both and (scaling is not None or local != base):
        raise ConfigError(f"{who}: rope_scaling={scaling!r} / rope_local_base={local!r} differ "
                          f"between the local and the global layers, and Gemma2Config has one "
                          f"rope_parameters for every layer (Gemma3ForCausalLM, qk_norm=True, "
                          f"has one per layer type)")
    window = attributes.get("window")
    layer_attrs = {k: v for k, v in attributes.items()
                   if k in ATTRIBUTES and k not in ("rope_scaling", "window", "rope_base")}
    if "sliding_attention" not in kinds:  # every layer global: Gemma 2's one base is rope_base
        local = base
    first = gemma_layer_to_hf(p.scope("layers.0"),
                              {**layer_attrs, "rope_base": local,
                               "window": NO_WINDOW if window is None else window})
    c = first.self_attn.config
    w_q = p.require("layers.0.attn.w_q", (d, None))
    rope, extra = hf_rope.to_hf(who, {"rope_base": base, "rope_scaling": scaling},
                                w_q.shape[1] // c.num_attention_heads, partial=False)
    final = _checks.softcap(attributes.get("final_softcap"), f"{who}: final_softcap")
    common = dict(hidden_size=d, intermediate_size=c.intermediate_size,
                  num_attention_heads=c.num_attention_heads,
                  num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
                  num_hidden_layers=n, vocab_size=vocab, rms_norm_eps=c.rms_norm_eps,
                  hidden_activation="gelu_pytorch_tanh",
                  layer_types=kinds, sliding_window=c.sliding_window,
                  query_pre_attn_scalar=c.query_pre_attn_scalar,
                  attn_logit_softcapping=c.attn_logit_softcapping,
                  final_logit_softcapping=final, attention_bias=False, attention_dropout=0.0,
                  tie_word_embeddings=True, attn_implementation="eager",
                  pad_token_id=attributes.get("pad_id", 0), **extra)
    if qk_norm:
        per_type = {"sliding_attention": {"rope_type": "default", "rope_theta": float(local)},
                    "full_attention": rope}
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, rope_parameters=per_type))
    else:
        model = Gemma2ForCausalLM(Gemma2Config(**common, rope_parameters={
            "rope_type": "default", "rope_theta": float(local)}))
    state = {"model.embed_tokens.weight": table,
             "model.norm.weight": p.require("norm.gamma", (d,)), "lm_head.weight": table}
    like = first.state_dict()
    for i in range(n):
        layer = hf._to_state(p.scope(f"layers.{i}"), _table(qk_norm), like)
        state.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    return hf._load(model, state, table.dtype, table.device)


def model_forward(model, ids, mask=None, *, offset: int = 0, pad_id: int | None = None):
    """The logits of gemma_decoder_only: ``attention_mask = ids != pad_id`` (transformers adds
    the causal and sliding-window masks itself)."""
    who = type(model).__name__
    if mask is not None or offset:
        raise ConfigError(f"{who}: pass pad_id, not mask or offset")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise ConfigError(f"{who}: ids must be an integer tensor of shape (B, T)")
    if model.config.sliding_window == NO_WINDOW and ids.shape[1] > NO_WINDOW:
        raise ConfigError(f"{who}: T = {ids.shape[1]} > {NO_WINDOW}, the sliding_window that "
                          f"stands for the spec's window None")
    keep = torch.ones_like(ids) if pad_id is None else (ids != pad_id).long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=keep, use_cache=False).logits


# -- which vectors transformers can hold (the suite's extras, backends/torch/extras.py) ----------

def _empty_row(keep) -> bool:
    """Whether a query row of the boolean keep mask (..., T, S) has no key: transformers gives
    it uniform weights or NaN where the spec gives zeros."""
    import numpy as np

    return bool((~np.asarray(keep).any(axis=-1)).any())


def expressible(v):
    """(class name, attributes) for a gemma_layer or gemma_decoder_only vector ``v`` through
    ``hf.to_hf``, or None where transformers cannot hold it: a query row with no key, or a
    model without qk_norm whose local and global layers rotate differently (Gemma2Config has
    one rope_parameters for every layer)."""
    import numpy as np

    a = dict(v.attributes)
    if v.function == "gemma_layer":
        t = v.inputs["x"].shape[1]
        i, j = np.arange(t)[:, None], np.arange(t)[None, :]
        keep = (j <= i) & ((i - j < a["window"]) if a.get("window") is not None else True)
        if "mask" in v.inputs:
            keep = keep & np.asarray(v.inputs["mask"])
        if _empty_row(keep):
            return None
        return ("Gemma3DecoderLayer" if a.get("qk_norm") else "Gemma2DecoderLayer"), a
    if v.function != "gemma_decoder_only":
        return None
    ids = np.asarray(v.inputs["ids"])
    t = ids.shape[1]
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    keys = (ids != a["pad_id"])[:, None, :]  # (B, 1, T)
    window = a.get("window")
    local = (j <= i) & ((i - j < window) if window is not None else True)
    if _empty_row(keys & local) or _empty_row(keys & (j <= i)):
        return None
    base = a.get("rope_base", 10000.0)
    differ = a.get("rope_scaling") is not None or a.get("rope_local_base", base) not in (None, base)
    pattern = a.get("sliding_window_pattern", 2)
    both = len({_kind(i, pattern) for i in range(a["num_layers"])}) == 2
    if not a.get("qk_norm") and both and differ:
        return None
    return ("Gemma3ForCausalLM" if a.get("qk_norm") else "Gemma2ForCausalLM"), a
