"""Converters between the spec and transformers' DeepSeek-V2 modules
(``models/deepseek_v2``; registered in ``hf.py``'s ``from_hf``/``to_hf(model=)``/``forward``):

- ``DeepseekV2Moe`` <-> ``moe``: ``DeepseekV2TopkRouter`` scores by a softmax (in float32),
  ``topk_method="greedy"`` is ``n_group=1``, ``"group_limited_greedy"`` is ``n_group``,
  ``topk_group`` with ``group_score="max"`` (a group scored by its largest score, then the
  other groups' scores set to 0 before the top-k: the same choice, as softmax scores are
  > 0 and top_k <= topk_group * E/n_group); never renormalised (transformers 5.24's router
  does not read ``norm_topk_prob``, so a config with it True is still ``renormalize=False``);
  times ``routed_scaling_factor``; no correction bias; plus the ungated ``shared_experts``
  (width ``moe_intermediate_size * n_shared_experts``). The experts are stored as
  ``hf_moe.py`` describes (``gate_up_proj`` (E, 2F, D), ``down_proj`` (E, D, F)).
- ``DeepseekV2Attention`` <-> ``mla``: the parameter names of ``DeepseekV3Attention``
  (``hf_mla.py``'s table; ``q_lora_rank=None`` is the plain ``q_proj``, ``w_q``); RoPE by
  ``view_as_complex`` on pairs (2i, 2i+1): ``rope_convention="interleaved"`` only (``"half"``
  is refused); ``rope_parameters`` as ``hf_mla.py`` maps them (YaRN's frequencies, its
  attention factor on the complex ``freqs_cis`` and ``yarn_apply_mscale``'s m^2);
- ``DeepseekV2DecoderLayer`` <-> ``deepseek_layer``: the attention above, the two RMSNorms
  (``rms_norm_eps``; the latent norms keep 1e-6, so the two must agree), then
  ``DeepseekV2MLP`` (``ffn.*``, below ``first_k_dense_replace``) or ``DeepseekV2Moe``
  (``moe.*``).

``forward`` calls a module as its spec function is called (``DeepseekV2RotaryEmbedding``'s
``freqs_cis`` at positions offset..offset+T-1, transformers' additive mask for the causal mask
ANDed with the spec's ``mask``).
"""

from __future__ import annotations

import copy

import torch
from attnspec.spec.errors import ConfigError, ParameterError
from transformers import DeepseekV2Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
    DeepseekV2Attention,
    DeepseekV2DecoderLayer,
    DeepseekV2MLP,
    DeepseekV2Moe,
    DeepseekV2RotaryEmbedding,
)

from .._checks import integer, params_of
from . import hf_base as hf
from . import hf_mla
from .hf_moe import DEEPSEEK_SHARED, _experts, _shapes, _silu, _t

SPEC_FUNCTION = {"DeepseekV2Moe": "moe", "DeepseekV2Attention": "mla",
                 "DeepseekV2DecoderLayer": "deepseek_layer"}
CLASSES = (DeepseekV2Moe, DeepseekV2Attention, DeepseekV2DecoderLayer)
MOE_ATTRS = {"top_k", "scoring", "renormalize", "eps", "n_group", "topk_group",
             "routed_scaling_factor", "group_score"}
NORMS = [("input_layernorm.weight", "attn_norm.gamma", False),
         ("post_attention_layernorm.weight", "ffn_norm.gamma", False)]
DENSE = [("mlp.gate_proj.weight", "ffn.w_gate", True), ("mlp.up_proj.weight", "ffn.w_up", True),
         ("mlp.down_proj.weight", "ffn.w_down", True)]


def _prefixed(prefix: str, d: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in d.items()}


# -- DeepseekV2Moe <-> moe ----------------------------------------------------------------------

def moe_from_hf(block: DeepseekV2Moe) -> tuple[dict, dict]:
    """A DeepseekV2Moe -> (attributes, params) of moe."""
    who = "DeepseekV2Moe"
    _silu(who, block.experts.act_fn)
    _silu(who, block.shared_experts.act_fn)
    g = block.gate
    params = _experts(block)
    params["router.w"] = params["router.w"].to(block.experts.down_proj.dtype)
    state = block.state_dict()
    params.update({spec: _t(state[name].T) for name, spec in DEEPSEEK_SHARED})
    if g.topk_method == "greedy":
        groups = {"n_group": 1, "topk_group": 1}
    elif g.topk_method == "group_limited_greedy":
        groups = {"n_group": int(g.num_group), "topk_group": int(g.topk_group),
                  "group_score": "max"}
    else:
        hf._unsupported(who, "topk_method", g.topk_method,
                        "DeepseekV2TopkRouter computes only 'greedy' and 'group_limited_greedy'")
    return {"top_k": int(g.top_k), "scoring": "softmax", "renormalize": False, **groups,
            "routed_scaling_factor": float(g.routed_scaling_factor)}, params


