"""Converters between the spec's mixture-of-experts decoder layers (spec/components/
moe_layers.md) and transformers' ``MixtralDecoderLayer``, ``Qwen2MoeDecoderLayer`` and
``DeepseekV3DecoderLayer`` (registered in ``hf.py``'s ``from_hf``/``to_hf``/``forward``).

Each layer is its attention, two RMSNorms and its ``mlp``; the attention and the MoE block go
through the converters that already exist (``hf.LLAMA``'s rows, :mod:`.hf_mla`,
:mod:`.hf_moe`), so a layer holds no mapping of its own but the norms':

- ``MixtralDecoderLayer`` -> ``mixtral_layer``: no biases, ``renormalize=True`` (always),
  ``config.sliding_window`` is ``window`` (applied through the mask);
- ``Qwen2MoeDecoderLayer`` -> ``mixtral_layer``: ``config.qkv_bias`` is ``attention_bias``,
  ``norm_topk_prob`` is ``renormalize``, the sigmoid-gated shared expert; ``window`` on a
  ``"sliding_attention"`` layer. A dense layer (``mlp_only_layers``, ``decoder_sparse_step``)
  is refused: it is ``llama_layer(attention_bias=True)``;
- ``DeepseekV3DecoderLayer`` -> ``deepseek_layer``: ``mla`` (``self_attn``), then the dense
  ``DeepseekV3MLP`` (``ffn.*``, layers below ``first_k_dense_replace``) or ``DeepseekV3MoE``
  (``moe.*``). transformers builds mla's latent norms with eps 1e-6 whatever
  ``rms_norm_eps`` says; the spec has one eps, so a layer whose two differ is refused.

to_hf builds the layer from a config with a one-expert placeholder ``mlp`` and puts the
block that :func:`.hf_moe.moe_to_hf` (or the dense MLP) holds in its place. What a block
always has and the spec's parameters may leave out is zero: Qwen2-MoE's shared expert and its
gate, DeepSeek-V3's shared experts and correction bias (an expert with zero weights adds
exactly 0).
"""

from __future__ import annotations

import copy

import torch
from attnspec.spec.errors import ConfigError
from transformers import MixtralConfig, Qwen2MoeConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3DecoderLayer,
    DeepseekV3ForCausalLM,
    DeepseekV3MLP,
    DeepseekV3MoE,
    DeepseekV3RotaryEmbedding,
)
from transformers.models.mixtral.modeling_mixtral import (
    MixtralDecoderLayer,
    MixtralRotaryEmbedding,
)
from transformers.models.qwen2_moe.modeling_qwen2_moe import (
    Qwen2MoeDecoderLayer,
    Qwen2MoeRotaryEmbedding,
    Qwen2MoeSparseMoeBlock,
)

from .._checks import integer, params_of
from . import hf_base as hf
from .hf_mla import mla_from_hf, mla_to_hf
from .hf_moe import moe_from_hf, moe_to_hf

SPEC_FUNCTION = {"MixtralDecoderLayer": "mixtral_layer", "Qwen2MoeDecoderLayer": "mixtral_layer",
                 "DeepseekV3DecoderLayer": "deepseek_layer",
                 "DeepseekV3ForCausalLM": "deepseek_decoder_only"}
LAYERS = (MixtralDecoderLayer, Qwen2MoeDecoderLayer, DeepseekV3DecoderLayer,
          DeepseekV3ForCausalLM)

NORMS = [("input_layernorm.weight", "attn_norm.gamma", False),
         ("post_attention_layernorm.weight", "ffn_norm.gamma", False)]
ATTN = [row for row in hf.LLAMA if not row[0].startswith("mlp.")]  # the norms and attention
QWEN_ATTN = ATTN + [(f"self_attn.{c}_proj.bias", f"attn.b_{c}", False) for c in "qkv"]
DENSE = [("mlp.gate_proj.weight", "ffn.w_gate", True), ("mlp.up_proj.weight", "ffn.w_up", True),
         ("mlp.down_proj.weight", "ffn.w_down", True)]

MIXTRAL_ATTRS = {"num_heads", "num_kv_heads", "eps", "rope_base", "window", "offset",
                 "attention_bias", "top_k", "renormalize"}
MLA_ATTRS = {"num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "eps",
             "rope_base", "rope_convention", "yarn_factor", "mscale_all_dim", "offset",
             "rope_scaling"}
ROUTER_ATTRS = {"top_k", "scoring", "renormalize", "n_group", "topk_group",
                "routed_scaling_factor", "group_score"}


