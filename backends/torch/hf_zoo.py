"""Converters between spec parameters and the decoder layers of other open models in
``transformers`` (issue 25): Mistral, Qwen2 and Phi-3 to ``llama_layer``, GPT-NeoX and Falcon
to ``parallel_layer``. Registered in :mod:`.hf` (``from_hf``, ``to_hf(..., model=)``,
``forward``); the layout rules of :mod:`.hf` hold (``nn.Linear`` weights transposed, head h
owning rows h*K:(h+1)*K of a projection). What each module stores differently:

- ``MistralDecoderLayer``: Llama's layer; ``config.sliding_window`` is the spec's ``window``
  (transformers applies it through the mask, ``kv_idx > q_idx - sliding_window``).
- ``Qwen2DecoderLayer``: ``q_proj``, ``k_proj``, ``v_proj`` with biases, ``o_proj`` without:
  ``llama_layer(attention_bias=True)``; the window only on ``"sliding_attention"`` layers.
- ``Phi3DecoderLayer``: one ``qkv_proj`` whose rows are the blocks ``[q (H*K) | k (H_kv*K) |
  v (H_kv*K)]`` and one ``gate_up_proj`` with rows ``[gate (F) | up (F)]``; the only one of
  the three that rotates part of a head (``partial_rotary_factor``: the spec's ``rotary_dim``).
- Mistral, Qwen2 and Phi-3 take every ``rope_type`` the spec states (``rope_scaling``,
  :mod:`.hf_rope`); GPT-NeoX and Falcon (``parallel_layer``, unscaled) only the default.
- ``GPTNeoXLayer``: ``query_key_value`` (3*H*K, D) interleaved per head, rows
  ``[q_0 k_0 v_0 q_1 k_1 v_1 ...]`` of K each (``view(..., H, 3*K).chunk(3)``); two
  LayerNorms; ``use_parallel_residual`` must be True; its ``partial_rotary_factor``
  (``rotary_pct``, 0.25 by default) is the spec's ``rotary_dim = int(K * factor)``.
- ``FalconDecoderLayer``: ``query_key_value`` grouped per kv head in the new decoder
  architecture (``[q_{g,0} .. q_{g,G-1} k_g v_g]``, G = H / H_kv), ``[q (H*K) | k (K) | v (K)]``
  with the old multi-query, per head ``[q_h k_h v_h]`` otherwise; ``bias=False`` is zero biases.

A config the spec function cannot express raises ``ConfigError`` naming the config field.
"""

from __future__ import annotations

import numpy as np
import torch
from attnspec.spec.errors import ConfigError
from transformers import FalconConfig, GPTNeoXConfig, MistralConfig, Phi3Config, Qwen2Config
from transformers.models.falcon.modeling_falcon import FalconDecoderLayer, FalconRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer, GPTNeoXRotaryEmbedding
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer, MistralRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer, Phi3RotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

from . import hf_base as hf
from . import hf_rope

SPEC_FUNCTION = {"MistralDecoderLayer": "llama_layer", "Qwen2DecoderLayer": "llama_layer",
                 "Phi3DecoderLayer": "llama_layer", "GPTNeoXLayer": "parallel_layer",
                 "FalconDecoderLayer": "parallel_layer"}

