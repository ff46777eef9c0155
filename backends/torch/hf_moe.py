"""Converters between the spec's ``moe`` and transformers' sparse MoE blocks (registered in
``hf.py``'s ``from_hf``/``to_hf``/``forward``):

- ``MixtralSparseMoeBlock`` -> ``moe``: softmax router, top ``num_experts_per_tok``,
  ``renormalize=True`` (always), SwiGLU experts, no shared expert;
- ``Qwen2MoeSparseMoeBlock`` -> ``moe``: ``renormalize=norm_topk_prob``, plus the shared
  expert (``shared_expert``, width ``shared_expert_intermediate_size``) times
  ``sigmoid(shared_expert_gate(x))``.
- ``DeepseekV3MoE`` -> ``moe``: sigmoid scoring, ``gate.e_score_correction_bias`` as
  ``router.correction_bias``, ``n_group``/``topk_group``, ``renormalize=norm_topk_prob`` (eps
  1e-20), ``routed_scaling_factor``, plus the ungated ``shared_experts`` (width
  ``moe_intermediate_size * n_shared_experts``).

transformers 5 stores the experts as 3-D tensors: ``experts.gate_up_proj`` (E, 2F, D), the gate
rows first, and ``experts.down_proj`` (E, D, F), each applied as ``F.linear`` (x W^T): the
spec's ``experts.w_gate[e]`` is ``gate_up_proj[e, :F].T``, ``w_up[e]`` ``gate_up_proj[e, F:].T``,
``w_down[e]`` ``down_proj[e].T``; ``router.w`` is ``gate.weight.T`` (E, D) -> (D, E).
The blocks take (B, T, D) and flatten the tokens; the spec's ``x`` is (N, D): ``forward``
passes it as (1, N, D).
"""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError, ParameterError, ShapeError
from transformers import DeepseekV3Config, MixtralConfig, Qwen2MoeConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from .._checks import params_of

SPEC_FUNCTION = {"MixtralSparseMoeBlock": "moe", "Qwen2MoeSparseMoeBlock": "moe",
                 "DeepseekV3MoE": "moe"}

# the router attributes neither block can express, with the only value each takes
FIXED = {"scoring": "softmax", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0}
SHARED = [("shared_expert.gate_proj.weight", "shared.w_gate"),
          ("shared_expert.up_proj.weight", "shared.w_up"),
          ("shared_expert.down_proj.weight", "shared.w_down"),
          ("shared_expert_gate.weight", "shared_gate.w")]
DEEPSEEK_SHARED = [("shared_experts.gate_proj.weight", "shared.w_gate"),
                   ("shared_experts.up_proj.weight", "shared.w_up"),
                   ("shared_experts.down_proj.weight", "shared.w_down")]
MOE_CLASSES = (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, DeepseekV3MoE)


def _t(x):
    return x.detach().clone()


def _silu(who: str, act):
    """The experts' activation must be transformers' silu (moe's experts are SwiGLU)."""
    if type(act).__name__ != "SiLUActivation":
        raise ConfigError(f"{who} with an expert activation {type(act).__name__} (config."
                          f"hidden_act) has no spec equivalent: moe's experts are SwiGLU (silu)")


def _experts(block) -> dict:
    """experts.gate_up_proj (E, 2F, D), down_proj (E, D, F) -> the spec's (E, D, F), (E, F, D)."""
    gate_up, down = block.experts.gate_up_proj, block.experts.down_proj
    f = down.shape[-1]
    return {"router.w": _t(block.gate.weight.T),
            "experts.w_gate": _t(gate_up[:, :f].transpose(1, 2)),
            "experts.w_up": _t(gate_up[:, f:].transpose(1, 2)),
            "experts.w_down": _t(down.transpose(1, 2))}