def _prefixed(prefix: str, d: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in d.items()}


def _window(layer):
    """The layer's sliding window (None: causal only), as transformers' mask applies it."""
    if isinstance(layer, Qwen2MoeDecoderLayer):
        return getattr(layer.self_attn, "sliding_window", None)
    if isinstance(layer, MixtralDecoderLayer):
        return layer.self_attn.config.sliding_window
    return None


# -- from_hf ---------------------------------------------------------------------------------

def mixtral_layer_from_hf(layer) -> tuple[dict, dict]:
    """A MixtralDecoderLayer or Qwen2MoeDecoderLayer -> (attributes, params) of mixtral_layer."""
    from .hf_zoo import _rope

    who = type(layer).__name__
    c = layer.self_attn.config
    if not isinstance(layer.mlp, (Qwen2MoeSparseMoeBlock,)) and isinstance(layer, Qwen2MoeDecoderLayer):
        raise ConfigError(f"{who}: a dense layer (config.mlp_only_layers / decoder_sparse_step) "
                          f"has no experts: it is llama_layer(attention_bias=True)")
    bias = layer.self_attn.q_proj.bias is not None
    params = hf._from_state(layer, QWEN_ATTN if bias else ATTN)
    moe_a, moe_p = moe_from_hf(layer.mlp)
    params.update(_prefixed("moe", moe_p))
    a = {"num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
         "eps": float(c.rms_norm_eps), "rope_base": _rope(who, c), "top_k": moe_a["top_k"],
         "renormalize": moe_a["renormalize"]}
    if _window(layer) is not None:
        a["window"] = int(_window(layer))
    if bias:
        a["attention_bias"] = True
    return a, params


def deepseek_layer_from_hf(layer: DeepseekV3DecoderLayer) -> tuple[dict, dict]:
    """A DeepseekV3DecoderLayer -> (attributes, params) of deepseek_layer."""
    c = layer.self_attn.config
    a, attn = mla_from_hf(layer.self_attn)
    eps = float(c.rms_norm_eps)
    if a["eps"] != eps:
        raise ConfigError(f"DeepseekV3DecoderLayer: config.rms_norm_eps={eps} differs from its "
                          f"attention's latent norms' eps {a['eps']} (transformers builds those "
                          f"with 1e-6): deepseek_layer has one eps")
    params = {**hf._from_state(layer, NORMS), **_prefixed("attn", attn)}
    if isinstance(layer.mlp, DeepseekV3MoE):
        moe_a, moe_p = moe_from_hf(layer.mlp)
        params.update(_prefixed("moe", moe_p))
        a.update({k: v for k, v in moe_a.items() if k != "eps"})
    else:
        hf_zoo_silu(c)
        params.update(hf._from_state(layer, DENSE))
    return a, params


def hf_zoo_silu(c):
    if c.hidden_act != "silu":
        hf._unsupported("DeepseekV3DecoderLayer", "hidden_act", c.hidden_act,
                        "deepseek_layer's feed-forward is SwiGLU")


def from_hf(layer) -> tuple[dict, dict]:
    if isinstance(layer, DeepseekV3ForCausalLM):
        return deepseek_for_causal_lm_from_hf(layer)
    if isinstance(layer, DeepseekV3DecoderLayer):
        return deepseek_layer_from_hf(layer)
    return mixtral_layer_from_hf(layer)


# -- to_hf -----------------------------------------------------------------------------------

def _check(attributes: dict, allowed: set, who: str):
    unknown = sorted(set(attributes) - allowed)
    if unknown:
        raise ConfigError(f"{who}: attributes {unknown} are not its spec function's")
    if attributes.get("offset", 0):
        raise ConfigError(f"{who}: offset is forward()'s, not the module's")


def _zero_shared(moe: dict, d: int, f: int, like, gate: bool) -> dict:
    """A shared expert of width f with zero weights (it adds exactly 0), and a zero gate."""
    out = dict(moe)
    if "shared.w_gate" not in out:
        z = torch.zeros
        out.update({"shared.w_gate": z(d, f, dtype=like.dtype, device=like.device),
                    "shared.w_up": z(d, f, dtype=like.dtype, device=like.device),
                    "shared.w_down": z(f, d, dtype=like.dtype, device=like.device)})
        if gate:
            out["shared_gate.w"] = z(d, 1, dtype=like.dtype, device=like.device)
    return out


def _moe_params(p) -> dict:
    return {k: p.require(f"moe.{k}") for k in p.scope("moe").keys()}