def _moe_config_checks(attributes: dict, who: str) -> tuple[int, int, int, float]:
    unknown = sorted(set(attributes) - MOE_ATTRS)
    if unknown:
        raise ConfigError(f"{who}: attributes {unknown} are not moe's")
    if attributes.get("scoring", "softmax") != "softmax":
        raise ConfigError(f"{who}: scoring={attributes['scoring']!r}: DeepseekV2TopkRouter "
                          f"scores by a softmax only")
    if attributes.get("renormalize", False):
        raise ConfigError(f"{who}: renormalize=True: DeepseekV2TopkRouter never renormalises "
                          f"(transformers 5.24 does not read norm_topk_prob)")
    n_group = integer("n_group", attributes.get("n_group", 1), lo=1)
    topk_group = integer("topk_group", attributes.get("topk_group", 1), lo=1)
    if n_group > 1 and attributes.get("group_score", "sum_top2") != "max":
        raise ConfigError(f"{who}: n_group={n_group} with group_score="
                          f"{attributes.get('group_score', 'sum_top2')!r}: group_limited_greedy "
                          f"scores a group by its max (group_score='max')")
    return (integer("top_k", attributes["top_k"], lo=1), n_group, topk_group,
            float(attributes.get("routed_scaling_factor", 1.0)))


def moe_to_hf(params, attributes: dict) -> DeepseekV2Moe:
    """moe -> a DeepseekV2Moe (eval mode) in the parameters' dtype and device: softmax, not
    renormalised, no correction bias, group_score 'max' where n_group > 1; a missing shared
    expert is one with zero weights (it adds exactly 0)."""
    who = "DeepseekV2Moe"
    top_k, n_group, topk_group, scale = _moe_config_checks(attributes, who)
    p = params_of(params)
    if "router.correction_bias" in p or "shared_gate.w" in p:
        extra = "router.correction_bias" if "router.correction_bias" in p else "shared_gate.w"
        raise ParameterError(f"{who}: {extra!r} has no equivalent (no selection bias, "
                             f"ungated shared experts)")
    d, e, f = _shapes(p, who)
    w = p.require("router.w")
    fs = p.require("shared.w_gate", (d, None)).shape[1] if "shared.w_gate" in p else f
    if fs % f:
        raise ParameterError(f"{who}: the shared experts' width {fs} (shared.w_gate) must be "
                             f"a multiple n_shared_experts * F of the experts' F = {f}")
    config = DeepseekV2Config(
        hidden_size=d, num_attention_heads=1, num_key_value_heads=1,  # not read by the block
        n_routed_experts=e, num_experts_per_tok=top_k, moe_intermediate_size=f,
        n_shared_experts=fs // f, n_group=n_group, topk_group=topk_group,
        topk_method="group_limited_greedy" if n_group > 1 else "greedy",
        routed_scaling_factor=scale, hidden_act="silu")
    block = DeepseekV2Moe(config)
    state = {"gate.weight": w.T,
             "experts.gate_up_proj": torch.cat([p.require("experts.w_gate"),
                                                p.require("experts.w_up")], dim=2).transpose(1, 2),
             "experts.down_proj": p.require("experts.w_down").transpose(1, 2)}
    if "shared.w_gate" in p:
        shapes = {"shared.w_up": (d, fs), "shared.w_down": (fs, d)}
        state.update({name: p.require(spec, shapes.get(spec)).T for name, spec in DEEPSEEK_SHARED})
    else:
        z = torch.zeros
        state.update({"shared_experts.gate_proj.weight": z(f, d, dtype=w.dtype),
                      "shared_experts.up_proj.weight": z(f, d, dtype=w.dtype),
                      "shared_experts.down_proj.weight": z(d, f, dtype=w.dtype)})
    block = block.to(device=w.device, dtype=w.dtype)
    block.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=True)
    return block.eval()


# -- DeepseekV2Attention <-> mla ------------------------------------------------------------------

def attention_from_hf(attn: DeepseekV2Attention) -> tuple[dict, dict]:
    """A DeepseekV2Attention -> (attributes, params) of mla (always interleaved)."""
    a, params = hf_mla.mla_from_hf(attn)
    a["rope_convention"] = "interleaved"
    return a, params