def moe_from_hf(block) -> tuple[dict, dict]:
    """A Mixtral, Qwen2-MoE or DeepSeek-V3 sparse block -> ``(attributes, params)`` of ``moe``."""
    who = type(block).__name__
    _silu(who, block.experts.act_fn)
    params = _experts(block)
    state = block.state_dict()
    if isinstance(block, Qwen2MoeSparseMoeBlock):
        _silu(who, block.shared_expert.act_fn)
        params.update({spec: _t(state[hf].T) for hf, spec in SHARED})
        return {"top_k": block.gate.top_k, "renormalize": bool(block.gate.norm_topk_prob)}, params
    if isinstance(block, DeepseekV3MoE):
        _silu(who, block.shared_experts.act_fn)
        g = block.gate
        params.update({spec: _t(state[hf].T) for hf, spec in DEEPSEEK_SHARED})
        params["router.correction_bias"] = _t(g.e_score_correction_bias).to(params["router.w"].dtype)
        return {"top_k": g.top_k, "scoring": "sigmoid", "renormalize": bool(g.norm_topk_prob),
                "eps": 1e-20, "n_group": g.num_group, "topk_group": g.topk_group,
                "routed_scaling_factor": float(g.routed_scaling_factor)}, params
    return {"top_k": block.top_k, "renormalize": True}, params


def _attributes(attributes: dict, who: str, fixed: dict) -> tuple[int, bool]:
    unknown = sorted(set(attributes) - {"top_k", "renormalize", "eps", "group_score", *FIXED})
    if unknown:
        raise ConfigError(f"{who}: unknown attributes {unknown}")
    if attributes.get("n_group", 1) > 1 and attributes.get("group_score", "sum_top2") != "sum_top2":
        raise ConfigError(f"{who}: group_score={attributes['group_score']!r}: its router scores "
                          f"a group by the sum of its top two ('sum_top2'; DeepSeek-V2's 'max' "
                          f"is DeepseekV2Moe, hf_deepseek_v2.py)")
    for name, value in fixed.items():
        if attributes.get(name, FIXED.get(name, 1e-20)) != value:
            raise ConfigError(f"{who} has no equivalent of {name}={attributes[name]!r} "
                              f"(only {value!r})")
    return attributes["top_k"], bool(attributes.get("renormalize", False))


def _shapes(p, who: str) -> tuple[int, int, int]:
    for path in p.keys():
        value = p.require(path)
        if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
            raise ParameterError(f"{who}: parameter {p.path(path)!r} must be a floating "
                                 f"torch.Tensor, got {type(value).__name__}")
    d, e = p.require("router.w").shape
    w_gate = p.require("experts.w_gate", (e, d, None))
    f = w_gate.shape[2]
    p.require("experts.w_up", (e, d, f))
    p.require("experts.w_down", (e, f, d))
    return d, e, f


def _kind(p, attributes: dict) -> str:
    """DeepSeek-V3 for sigmoid scoring, a correction bias or an ungated shared expert;
    Qwen2-MoE for a gated shared expert; Mixtral otherwise."""
    shared, gated = "shared.w_gate" in p, "shared_gate.w" in p
    if attributes.get("scoring") == "sigmoid" or "router.correction_bias" in p \
            or (shared and not gated):
        return "DeepseekV3MoE"
    return "Qwen2MoeSparseMoeBlock" if shared or gated else "MixtralSparseMoeBlock"


def _deepseek(p, attributes, d, e, f) -> DeepseekV3MoE:
    who = "DeepseekV3MoE"
    if "shared_gate.w" in p:
        raise ParameterError(f"{who}: its shared experts are ungated; 'shared_gate.w' has no "
                             f"equivalent")
    if "shared.w_gate" not in p:
        raise ParameterError(f"{who} always has shared experts: missing 'shared.w_gate'")
    fixed = {"scoring": "sigmoid"}
    if attributes.get("renormalize", False):
        fixed["eps"] = 1e-20  # its denominator's epsilon
    top_k, renormalize = _attributes(attributes, who, fixed)
    fs = p.require("shared.w_gate", (d, None)).shape[1]
    if fs % f:
        raise ParameterError(f"{who}: the shared experts' width {fs} (shared.w_gate) must be "
                             f"a multiple n_shared_experts * F of the experts' F = {f}")
    config = DeepseekV3Config(hidden_size=d, n_routed_experts=e, num_experts_per_tok=top_k,
                              moe_intermediate_size=f, n_shared_experts=fs // f,
                              n_group=attributes.get("n_group", 1),
                              topk_group=attributes.get("topk_group", 1),
                              norm_topk_prob=renormalize, hidden_act="silu",
                              routed_scaling_factor=attributes.get("routed_scaling_factor", 1.0))
    return DeepseekV3MoE(config)


