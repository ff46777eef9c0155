"""Converters between the spec's ``moe`` and transformers' sparse MoE blocks (registered in
``hf.py``'s ``from_hf``/``to_hf``/``forward``):

- ``MixtralSparseMoeBlock`` -> ``moe``: softmax router, top ``num_experts_per_tok``,
  ``renormalize=True`` (always), SwiGLU experts, no shared expert;
- ``Qwen2MoeSparseMoeBlock`` -> ``moe``: ``renormalize=norm_topk_prob``, plus the shared
  expert (``shared_expert``, width ``shared_expert_intermediate_size``) times
  ``sigmoid(shared_expert_gate(x))``.

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
from transformers import MixtralConfig, Qwen2MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from .._checks import params_of

SPEC_FUNCTION = {"MixtralSparseMoeBlock": "moe", "Qwen2MoeSparseMoeBlock": "moe"}

# the router attributes neither block can express, with the only value each takes
FIXED = {"scoring": "softmax", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0}
SHARED = [("shared_expert.gate_proj.weight", "shared.w_gate"),
          ("shared_expert.up_proj.weight", "shared.w_up"),
          ("shared_expert.down_proj.weight", "shared.w_down"),
          ("shared_expert_gate.weight", "shared_gate.w")]
MOE_CLASSES = (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock)


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
    """A Mixtral or Qwen2-MoE sparse block -> ``(attributes, params)`` of ``moe``."""
    who = type(block).__name__
    _silu(who, block.experts.act_fn)
    params = _experts(block)
    if isinstance(block, Qwen2MoeSparseMoeBlock):
        _silu(who, block.shared_expert.act_fn)
        state = block.state_dict()
        params.update({spec: _t(state[hf].T) for hf, spec in SHARED})
        attributes = {"top_k": block.gate.top_k, "renormalize": bool(block.gate.norm_topk_prob)}
    else:
        attributes = {"top_k": block.top_k, "renormalize": True}
    return attributes, params


def _attributes(attributes: dict, who: str) -> tuple[int, bool]:
    unknown = sorted(set(attributes) - {"top_k", "renormalize", "eps", *FIXED})
    if unknown:
        raise ConfigError(f"{who}: unknown attributes {unknown}")
    for name, value in FIXED.items():
        if attributes.get(name, value) != value:
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


def moe_to_hf(params, attributes: dict):
    """``moe`` parameters and attributes -> a ``MixtralSparseMoeBlock`` (no shared expert;
    renormalize must be True) or a ``Qwen2MoeSparseMoeBlock`` (``shared.*`` and
    ``shared_gate.w`` given; renormalize is ``norm_topk_prob``), in eval mode."""
    p = params_of(params)
    shared = "shared.w_gate" in p
    who = "Qwen2MoeSparseMoeBlock" if shared else "MixtralSparseMoeBlock"
    top_k, renormalize = _attributes(attributes, who)
    if "router.correction_bias" in p:
        raise ParameterError(f"{who} has no router.correction_bias (DeepSeek-V3's)")
    d, e, f = _shapes(p, who)
    w_router = p.require("router.w")
    if shared:
        if "shared_gate.w" not in p:
            raise ParameterError(f"{who}: an ungated shared expert (DeepSeek-V3's) has no "
                                 f"transformers Qwen2-MoE equivalent: missing 'shared_gate.w'")
        fs = p.require("shared.w_gate", (d, None)).shape[1]
        config = Qwen2MoeConfig(hidden_size=d, num_experts=e, num_experts_per_tok=top_k,
                                moe_intermediate_size=f, shared_expert_intermediate_size=fs,
                                norm_topk_prob=renormalize, hidden_act="silu")
        block = Qwen2MoeSparseMoeBlock(config)
    else:
        if not renormalize:
            raise ConfigError(f"{who} always renormalises the top-k weights: renormalize=False "
                              f"has no equivalent (Qwen2-MoE's norm_topk_prob does)")
        config = MixtralConfig(hidden_size=d, num_local_experts=e, num_experts_per_tok=top_k,
                               intermediate_size=f, hidden_act="silu", router_jitter_noise=0.0)
        block = MixtralSparseMoeBlock(config)
    state = {"gate.weight": w_router.T,
             "experts.gate_up_proj": torch.cat([p.require("experts.w_gate"),
                                                p.require("experts.w_up")], dim=2).transpose(1, 2),
             "experts.down_proj": p.require("experts.w_down").transpose(1, 2)}
    if shared:
        shapes = {"shared.w_up": (d, fs), "shared.w_down": (fs, d), "shared_gate.w": (d, 1)}
        state.update({hf: p.require(spec, shapes.get(spec)).T for hf, spec in SHARED})
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