def attention_to_hf(params, attributes: dict) -> DeepseekV2Attention:
    """mla -> a DeepseekV2Attention (eager attention, eval mode) in the parameters' dtype."""
    who = "DeepseekV2Attention"
    unknown = sorted(set(attributes) - hf_mla.ATTRIBUTES)
    if unknown:
        raise ConfigError(f"{who}: attributes {unknown} are not mla's")
    if attributes.get("offset", 0):
        raise ConfigError(f"{who}: offset is forward()'s, not the module's")
    if attributes.get("rope_convention", "interleaved") != "interleaved":
        raise ConfigError(f"{who}: rope_convention={attributes['rope_convention']!r}: "
                          f"DeepseekV2's RoPE rotates interleaved pairs (view_as_complex) only")
    p = params_of(params)
    h = integer("num_heads", attributes["num_heads"], lo=1)
    r = p.require("kv_norm.gamma", (None,)).shape[0]
    w_kv_a = p.require("w_kv_a", (None, None))
    r_q = p.require("q_norm.gamma", (None,)).shape[0] if "w_q_a" in p else None
    eps = float(attributes.get("eps", 1e-6))
    rope, extra = hf_mla.rope_to_hf(who, attributes, attributes["qk_rope_head_dim"])
    config = DeepseekV2Config(
        hidden_size=w_kv_a.shape[0], num_attention_heads=h, num_key_value_heads=h,
        q_lora_rank=r_q, kv_lora_rank=r, qk_nope_head_dim=attributes["qk_nope_head_dim"],
        qk_rope_head_dim=attributes["qk_rope_head_dim"], v_head_dim=attributes["v_head_dim"],
        rope_parameters=rope, attention_bias=False, attn_implementation="eager",
        rms_norm_eps=eps, **extra)
    attn = DeepseekV2Attention(config, layer_idx=0).to(dtype=w_kv_a.dtype, device=w_kv_a.device)
    for norm in (attn.q_a_layernorm, attn.kv_a_layernorm):
        if norm is not None:
            norm.variance_epsilon = eps
    like = attn.state_dict()
    state = {}
    for name, spec in hf_mla._table(r_q):
        want = like[name].T.shape if hf_mla._transposed(name) else like[name].shape
        w = p.require(spec, tuple(want))
        state[name] = w.T if hf_mla._transposed(name) else w
    attn.load_state_dict(state)
    return attn.eval()


# -- DeepseekV2DecoderLayer <-> deepseek_layer ------------------------------------------------------

def layer_from_hf(layer: DeepseekV2DecoderLayer) -> tuple[dict, dict]:
    """A DeepseekV2DecoderLayer -> (attributes, params) of deepseek_layer."""
    who = "DeepseekV2DecoderLayer"
    c = layer.self_attn.config
    a, attn = attention_from_hf(layer.self_attn)
    if a["eps"] != float(c.rms_norm_eps):
        raise ConfigError(f"{who}: config.rms_norm_eps={c.rms_norm_eps} differs from its "
                          f"attention's latent norms' eps {a['eps']} (transformers builds those "
                          f"with 1e-6): deepseek_layer has one eps")
    params = {**hf._from_state(layer, NORMS), **_prefixed("attn", attn)}
    if isinstance(layer.mlp, DeepseekV2Moe):
        moe_a, moe_p = moe_from_hf(layer.mlp)
        params.update(_prefixed("moe", moe_p))
        a.update(moe_a)
    else:
        _silu(who, layer.mlp.act_fn)
        params.update(hf._from_state(layer, DENSE))
    return a, params


def layer_to_hf(params, attributes: dict) -> DeepseekV2DecoderLayer:
    """deepseek_layer -> a DeepseekV2DecoderLayer (eager attention, eval mode): the attention
    above, then DeepseekV2MLP (ffn.*) or DeepseekV2Moe (moe.*)."""
    who = "DeepseekV2DecoderLayer"
    mla_keys = hf_mla.ATTRIBUTES
    unknown = sorted(set(attributes) - mla_keys - MOE_ATTRS)
    if unknown:
        raise ConfigError(f"{who}: attributes {unknown} are not deepseek_layer's")
    p = params_of(params)
    attn = attention_to_hf({k: p.require(f"attn.{k}") for k in p.scope("attn").keys()},
                           {k: v for k, v in attributes.items() if k in mla_keys})
    like = p.require("attn.w_kv_a")
    d = like.shape[0]
    config = copy.deepcopy(attn.config)
    config.first_k_dense_replace, config.intermediate_size = 1, 1
    layer = DeepseekV2DecoderLayer(config, 0)
    kept = {k: v for k, v in layer.state_dict().items() if k.startswith("mlp.")}
    kept.update(_prefixed("self_attn", attn.state_dict()))
    layer = hf._load(layer, {**hf._to_state(p, NORMS, layer.state_dict()), **kept},
                     like.dtype, like.device)
    if "moe.router.w" in p:
        if attributes.get("top_k") is None:
            raise ConfigError(f"{who}: an MoE layer needs top_k")
        moe = {k: p.require(f"moe.{k}") for k in p.scope("moe").keys()}
        router = {"scoring": "sigmoid", "renormalize": True,  # deepseek_layer's defaults
                  **{k: v for k, v in attributes.items() if k in MOE_ATTRS and k != "eps"}}
        layer.mlp = moe_to_hf(moe, router)
    else:
        f = p.require("ffn.w_gate", (d, None)).shape[1]
        mlp = DeepseekV2MLP(config, intermediate_size=f)
        state = hf._to_state(p, DENSE, _prefixed("mlp", mlp.state_dict()))
        layer.mlp = hf._load(mlp, {k[len("mlp."):]: v for k, v in state.items()},
                             like.dtype, like.device)
    layer.self_attn = attn  # its latent norms' eps set by attention_to_hf
    return layer.eval()