def moe_to_hf(params, attributes: dict):
    """``moe`` parameters and attributes -> a ``MixtralSparseMoeBlock`` (no shared expert;
    renormalize must be True), a ``Qwen2MoeSparseMoeBlock`` (``shared.*`` and
    ``shared_gate.w``; renormalize is ``norm_topk_prob``) or a ``DeepseekV3MoE`` (sigmoid
    scoring, a correction bias or ungated ``shared.*``), in eval mode."""
    p = params_of(params)
    who = _kind(p, attributes)
    d, e, f = _shapes(p, who)
    w_router = p.require("router.w")
    if who == "DeepseekV3MoE":
        block = _deepseek(p, attributes, d, e, f)
        shared_table = DEEPSEEK_SHARED
    elif who == "Qwen2MoeSparseMoeBlock":
        top_k, renormalize = _attributes(attributes, who, FIXED)
        if "shared.w_gate" not in p:
            raise ParameterError(f"{who}: 'shared_gate.w' without a shared expert: missing "
                                 f"'shared.w_gate'")
        fs = p.require("shared.w_gate", (d, None)).shape[1]
        config = Qwen2MoeConfig(hidden_size=d, num_experts=e, num_experts_per_tok=top_k,
                                moe_intermediate_size=f, shared_expert_intermediate_size=fs,
                                norm_topk_prob=renormalize, hidden_act="silu")
        block, shared_table = Qwen2MoeSparseMoeBlock(config), SHARED
    else:
        top_k, renormalize = _attributes(attributes, who, FIXED)
        if not renormalize:
            raise ConfigError(f"{who} always renormalises the top-k weights: renormalize=False "
                              f"has no equivalent (Qwen2-MoE's norm_topk_prob does)")
        config = MixtralConfig(hidden_size=d, num_local_experts=e, num_experts_per_tok=top_k,
                               intermediate_size=f, hidden_act="silu", router_jitter_noise=0.0)
        block, shared_table = MixtralSparseMoeBlock(config), []
    state = {"gate.weight": w_router.T,
             "experts.gate_up_proj": torch.cat([p.require("experts.w_gate"),
                                                p.require("experts.w_up")], dim=2).transpose(1, 2),
             "experts.down_proj": p.require("experts.w_down").transpose(1, 2)}
    if shared_table:
        fs = p.require("shared.w_gate").shape[1]
        shapes = {"shared.w_up": (d, fs), "shared.w_down": (fs, d), "shared_gate.w": (d, 1)}
        state.update({hf: p.require(spec, shapes.get(spec)).T for hf, spec in shared_table})
    if who == "DeepseekV3MoE":
        bias = p.get("router.correction_bias", (e,))
        state["gate.e_score_correction_bias"] = (torch.zeros(e, dtype=w_router.dtype)
                                                 if bias is None else bias)
    block = block.to(device=w_router.device, dtype=w_router.dtype)
    block.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=True)
    return block.eval()


def moe_forward(block, x) -> torch.Tensor:
    """``y`` of ``moe`` for ``block`` on the tokens ``x`` (N, D) (passed as (1, N, D))."""
    who = type(block).__name__
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ShapeError(f"{who}: x must be a (N, D) torch.Tensor, got "
                         f"{tuple(getattr(x, 'shape', ()))}")
    with torch.no_grad():
        return block(x[None])[0]
