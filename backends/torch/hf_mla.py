"""transformers' ``DeepseekV3Attention`` (multi-head latent attention) to and from the spec's
``mla`` parameters (spec/components/mla.md), and calling it as ``mla`` is called.

- every ``nn.Linear`` stores W as (out, in): each weight is transposed; no bias
  (``attention_bias=True`` is refused);
- ``rope_interleave`` True (DeepSeek-V3's default) is ``rope_convention="interleaved"``,
  False is ``"half"``; ``rope_parameters["rope_theta"]`` is ``rope_base``;
- ``rope_parameters`` other than ``"default"`` (DeepSeek-V2/V3's real configs: YaRN, factor
  40, mscale = mscale_all_dim) is mla's ``rope_scaling`` (:mod:`.hf_rope`'s mapping, the
  rotary width ``qk_rope_head_dim`` as DeepseekV3Config's ``head_dim``): rope's frequencies
  and attention factor on cos/sin, and ``yarn_apply_mscale``'s m^2 on the softmax scale,
  which mla derives from rope_scaling itself. ``yarn_factor``/``mscale_all_dim`` without
  rope_scaling (the mscale without the frequencies) have no DeepseekV3Config: refused;
- ``q_a_layernorm`` / ``kv_a_layernorm`` are built with DeepseekV3RMSNorm's default eps
  (1e-6), read from the module, not the config's ``rms_norm_eps``.
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

from .._checks import integer, params_of
from . import hf_rope

# (HF state_dict name, spec path); every one a transposed nn.Linear weight but the gains
Q_DIRECT = [("q_proj.weight", "w_q")]
Q_LATENT = [("q_a_proj.weight", "w_q_a"), ("q_a_layernorm.weight", "q_norm.gamma"),
            ("q_b_proj.weight", "w_q_b")]
KV = [("kv_a_proj_with_mqa.weight", "w_kv_a"), ("kv_a_layernorm.weight", "kv_norm.gamma"),
      ("kv_b_proj.weight", "w_kv_b"), ("o_proj.weight", "w_o")]
ATTRIBUTES = {"num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "eps",
              "rope_base", "rope_convention", "yarn_factor", "mscale_all_dim", "offset",
              "rope_scaling"}


def _table(q_lora_rank):
    return (Q_DIRECT if q_lora_rank is None else Q_LATENT) + KV


def _transposed(name: str) -> bool:
    return "layernorm" not in name


def _config_checks(c, who: str = "DeepseekV3Attention") -> None:
    if c.attention_bias:
        raise ConfigError(f"{who}: attention_bias=True: mla has no biases")
    if c.num_key_value_heads != c.num_attention_heads:
        raise ConfigError(f"{who}: num_key_value_heads={c.num_key_value_heads} != "
                          f"num_attention_heads={c.num_attention_heads}: the module repeats "
                          f"its already per-head keys (mla has one latent for all heads)")


def rope_from_hf(who: str, c) -> dict:
    """{"rope_base": ..., ["rope_scaling": {...}]} of a DeepSeek config's rope_parameters."""
    return hf_rope.from_hf(who, c, c.rope_parameters, c.qk_rope_head_dim, partial=False)


def rope_to_hf(who: str, attributes: dict, dr: int) -> tuple[dict, dict]:
    """(rope_parameters, other config fields) for mla's rope_base and rope_scaling; the
    mscale without rope_scaling is refused (transformers reads it from rope_parameters)."""
    if attributes.get("yarn_factor", 1.0) > 1 and attributes.get("mscale_all_dim", 0.0):
        raise ConfigError(f"{who}: yarn_factor/mscale_all_dim without rope_scaling: transformers "
                          f"reads the mscale from rope_parameters, with YaRN's frequencies; give "
                          f"rope_scaling (rope_type yarn, factor, mscale_all_dim) instead")
    return hf_rope.to_hf(who, {k: attributes[k] for k in ("rope_base", "rope_scaling")
                               if attributes.get(k) is not None}, dr, partial=False)