def mixtral_layer_to_hf(params, attributes: dict):
    """mixtral_layer -> a MixtralDecoderLayer (no shared expert, no biases, renormalised) or
    else a Qwen2MoeDecoderLayer, eager attention, in eval mode."""
    p = params_of(params)
    bias = bool(attributes.get("attention_bias", False))
    renormalize = bool(attributes.get("renormalize", True))
    moe = _moe_params(p)
    qwen = bias or "shared.w_gate" in moe or not renormalize
    who = "Qwen2MoeDecoderLayer" if qwen else "MixtralDecoderLayer"
    _check(attributes, MIXTRAL_ATTRS, who)
    w_q = p.require("attn.w_q", (None, None))
    d = w_q.shape[0]
    h = integer("num_heads", attributes["num_heads"], lo=1)
    h_kv = attributes.get("num_kv_heads") or h
    k = w_q.shape[1] // h
    window = attributes.get("window")
    common = dict(hidden_size=d, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=k,
                  rms_norm_eps=float(attributes.get("eps", 1e-6)), hidden_act="silu",
                  attention_dropout=0.0, attn_implementation="eager", num_hidden_layers=1,
                  num_experts_per_tok=1, rope_parameters={
                      "rope_type": "default",
                      "rope_theta": float(attributes.get("rope_base", 10000.0))})
    router = {"top_k": attributes["top_k"], "renormalize": renormalize}
    if qwen:
        config = Qwen2MoeConfig(**common, qkv_bias=bias, num_experts=1, moe_intermediate_size=1,
                                shared_expert_intermediate_size=1, intermediate_size=1,
                                use_sliding_window=window is not None, sliding_window=window,
                                max_window_layers=0, decoder_sparse_step=1, mlp_only_layers=[],
                                layer_types=["sliding_attention" if window else "full_attention"])
        layer = Qwen2MoeDecoderLayer(config, 0)
        f = moe["experts.w_gate"].shape[2]
        block = moe_to_hf(_zero_shared(moe, d, f, w_q, gate=True), router)
    else:
        config = MixtralConfig(**common, num_local_experts=1, intermediate_size=1,
                               sliding_window=window, router_jitter_noise=0.0)
        layer = MixtralDecoderLayer(config, 0)
        block = moe_to_hf(moe, router)
    layer = hf._load(layer, hf._to_state(p, QWEN_ATTN if bias else ATTN,
                                          layer.state_dict()) | _placeholder(layer),
                     w_q.dtype, w_q.device)
    layer.mlp = block
    return layer.eval()


def _placeholder(layer) -> dict:
    """The placeholder mlp's own entries, so load_state_dict(strict=True) sees every key."""
    return {k: v for k, v in layer.state_dict().items() if k.startswith("mlp.")}


def deepseek_layer_to_hf(params, attributes: dict):
    """deepseek_layer -> a DeepseekV3DecoderLayer (eager attention, eval mode): mla's
    DeepseekV3Attention, then DeepseekV3MLP (ffn.*) or DeepseekV3MoE (moe.*; sigmoid scoring
    only)."""
    who = "DeepseekV3DecoderLayer"
    _check(attributes, MLA_ATTRS | ROUTER_ATTRS, who)
    p = params_of(params)
    attn = mla_to_hf({k: p.require(f"attn.{k}") for k in p.scope("attn").keys()},
                     {k: v for k, v in attributes.items() if k in MLA_ATTRS})
    like = p.require("attn.w_kv_a")
    d = like.shape[0]
    config = copy.deepcopy(attn.config)
    config.first_k_dense_replace, config.intermediate_size = 1, 1
    layer = DeepseekV3DecoderLayer(config, 0)
    kept = {k: v for k, v in layer.state_dict().items() if k.startswith("mlp.")}
    kept.update(_prefixed("self_attn", attn.state_dict()))
    layer = hf._load(layer, {**hf._to_state(p, NORMS, layer.state_dict()), **kept},
                     like.dtype, like.device)
    if "moe.router.w" in p:
        if attributes.get("scoring", "sigmoid") != "sigmoid":
            raise ConfigError(f"{who}: scoring={attributes['scoring']!r}: DeepseekV3MoE's router "
                              f"scores by a sigmoid only")
        moe = _moe_params(p)
        f = moe["experts.w_gate"].shape[2]
        moe = _zero_shared(moe, d, f, like, gate=False)
        if "router.correction_bias" not in moe:
            e = moe["router.w"].shape[1]
            moe["router.correction_bias"] = torch.zeros(e, dtype=like.dtype, device=like.device)
        router = {k: v for k, v in attributes.items() if k in ROUTER_ATTRS}
        router = {"renormalize": True, **router, "scoring": "sigmoid"}
        if router.get("top_k") is None:
            raise ConfigError(f"{who}: an MoE layer needs top_k")
        if router["renormalize"]:
            router["eps"] = 1e-20
        layer.mlp = moe_to_hf(moe, router)
    else:
        f = p.require("ffn.w_gate", (d, None)).shape[1]
        mlp = DeepseekV3MLP(config, intermediate_size=f)
        layer.mlp = hf._load(mlp, {k[len("mlp."):]: v for k, v in
                                   hf._to_state(p, DENSE, _prefixed("mlp", mlp.state_dict())).items()},
                             like.dtype, like.device)
    layer.self_attn = attn  # its latent norms' eps set by mla_to_hf
    return layer.eval()


