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
spec does not state) raises ConfigError naming the config field. See spec/components/huggingface.md (Gemma 2 and 3).
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError
from transformers import Gemma2Config, Gemma3TextConfig
from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer, Gemma2RotaryEmbedding
from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer, Gemma3RotaryEmbedding

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