def mla_from_hf(attn: DeepseekV3Attention) -> tuple[dict, dict]:
    """(attributes, params) of ``mla`` for a DeepseekV3Attention (or DeepseekV2Attention,
    whose attribute names are the same)."""
    c = attn.config
    who = type(attn).__name__
    _config_checks(c, who)
    norm = attn.kv_a_layernorm
    attributes = {"num_heads": c.num_attention_heads, "qk_nope_head_dim": c.qk_nope_head_dim,
                  "qk_rope_head_dim": c.qk_rope_head_dim, "v_head_dim": c.v_head_dim,
                  "eps": float(norm.variance_epsilon), **rope_from_hf(who, c),
                  "rope_convention": "interleaved" if getattr(c, "rope_interleave", True)
                  else "half"}
    state = attn.state_dict()
    params = {spec: (state[hf].T if _transposed(hf) else state[hf]).detach().clone()
              for hf, spec in _table(c.q_lora_rank)}
    return attributes, params


def mla_to_hf(params, attributes: dict) -> DeepseekV3Attention:
    """A DeepseekV3Attention (eager attention) holding ``params``, in their dtype/device."""
    unknown = sorted(set(attributes) - ATTRIBUTES)
    if unknown:
        raise ConfigError(f"DeepseekV3Attention: attributes {unknown} are not mla's")
    if attributes.get("offset", 0):
        raise ConfigError("DeepseekV3Attention: offset is forward()'s, not the module's")
    p = params_of(params)
    h = integer("num_heads", attributes["num_heads"], lo=1)
    r = p.require("kv_norm.gamma", (None,)).shape[0]
    w_kv_a = p.require("w_kv_a", (None, None))
    r_q = p.require("q_norm.gamma", (None,)).shape[0] if "w_q_a" in p else None
    eps = float(attributes.get("eps", 1e-6))
    rope, extra = rope_to_hf("DeepseekV3Attention", attributes, attributes["qk_rope_head_dim"])
    config = DeepseekV3Config(
        hidden_size=w_kv_a.shape[0], num_attention_heads=h, num_key_value_heads=h,
        q_lora_rank=r_q, kv_lora_rank=r, qk_nope_head_dim=attributes["qk_nope_head_dim"],
        qk_rope_head_dim=attributes["qk_rope_head_dim"], v_head_dim=attributes["v_head_dim"],
        rope_interleave=attributes.get("rope_convention", "interleaved") == "interleaved",
        rope_parameters=rope, attention_bias=False, attn_implementation="eager",
        rms_norm_eps=eps, **extra)
    attn = DeepseekV3Attention(config, layer_idx=0).to(dtype=w_kv_a.dtype, device=w_kv_a.device)
    for norm in (attn.q_a_layernorm, attn.kv_a_layernorm):
        if norm is not None:
            norm.variance_epsilon = eps
    like = attn.state_dict()
    state = {}
    for hf, spec in _table(r_q):
        want = like[hf].T.shape if _transposed(hf) else like[hf].shape
        w = p.require(spec, tuple(want))
        state[hf] = w.T if _transposed(hf) else w
    attn.load_state_dict(state)
    return attn.eval()


def forward(attn: DeepseekV3Attention, x, mask=None, *, offset: int = 0) -> torch.Tensor:
    """``y`` of ``mla`` through the module: causal ANDed with the spec's boolean ``mask``
    (as HF's additive mask), RoPE cos/sin for positions offset..offset+T-1."""
    integer("offset", offset, lo=0)
    t = x.shape[1]
    keep = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    keep = keep if mask is None else torch.as_tensor(mask, device=x.device) & keep
    positions = torch.arange(offset, offset + t, device=x.device)[None]
    cos_sin = DeepseekV3RotaryEmbedding(attn.config).to(x.device)(x, positions)
    with torch.no_grad():
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        additive = torch.where(keep, zero, torch.finfo(x.dtype).min)  # HF's mask
        additive = additive.reshape((1,) * (4 - additive.dim()) + tuple(additive.shape))
        y, _ = attn(x, position_embeddings=cos_sin, attention_mask=additive)
    return y