def to_hf(params, attributes: dict):
    if "embed.table" in params_of(params):
        return deepseek_for_causal_lm_to_hf(params, attributes)
    if "attn.w_kv_a" in params_of(params):
        return deepseek_layer_to_hf(params, attributes)
    return mixtral_layer_to_hf(params, attributes)


# -- calling a layer as the spec function is called --------------------------------------------

_ROTARY = {MixtralDecoderLayer: MixtralRotaryEmbedding, Qwen2MoeDecoderLayer: Qwen2MoeRotaryEmbedding,
           DeepseekV3DecoderLayer: DeepseekV3RotaryEmbedding}


def forward(layer, x, mask=None, *, offset: int = 0, pad_id: int | None = None) -> torch.Tensor:
    """``y`` of the spec function for ``layer`` on ``x`` (B, T, D): causal (within the layer's
    sliding window) ANDed with the spec's boolean ``mask``, given as transformers' additive
    mask; RoPE cos/sin from the model's own rotary embedding at positions offset..offset+T-1.
    A DeepseekV3ForCausalLM takes ids (B, T) and ``pad_id`` and returns the logits."""
    who = type(layer).__name__
    if isinstance(layer, DeepseekV3ForCausalLM):
        if mask is not None or offset or pad_id is None:
            raise ConfigError(f"{who}: pass pad_id, not mask or offset")
        return deepseek_for_causal_lm_forward(layer, x, pad_id=pad_id)
    if pad_id is not None:
        raise ConfigError(f"{who}: pad_id is the model's, not a layer's")
    keep, positions = hf.causal_layer_inputs(x, mask, offset, _window(layer), who)
    rotary = _ROTARY[type(layer)](layer.self_attn.config).to(x.device)
    with torch.no_grad():
        out = layer(x, position_embeddings=rotary(x, positions), position_ids=positions,
                    attention_mask=hf.additive_mask(keep, x.dtype).to(x.device))
    return out[0] if isinstance(out, tuple) else out


# -- which vectors a layer can express --------------------------------------------------------

def expressible(v):
    """(class name, attributes) for a mixtral_layer or deepseek_layer vector ``v`` through
    :func:`to_hf`, or None where transformers cannot hold it: a query row with no key (uniform
    weights there, zeros in the spec), DeepSeek's softmax scoring (DeepseekV3MoE's router is a
    sigmoid), YaRN's mscale without rope_scaling (it comes with YaRN's frequency scaling in
    transformers; with rope_scaling both are rope_parameters')."""
    import numpy as np

    a = dict(v.attributes)
    if v.function == "deepseek_decoder_only":
        ids = np.asarray(v.inputs["ids"])
        moe = a["first_k_dense_replace"] < a["num_layers"]
        if (moe and a.get("scoring", "sigmoid") != "sigmoid") or (ids[:, 0] == a["pad_id"]).any() \
                or (a.get("yarn_factor", 1.0) > 1 and a.get("mscale_all_dim", 0.0)):
            return None
        return "DeepseekV3ForCausalLM", a
    t = v.inputs["x"].shape[1]
    keep = np.tril(np.ones((t, t), dtype=bool))
    if a.get("window") is not None:
        keep &= np.triu(np.ones((t, t), dtype=bool), 1 - a["window"])
    if "mask" in v.inputs:
        keep = keep & np.asarray(v.inputs["mask"])
    if not keep.any(-1).all():
        return None
    if v.function == "deepseek_layer":
        if "moe.router.w" in v.params and (a.get("scoring", "sigmoid") != "sigmoid" or (
                a.get("n_group", 1) > 1 and a.get("group_score", "sum_top2") != "sum_top2")):
            return None
        if a.get("yarn_factor", 1.0) > 1 and a.get("mscale_all_dim", 0.0):
            return None
        return "DeepseekV3DecoderLayer", a
    qwen = (a.get("attention_bias", False) or "moe.shared.w_gate" in v.params
            or not a.get("renormalize", True))
    return ("Qwen2MoeDecoderLayer" if qwen else "MixtralDecoderLayer"), a


