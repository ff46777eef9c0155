"""What every transformers converter shares (hf.py and the hf_*.py beside it): the layer
tables' helpers, state-dict moves, attribute and parameter checks, the mask conversion.
The converters import this module; it imports none of them."""

from __future__ import annotations

import torch
from attnspec.spec.errors import ConfigError, DTypeError, ParameterError, ShapeError

from .. import _checks
from .._checks import params_of

# transformers' activation names (ACT2FN) -> the spec's; to_hf writes the first of each.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}
_TO_HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}

LLAMA = [
    ("input_layernorm.weight", "attn_norm.gamma", False),
    ("self_attn.q_proj.weight", "attn.w_q", True),
    ("self_attn.k_proj.weight", "attn.w_k", True),
    ("self_attn.v_proj.weight", "attn.w_v", True),
    ("self_attn.o_proj.weight", "attn.w_o", True),
    ("post_attention_layernorm.weight", "ffn_norm.gamma", False),
    ("mlp.gate_proj.weight", "ffn.w_gate", True),
    ("mlp.up_proj.weight", "ffn.w_up", True),
    ("mlp.down_proj.weight", "ffn.w_down", True),
]


def _t(x):
    return x.detach().clone()


def _from_state(module, table) -> dict:
    state = module.state_dict()
    return {spec: _t(state[hf].T if transposed else state[hf]) for hf, spec, transposed in table}


def _to_state(p, table, like) -> dict:
    """HF state_dict entries from spec parameters; an absent spec bias is zero."""
    state = {}
    for hf, spec, transposed in table:
        if spec.rsplit(".", 1)[-1].startswith("b_") and spec not in p:
            state[hf] = torch.zeros_like(like[hf])
            continue
        w = p.require(spec, tuple(like[hf].T.shape if transposed else like[hf].shape))
        state[hf] = w.T if transposed else w
    return state


def _load(module, state, dtype, device):
    module = module.to(device=device, dtype=dtype)
    module.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()},
                           strict=True)
    return module.eval()


def _unsupported(module: str, field: str, value, why: str):
    raise ConfigError(f"{module} with config.{field}={value!r} has no spec equivalent: {why}")


def _activation(module: str, field: str, name) -> str:
    if not isinstance(name, str) or name not in ACTIVATIONS:
        _unsupported(module, field, name, f"the spec's activations are {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _check_attributes(attributes: dict, fixed: dict, allowed: set, who: str):
    unknown = set(attributes) - allowed
    if unknown:
        raise ConfigError(f"{who}: attribute(s) {sorted(unknown)} not understood "
                          f"(expected {sorted(allowed)})")
    for name, want in fixed.items():
        if attributes.get(name, want) != want:
            raise ConfigError(f"{who} needs {name}={want!r}, got {attributes[name]!r}")


def _heads(attributes: dict, d: int, who: str) -> int:
    h = attributes.get("num_heads")
    if isinstance(h, bool) or not isinstance(h, int) or h < 1 or d % h:
        raise ConfigError(f"{who}: num_heads={h!r} must be a positive divisor of D = {d}")
    return h


def _activation_to_hf(attributes: dict, who: str) -> str:
    act = attributes.get("activation", "relu")
    if act not in _TO_HF_ACTIVATION:
        raise ConfigError(f"{who}: activation must be relu, gelu or gelu_tanh, got {act!r}")
    return _TO_HF_ACTIVATION[act]


def _eps(attributes: dict, default: float, who: str) -> float:
    return _checks.eps(attributes.get("eps", default), f"{who}: eps")


def _spec_params(params, known, who: str):
    """``params`` as a Params view, refused (ParameterError naming the path) unless every
    path is one the module has (``known``: a set, or a predicate) and every value a
    floating torch.Tensor."""
    p = params_of(params)
    for path in p.keys():
        if not (known(path) if callable(known) else path in known):
            raise ParameterError(f"{who}: unknown parameter path {p.path(path)!r}"
                                 + (f"; expected {sorted(known)}" if not callable(known) else ""))
        value = p.require(path)
        if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
            raise ParameterError(f"{who}: parameter {p.path(path)!r} must be a floating torch.Tensor, got "
                                 f"{type(value).__name__} {getattr(value, 'dtype', '')}".rstrip())
    return p


def additive_mask(mask, dtype) -> torch.Tensor:
    """Spec boolean mask (True = may attend), broadcastable to (B, H, T, S) -> HF's 4-D
    additive float mask: 0 where True, ``torch.finfo(dtype).min`` where False."""
    mask = torch.as_tensor(mask, dtype=torch.bool)
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)


def _mask(mask, x, who: str) -> torch.Tensor:
    """The spec's boolean mask, broadcastable to (B, H, T, T), or ShapeError/DTypeError."""
    mask = torch.as_tensor(mask) if not isinstance(mask, torch.Tensor) else mask
    if mask.dtype != torch.bool:
        raise DTypeError(f"{who}: mask must be boolean (True = may attend), got {mask.dtype}")
    b, t = x.shape[0], x.shape[1]
    try:
        if mask.dim() > 4:
            raise RuntimeError
        torch.broadcast_shapes(tuple(mask.shape), (b, 1, t, t))
    except RuntimeError:
        raise ShapeError(f"{who}: mask of shape {tuple(mask.shape)} does not broadcast to "
                         f"(B, H, T, T) = ({b}, H, {t}, {t})") from None
    return mask.to(x.device)


def causal_layer_inputs(x, mask, offset, window, who: str) -> tuple:
    """(keep, positions) for calling a decoder layer as its spec function is called: keep
    (T, T) or (B?, 1, T, T) bool, causal (within ``window``) ANDed with the spec's ``mask``;
    positions (1, T) = offset..offset+T-1. x must be a (B, T, D) tensor (ConfigError)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ConfigError(f"{who}: x must be a (B, T, D) torch.Tensor")
    _checks.integer("offset", offset, lo=0)
    t = x.shape[1]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    keep = j <= i
    if window is not None:
        keep = keep & (j > i - window)
    keep = keep.to(x.device)
    if mask is not None:
        keep = _mask(mask, x, who) & keep
    return keep, torch.arange(offset, offset + t, device=x.device)[None]