# -- dispatch ---------------------------------------------------------------------------------------

def from_hf(module) -> tuple[dict, dict]:
    if isinstance(module, DeepseekV2Moe):
        return moe_from_hf(module)
    if isinstance(module, DeepseekV2Attention):
        return attention_from_hf(module)
    return layer_from_hf(module)


def to_hf(params, attributes: dict, model: str):
    """``model``: "DeepseekV2Moe", "DeepseekV2Attention" or "DeepseekV2DecoderLayer"."""
    build = {"DeepseekV2Moe": moe_to_hf, "DeepseekV2Attention": attention_to_hf,
             "DeepseekV2DecoderLayer": layer_to_hf}
    if model not in build:
        raise ConfigError(f"model={model!r}: the DeepSeek-V2 modules are {list(build)}")
    return build[model](params, attributes)


def forward(module, x, mask=None, *, offset: int = 0) -> torch.Tensor:
    """y of the spec function for ``module``: moe on tokens x (N, D) (as (1, N, D)); mla and
    deepseek_layer on x (B, T, D), causal ANDed with ``mask``, RoPE at offset..offset+T-1."""
    who = type(module).__name__
    if isinstance(module, DeepseekV2Moe):
        if mask is not None or offset:
            raise ConfigError(f"{who}: moe takes no mask or offset")
        with torch.no_grad():
            return module(x[None])[0]
    keep, positions = hf.causal_layer_inputs(x, mask, offset, None, who)
    attn = module.self_attn if isinstance(module, DeepseekV2DecoderLayer) else module
    freqs = DeepseekV2RotaryEmbedding(attn.config).to(x.device)(x, positions)
    additive = hf.additive_mask(keep, x.dtype).to(x.device)
    with torch.no_grad():
        if isinstance(module, DeepseekV2DecoderLayer):
            out = module(x, position_embeddings=freqs, position_ids=positions,
                         attention_mask=additive)
        else:
            out, _ = module(x, position_embeddings=freqs, attention_mask=additive)
    return out[0] if isinstance(out, tuple) else out


# -- which vectors a module can hold ------------------------------------------------------------

def expressible(v) -> str | None:
    """The DeepSeek-V2 module a moe, mla or deepseek_layer vector ``v`` fits, or None: the
    router softmax, not renormalised, no correction bias, group_score 'max' where grouped,
    shared experts ungated and n * F wide (or absent: zero); mla interleaved, no
    yarn_factor/mscale_all_dim without rope_scaling, every query row with a key."""
    import numpy as np

    a, p = v.attributes, v.params

    def router_ok(a, p, prefix=""):
        shared = p.get(f"{prefix}shared.w_gate")
        return (a.get("scoring", "softmax") == "softmax" and not a.get("renormalize", False)
                and f"{prefix}router.correction_bias" not in p
                and f"{prefix}shared_gate.w" not in p
                and (a.get("n_group", 1) == 1 or a.get("group_score", "sum_top2") == "max")
                and (shared is None or np.shape(shared)[1]
                     % np.shape(p[f"{prefix}experts.w_gate"])[2] == 0))

    def mla_ok(a):
        return (a.get("rope_convention", "interleaved") == "interleaved"
                and not (a.get("yarn_factor", 1.0) > 1 and a.get("mscale_all_dim", 0.0)))

    if v.function == "moe":
        return "DeepseekV2Moe" if router_ok(a, p) else None
    if v.function not in ("mla", "deepseek_layer"):
        return None
    t = v.inputs["x"].shape[1]
    keep = np.tril(np.ones((t, t), dtype=bool))
    if "mask" in v.inputs:
        keep = keep & np.asarray(v.inputs["mask"])
    if not keep.any(-1).all() or not mla_ok(a):
        return None
    if v.function == "mla":
        return "DeepseekV2Attention"
    if "moe.router.w" in p and not router_ok({"scoring": "sigmoid", "renormalize": True, **a},
                                              p, "moe."):
        return None
    return "DeepseekV2DecoderLayer"