QWEN2 = hf.LLAMA + [(f"self_attn.{c}_proj.bias", f"attn.b_{c}", False) for c in "qkv"]
PHI3 = [row for row in hf.LLAMA if row[0].split(".")[1] not in
        ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")]
NEOX = [("input_layernorm.weight", "attn_norm.gamma", False),
        ("input_layernorm.bias", "attn_norm.beta", False),
        ("post_attention_layernorm.weight", "ffn_norm.gamma", False),
        ("post_attention_layernorm.bias", "ffn_norm.beta", False),
        ("attention.dense.weight", "attn.w_o", True), ("attention.dense.bias", "attn.b_o", False),
        ("mlp.dense_h_to_4h.weight", "ffn.w1", True), ("mlp.dense_h_to_4h.bias", "ffn.b1", False),
        ("mlp.dense_4h_to_h.weight", "ffn.w2", True), ("mlp.dense_4h_to_h.bias", "ffn.b2", False)]
FALCON = [("self_attention.dense.weight", "attn.w_o", True),
          ("self_attention.dense.bias", "attn.b_o", False),
          ("mlp.dense_h_to_4h.weight", "ffn.w1", True), ("mlp.dense_h_to_4h.bias", "ffn.b1", False),
          ("mlp.dense_4h_to_h.weight", "ffn.w2", True), ("mlp.dense_4h_to_h.bias", "ffn.b2", False)]
_FALCON_NORMS = {1: [("input_layernorm.weight", "attn_norm.gamma", False),
                     ("input_layernorm.bias", "attn_norm.beta", False)],
                 2: [("ln_attn.weight", "attn_norm.gamma", False),
                     ("ln_attn.bias", "attn_norm.beta", False),
                     ("ln_mlp.weight", "ffn_norm.gamma", False),
                     ("ln_mlp.bias", "ffn_norm.beta", False)]}

PHI3_ROPE = ("default", "longrope")  # Phi3Config.validate_rope refuses the other rules
_LLAMA_ATTRS = {"num_heads", "num_kv_heads", "eps", "rope_base", "window", "offset",
                "attention_bias", "rope_scaling", "rotary_dim"}
_PARALLEL_ATTRS = {"num_heads", "num_kv_heads", "num_norms", "eps", "activation", "rope_base",
                   "offset", "rotary_dim"}


def _state(module, table) -> dict:
    """Spec parameters from module's state_dict; an HF bias the module lacks is zero."""
    state = module.state_dict()
    out = {}
    for name, path, transposed in table:
        if name not in state:  # bias=False: the spec's zero bias
            weight = state[name.rsplit(".", 1)[0] + ".weight"]
            out[path] = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
            continue
        out[path] = hf._t(state[name].T if transposed else state[name])
    return out


def _rope(module: str, c) -> float:
    """rope_base of an unscaled config that rotates whole heads (else ConfigError)."""
    return _rope_attributes(module, c, 0, partial=False)["rope_base"]


def _rope_attributes(module: str, c, head_dim: int, partial: bool) -> dict:
    """rope_base (and rotary_dim where ``partial``: GPT-NeoX's partial_rotary_factor, its
    rotary_pct) of a parallel layer's config; any scaling rule is refused (parallel_layer has
    no rope_scaling)."""
    rope = dict(c.rope_parameters or {})
    if rope.get("rope_type", "default") != "default":
        hf._unsupported(module, "rope_parameters (rope_scaling)", rope,
                        "the spec's RoPE here is unscaled (rope_type 'default')")
    return hf_rope.from_hf(module, c, rope, head_dim, partial=partial)


def _silu(module: str, c):
    if c.hidden_act != "silu":
        hf._unsupported(module, "hidden_act", c.hidden_act, "llama_layer's feed-forward is SwiGLU")


def _window(module):
    """The layer's sliding window (None: causal only), as its attention applies it."""
    if isinstance(module, Qwen2DecoderLayer):
        return module.self_attn.sliding_window
    if isinstance(module, (MistralDecoderLayer, Phi3DecoderLayer)):
        return getattr(module.self_attn.config, "sliding_window", None)
    return None


def _llama_attributes(module, who: str, bias: bool) -> dict:
    c = module.self_attn.config
    _silu(who, c)
    a = {"num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
         "eps": float(c.rms_norm_eps),
         **hf_rope.from_hf(who, c, c.rope_parameters, module.self_attn.head_dim,
                           partial=isinstance(module, Phi3DecoderLayer))}
    if _window(module) is not None:
        a["window"] = int(_window(module))
    if bias:
        a["attention_bias"] = True
    return a


# -- from_hf ---------------------------------------------------------------------------------


def mistral_layer_from_hf(layer: MistralDecoderLayer) -> tuple[dict, dict]:
    return _llama_attributes(layer, "MistralDecoderLayer", False), hf._from_state(layer, hf.LLAMA)


def qwen2_layer_from_hf(layer: Qwen2DecoderLayer) -> tuple[dict, dict]:
    return _llama_attributes(layer, "Qwen2DecoderLayer", True), hf._from_state(layer, QWEN2)


def phi3_layer_from_hf(layer: Phi3DecoderLayer) -> tuple[dict, dict]:
    a = _llama_attributes(layer, "Phi3DecoderLayer", False)
    c = layer.self_attn.config
    k = layer.self_attn.head_dim
    q_rows, kv_rows = c.num_attention_heads * k, c.num_key_value_heads * k
    w_q, w_k, w_v = layer.self_attn.qkv_proj.weight.detach().split([q_rows, kv_rows, kv_rows])
    gate, up = layer.mlp.gate_up_proj.weight.detach().chunk(2)  # rows [gate (F) | up (F)]
    p = hf._from_state(layer, PHI3)
    p.update({"attn.w_q": hf._t(w_q.T), "attn.w_k": hf._t(w_k.T), "attn.w_v": hf._t(w_v.T),
              "ffn.w_gate": hf._t(gate.T), "ffn.w_up": hf._t(up.T)})
    return a, p


def _split_qkv(weight, bias, h: int, h_kv: int, k: int, layout: str) -> dict:
    """The fused (rows, D) weight and (rows,) bias -> attn.{w,b}_{q,k,v} in the spec's
    layout (weights transposed to (D, columns))."""
    d = weight.shape[1]
    if layout == "per-head":  # [q_h k_h v_h] for each head h
        parts = weight.view(h, 3, k, d), bias.view(h, 3, k)
        pick = [(lambda z, i=i: z[:, i].reshape(h * k, *z.shape[3:])) for i in range(3)]
    elif layout == "grouped":  # [q_{g,0} .. q_{g,G-1} k_g v_g] for each kv head g
        g = h // h_kv
        parts = weight.view(h_kv, g + 2, k, d), bias.view(h_kv, g + 2, k)
        pick = [lambda z: z[:, :g].reshape(h * k, *z.shape[3:]),
                lambda z: z[:, g].reshape(h_kv * k, *z.shape[3:]),
                lambda z: z[:, g + 1].reshape(h_kv * k, *z.shape[3:])]
    else:  # "blocks": [q (H*K) | k (H_kv*K) | v (H_kv*K)]
        sizes = [h * k, h_kv * k, h_kv * k]
        parts = weight, bias
        pick = [(lambda z, i=i: z.split(sizes)[i]) for i in range(3)]
    w, b = parts
    out = {}
    for c, f in zip("qkv", pick):
        out[f"attn.w_{c}"] = hf._t(f(w).T)
        out[f"attn.b_{c}"] = hf._t(f(b))
    return out


def _zero_bias(linear):
    b = linear.bias
    return torch.zeros(linear.weight.shape[0], dtype=linear.weight.dtype) if b is None else b.detach()


def gpt_neox_layer_from_hf(layer: GPTNeoXLayer) -> tuple[dict, dict]:
    who = "GPTNeoXLayer"
    c = layer.attention.config
    if not c.use_parallel_residual:
        hf._unsupported(who, "use_parallel_residual", False,
                        "parallel_layer is the parallel residual (the sequential layer is not)")
    a = {"num_heads": c.num_attention_heads, "num_kv_heads": None, "num_norms": 2,
         "eps": float(c.layer_norm_eps), "activation": hf._activation(who, "hidden_act", c.hidden_act),
         **_rope_attributes(who, c, layer.attention.head_size, partial=True)}
    qkv = layer.attention.query_key_value
    h, k = c.num_attention_heads, layer.attention.head_size
    p = _state(layer, NEOX)
    p.update(_split_qkv(qkv.weight.detach(), _zero_bias(qkv), h, h, k, "per-head"))
    return a, p


def _falcon_layout(who: str, c) -> tuple[int, int, str]:
    """(H_kv, num_norms, the fused qkv layout) of a FalconConfig, or ConfigError."""
    if c.alibi:
        hf._unsupported(who, "alibi", True, "parallel_layer's positions are RoPE")
    if not c.parallel_attn:
        hf._unsupported(who, "parallel_attn", False, "parallel_layer is the parallel residual")
    if c.new_decoder_architecture:
        norms = c.num_ln_in_parallel_attn or 2
        return c.num_kv_heads, norms, "grouped"
    if c.multi_query:
        return 1, 1, "blocks"
    if c.num_kv_heads != c.num_attention_heads:
        hf._unsupported(who, "num_kv_heads", c.num_kv_heads,
                        "the old multi-head layout has one key/value head per query head")
    return c.num_attention_heads, 1, "per-head"


def falcon_layer_from_hf(layer: FalconDecoderLayer) -> tuple[dict, dict]:
    who = "FalconDecoderLayer"
    c = layer.config
    h_kv, norms, layout = _falcon_layout(who, c)
    h, k = c.num_attention_heads, layer.self_attention.head_dim
    a = {"num_heads": h, "num_kv_heads": h_kv, "num_norms": norms,
         "eps": float(c.layer_norm_epsilon),
         "activation": hf._activation(who, "activation", c.activation),
         **_rope_attributes(who, c, k, partial=False)}
    qkv = layer.self_attention.query_key_value
    p = _state(layer, FALCON + _FALCON_NORMS[norms])
    p.update(_split_qkv(qkv.weight.detach(), _zero_bias(qkv), h, h_kv, k, layout))
    return a, p


FROM = {MistralDecoderLayer: mistral_layer_from_hf, Qwen2DecoderLayer: qwen2_layer_from_hf,
        Phi3DecoderLayer: phi3_layer_from_hf, GPTNeoXLayer: gpt_neox_layer_from_hf,
        FalconDecoderLayer: falcon_layer_from_hf}


# -- to_hf -----------------------------------------------------------------------------------


def _heads(attributes, d_q, who):
    h = attributes.get("num_heads")
    if isinstance(h, bool) or not isinstance(h, int) or h < 1 or d_q % h:
        raise ConfigError(f"{who}: num_heads={h!r} must be a positive divisor of attn.w_q's "
                          f"width {d_q}")
    h_kv = attributes.get("num_kv_heads") or h
    if isinstance(h_kv, bool) or not isinstance(h_kv, int) or h_kv < 1 or h % h_kv:
        raise ConfigError(f"{who}: num_kv_heads={h_kv!r} must divide num_heads={h}")
    return h, h_kv, d_q // h


def _llama_like_to_hf(params, attributes: dict, who: str):
    bias = who == "Qwen2DecoderLayer"
    hf._check_attributes(attributes, {"offset": 0, "attention_bias": bias}, _LLAMA_ATTRS, who)
    if bias and attributes.get("attention_bias") is not True:
        raise ConfigError(f"{who} needs attention_bias=True (Qwen2's q, k, v biases)")
    paths = {s for _, s, _ in (QWEN2 if bias else hf.LLAMA)}
    p = hf._spec_params(params, paths, who)
    w_q, w_up = p.require("attn.w_q", (None, None)), p.require("ffn.w_up", (None, None))
    d, f = w_up.shape
    h, h_kv, k = _heads(attributes, w_q.shape[1], who)
    window = attributes.get("window")
    phi3 = who == "Phi3DecoderLayer"
    rope, extra = hf_rope.to_hf(who, attributes, k, partial=phi3,
                                rules=PHI3_ROPE if phi3 else hf_rope.ROPE_TYPES)
    common = dict(hidden_size=d, intermediate_size=f, num_attention_heads=h,
                  num_key_value_heads=h_kv, rms_norm_eps=hf._eps(attributes, 1e-6, who),
                  hidden_act="silu", attention_dropout=0.0, attn_implementation="eager",
                  num_hidden_layers=1, rope_parameters=rope, **extra)
    if who == "MistralDecoderLayer":
        layer = MistralDecoderLayer(MistralConfig(**common, head_dim=k, sliding_window=window), 0)
        return hf._load(layer, hf._to_state(p, hf.LLAMA, layer.state_dict()), w_up.dtype, w_up.device)
    if k * h != d:
        raise ConfigError(f"{who}: head width K = {k} must be D / num_heads = {d} / {h}")
    if bias:
        config = Qwen2Config(**common, use_sliding_window=window is not None,
                             sliding_window=window, max_window_layers=0,
                             layer_types=["sliding_attention" if window else "full_attention"])
        layer = Qwen2DecoderLayer(config, 0)
        return hf._load(layer, hf._to_state(p, QWEN2, layer.state_dict()), w_up.dtype, w_up.device)
    layer = Phi3DecoderLayer(Phi3Config(**common, sliding_window=window, resid_pdrop=0.0), 0)
    state = hf._to_state(p, PHI3, layer.state_dict())
    state["self_attn.qkv_proj.weight"] = torch.cat([p.require(f"attn.w_{c}").T for c in "qkv"])
    state["mlp.gate_up_proj.weight"] = torch.cat([p.require("ffn.w_gate").T, w_up.T])
    return hf._load(layer, state, w_up.dtype, w_up.device)


def _fuse_qkv(p, h, h_kv, k, layout):
    """attn.{w,b}_{q,k,v} -> the fused (rows, D) weight and (rows,) bias of ``layout``."""
    w = {c: p.require(f"attn.w_{c}").T for c in "qkv"}  # (columns, D)
    b = {c: p.require(f"attn.b_{c}") for c in "qkv"}

    def fuse(z):
        if layout == "per-head":
            return torch.stack([z[c].reshape(h, k, *z[c].shape[1:]) for c in "qkv"], 1).flatten(0, 2)
        g = h // h_kv
        q = z["q"].reshape(h_kv, g, k, *z["q"].shape[1:])
        kv = [z[c].reshape(h_kv, 1, k, *z[c].shape[1:]) for c in "kv"]
        return torch.cat([q, *kv], 1).flatten(0, 2)
    return fuse(w), fuse(b)


def _parallel_to_hf(params, attributes: dict, who: str):
    hf._check_attributes(attributes, {"offset": 0}, _PARALLEL_ATTRS, who)
    norms = attributes.get("num_norms", 2)
    table = (NEOX if who == "GPTNeoXLayer" else FALCON + _FALCON_NORMS.get(norms, []))
    paths = {s for _, s, _ in table} | {f"attn.{n}_{c}" for n in "wb" for c in "qkv"}
    p = hf._spec_params(params, paths, who)
    w1 = p.require("ffn.w1", (None, None))
    d, f = w1.shape
    h, h_kv, k = _heads(attributes, p.require("attn.w_q", (d, None)).shape[1], who)
    if k * h != d:
        raise ConfigError(f"{who}: head width K = {k} must be D / num_heads = {d} / {h}")
    rope, _ = hf_rope.to_hf(who, attributes, k, partial=who == "GPTNeoXLayer", rules=("default",))
    rope.setdefault("partial_rotary_factor", 1.0)
    common = dict(hidden_size=d, num_attention_heads=h, attention_dropout=0.0,
                  hidden_dropout=0.0, attn_implementation="eager", num_hidden_layers=1,
                  rope_parameters=rope)
    act = hf._activation_to_hf({"activation": attributes.get("activation", "gelu")}, who)
    if who == "GPTNeoXLayer":
        if h_kv != h or norms != 2:
            raise ConfigError(f"{who} needs num_kv_heads = num_heads and num_norms = 2, got "
                              f"{h_kv} and {norms}")
        layer = GPTNeoXLayer(GPTNeoXConfig(**common, intermediate_size=f, hidden_act=act,
                                           layer_norm_eps=hf._eps(attributes, 1e-5, who),
                                           use_parallel_residual=True, attention_bias=True), 0)
        layout = "per-head"
        prefix = "attention.query_key_value"
    else:
        if norms not in (1, 2):
            raise ConfigError(f"{who}: num_norms must be 1 or 2, got {norms!r}")
        new = norms == 2 or h_kv not in (1, h)
        layout = "grouped" if new else ("blocks" if h_kv == 1 else "per-head")
        config = FalconConfig(**common, num_kv_heads=h_kv, new_decoder_architecture=new,
                              multi_query=h_kv == 1, parallel_attn=True, bias=True, alibi=False,
                              num_ln_in_parallel_attn=norms if new else None,
                              ffn_hidden_size=f, activation=act,
                              layer_norm_epsilon=hf._eps(attributes, 1e-5, who))
        layer = FalconDecoderLayer(config, 0)
        prefix = "self_attention.query_key_value"
    state = hf._to_state(p, table, layer.state_dict())
    if layout == "blocks":
        state[prefix + ".weight"] = torch.cat([p.require(f"attn.w_{c}").T for c in "qkv"])
        state[prefix + ".bias"] = torch.cat([p.require(f"attn.b_{c}") for c in "qkv"])
    else:
        state[prefix + ".weight"], state[prefix + ".bias"] = _fuse_qkv(p, h, h_kv, k, layout)
    return hf._load(layer, state, w1.dtype, w1.device)


def to_hf(params, attributes: dict, model: str):
    """Spec parameters and attributes -> the transformers layer ``model`` (a key of
    :data:`SPEC_FUNCTION`), eager attention, dropout 0."""
    if model in ("MistralDecoderLayer", "Qwen2DecoderLayer", "Phi3DecoderLayer"):
        return _llama_like_to_hf(params, attributes, model)
    if model in ("GPTNeoXLayer", "FalconDecoderLayer"):
        return _parallel_to_hf(params, attributes, model)
    raise ConfigError(f"model: {model!r} has no converter; supported: {', '.join(SPEC_FUNCTION)}")


# -- which vectors a model can express ------------------------------------------------------


def expressible(v, model: str):
    """The attributes of vector ``v`` (a llama_layer or parallel_layer value vector) for
    ``to_hf(..., model=model)``, or None where the model cannot express it: a row that sees no
    key (uniform weights in transformers, zeros in the spec), a head width other than D/H
    (only Mistral has head_dim), Qwen2 without attention_bias or the others with it, GPT-NeoX
    with H_kv < H or one norm, a window for Phi-3 (the same mask as Mistral's), a rotary_dim
    below K for Mistral, Qwen2 and Falcon (Phi-3 and GPT-NeoX rotate part of a head), a rope_scaling rule
    other than longrope for Phi-3."""
    a = dict(v.attributes)
    t = v.inputs["x"].shape[1]
    keep = np.tril(np.ones((t, t), dtype=bool))
    if "mask" in v.inputs:
        keep = keep & np.asarray(v.inputs["mask"])
    if not keep.any(-1).all():
        return None
    if (model == "Qwen2DecoderLayer") != bool(a.get("attention_bias")):
        return None
    if model in ("Qwen2DecoderLayer", "Phi3DecoderLayer", "GPTNeoXLayer", "FalconDecoderLayer"):
        h, d = a["num_heads"], v.inputs["x"].shape[-1]
        if v.params["attn.w_q"].shape[1] != d:
            return None
    if model == "GPTNeoXLayer" and (a.get("num_kv_heads") not in (None, h)
                                   or a.get("num_norms", 2) != 2):
        return None
    if a.get("window") is not None and model == "Phi3DecoderLayer":
        return None
    kind = (a.get("rope_scaling") or {}).get("rope_type", "default")
    if model == "Phi3DecoderLayer" and kind not in PHI3_ROPE:
        return None
    r = a.get("rotary_dim")
    if r is not None and r != v.params["attn.w_q"].shape[1] // a["num_heads"] and \
            model in ("MistralDecoderLayer", "Qwen2DecoderLayer", "FalconDecoderLayer"):
        return None  # they rotate whole heads
    return a


# -- calling a layer as the spec function is called --------------------------------------------

_ROTARY = {MistralDecoderLayer: MistralRotaryEmbedding, Qwen2DecoderLayer: Qwen2RotaryEmbedding,
           Phi3DecoderLayer: Phi3RotaryEmbedding, GPTNeoXLayer: GPTNeoXRotaryEmbedding,
           FalconDecoderLayer: FalconRotaryEmbedding}


def _config(module):
    return module.config if isinstance(module, FalconDecoderLayer) else (
        module.attention.config if isinstance(module, GPTNeoXLayer) else module.self_attn.config)


def forward(module, x, mask=None, *, offset: int = 0) -> torch.Tensor:
    """``y`` of the spec function for ``module`` on ``x`` (B, T, D): causal (within the
    layer's sliding window) ANDed with the spec's boolean ``mask``, RoPE cos/sin from the
    model's own rotary embedding at positions ``offset..offset+T-1``."""
    who = type(module).__name__
    keep, positions = hf.causal_layer_inputs(x, mask, offset, _window(module), who)
    rotary = _ROTARY[type(module)](_config(module)).to(x.device)
    kwargs = {"position_embeddings": rotary(x, positions), "position_ids": positions,
              "attention_mask": hf.additive_mask(keep, x.dtype).to(x.device)}
    if isinstance(module, FalconDecoderLayer):
        kwargs["alibi"] = None
    with torch.no_grad():
        out = module(x, **kwargs)
    return out[0] if isinstance(out, tuple) else out