# -- the DeepSeek-V3 model ------------------------------------------------------------------------

def deepseek_for_causal_lm_from_hf(model) -> tuple[dict, dict]:
    """A DeepseekV3ForCausalLM -> (attributes, params) of deepseek_decoder_only (pad_id is
    forward()'s: give it to the spec function yourself). Every layer as
    :func:`deepseek_layer_from_hf`; ``first_k_dense_replace`` from the config."""
    c = model.config
    if c.tie_word_embeddings:
        hf._unsupported("DeepseekV3ForCausalLM", "tie_word_embeddings", True,
                        "deepseek_decoder_only's lm_head.w is its own")
    n = c.num_hidden_layers
    params = {"embed.table": hf._t(model.model.embed_tokens.weight),
              "norm.gamma": hf._t(model.model.norm.weight),
              "lm_head.w": hf._t(model.lm_head.weight.T)}
    attributes: dict = {}
    for i, layer in enumerate(model.model.layers[:n]):
        a, p = deepseek_layer_from_hf(layer)
        attributes.update(a)
        params.update(_prefixed(f"layers.{i}", p))
    attributes.update({"num_layers": n, "first_k_dense_replace": min(c.first_k_dense_replace, n)})
    return attributes, params


def deepseek_for_causal_lm_to_hf(params, attributes: dict):
    """deepseek_decoder_only -> a DeepseekV3ForCausalLM whose layers are
    :func:`deepseek_layer_to_hf`'s (eager attention, eval mode)."""
    who = "DeepseekV3ForCausalLM"
    model_attrs = {"num_layers", "first_k_dense_replace", "pad_id"}
    _check(attributes, (MLA_ATTRS | ROUTER_ATTRS | model_attrs) - {"offset"}, who)
    p = params_of(params)
    n = integer("num_layers", attributes["num_layers"], lo=1)
    k = integer("first_k_dense_replace", attributes["first_k_dense_replace"], lo=0, hi=n)
    layer_attrs = {a: v for a, v in attributes.items() if a not in model_attrs}
    layers = []
    for i in range(n):
        q = {key: p.require(f"layers.{i}.{key}") for key in p.scope(f"layers.{i}").keys()}
        if (i < k) == ("moe.router.w" in q):
            raise ConfigError(f"{who}: layer {i} is {'MoE' if i >= k else 'dense'} by "
                              f"first_k_dense_replace={k} but its parameters say otherwise")
        layers.append(deepseek_layer_to_hf(q, layer_attrs if i >= k else
                                           {a: v for a, v in layer_attrs.items()
                                            if a in MLA_ATTRS}))
    table = p.require("embed.table", (None, None))
    vocab, d = table.shape
    config = copy.deepcopy(layers[0].self_attn.config)
    config.vocab_size, config.num_hidden_layers, config.tie_word_embeddings = vocab, n, False
    config.first_k_dense_replace = k
    # placeholder sizes for the layers built here and replaced by ``layers`` below
    config.intermediate_size = config.moe_intermediate_size = config.n_routed_experts = 1
    config.num_experts_per_tok = config.n_group = config.topk_group = config.n_shared_experts = 1
    model = DeepseekV3ForCausalLM(config)
    state = {"model.embed_tokens.weight": table, "model.norm.weight": p.require("norm.gamma", (d,)),
             "lm_head.weight": p.require("lm_head.w", (d, vocab)).T}
    for i, layer in enumerate(layers):
        model.model.layers[i] = layer
    state.update({key: v for key, v in model.state_dict().items() if key.startswith("model.layers.")})
    return hf._load(model, state, table.dtype, table.device)


def deepseek_for_causal_lm_forward(model, ids, *, pad_id: int) -> torch.Tensor:
    """The logits of deepseek_decoder_only: ``attention_mask = ids != pad_id`` (transformers
    adds the causal mask itself)."""
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=(ids != pad_id).long(), use_cache=False).logits
