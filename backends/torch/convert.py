"""Converters between spec parameters ``{canonical path: tensor}`` and PyTorch's built-ins.

Both directions, for ``nn.MultiheadAttention``, ``nn.LayerNorm``,
``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer`` and ``nn.GRU``. The
layout conversion happens here and nowhere else:

- PyTorch stores ``nn.Linear`` weights as (out, in) and computes ``x W^T + b``; the
  spec stores ``W`` as (in, out) and computes ``x W + b``: every weight is transposed.
- ``nn.MultiheadAttention`` packs ``W_q, W_k, W_v`` into ``in_proj_weight`` (3E, E)
  when the three input widths equal ``embed_dim`` and keeps ``q_proj_weight``... otherwise;
  head ``h`` owns rows ``h*K:(h+1)*K`` of each block, the spec's columns.
- Masks: PyTorch's boolean ``attn_mask`` / ``key_padding_mask`` mean True = *not*
  allowed; the spec's mean True = may attend. :func:`to_torch_mask` inverts.
- LayerNorm: the same equation (biased variance, eps inside the root, eps 1e-5);
  the spec's "annotated" variant has no PyTorch built-in.
- GRU: the same gate order (r, z, n) and the same reset-after form; ``weight_ih_l0``
  is (3H, I), the spec's ``w_ih`` is (I, 3H).
See spec/components/pytorch.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from attnspec.spec.errors import ConfigError, ParameterError
from torch import nn

from .._checks import params_of

ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}


def _t(x, like=None):
    x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return x.detach().clone() if like is None else x.detach().to(like).clone()


def _get(p, name):
    return p.require(name)


def to_torch_mask(mask, shape: tuple | None = None):
    """Spec mask (True = may attend, broadcastable to (B, H, T, S)) -> PyTorch's boolean
    ``attn_mask`` (True = masked out). With ``shape=(B, H, T, S)`` it is expanded and
    reshaped to the (B*H, T, S) that ``nn.MultiheadAttention`` takes."""
    m = ~torch.as_tensor(mask, dtype=torch.bool)
    if shape is None:
        return m
    b, h, t, s = shape
    return m.expand(b, h, t, s).reshape(b * h, t, s)


# -- multi-head attention -----------------------------------------------------------------


def mha_to_torch(params, *, num_heads: int, batch_first: bool = True) -> nn.MultiheadAttention:
    """Spec ``mha`` parameters -> ``nn.MultiheadAttention`` (embed_dim = H*K = Dq = Do).

    PyTorch requires H*K = H*V = query width = output width and either all biases or none.
    """
    p = params_of(params)
    w_q, w_k, w_v, w_o = (_get(p, n) for n in ("w_q", "w_k", "w_v", "w_o"))
    d_q, e = w_q.shape
    if not (w_v.shape[1] == e and w_o.shape == (e, d_q) and d_q == e):
        raise ConfigError(f"nn.MultiheadAttention needs H*K = H*V = query width = output width; "
                          f"got w_q {tuple(w_q.shape)}, w_v {tuple(w_v.shape)}, "
                          f"w_o {tuple(w_o.shape)}")
    has_bias = [n in p for n in ("b_q", "b_k", "b_v", "b_o")]
    if any(has_bias) and not all(has_bias):
        raise ConfigError("nn.MultiheadAttention has all four biases or none; "
                          f"the parameters have {[n for n, b in zip('qkvo', has_bias) if b]}")
    mod = nn.MultiheadAttention(e, num_heads, bias=all(has_bias), batch_first=batch_first,
                                kdim=w_k.shape[0], vdim=w_v.shape[0], device=w_q.device,
                                dtype=w_q.dtype)
    with torch.no_grad():
        if mod._qkv_same_embed_dim:
            mod.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))
        else:
            mod.q_proj_weight.copy_(w_q.T)
            mod.k_proj_weight.copy_(w_k.T)
            mod.v_proj_weight.copy_(w_v.T)
        if all(has_bias):
            mod.in_proj_bias.copy_(torch.cat([_get(p, "b_q"), _get(p, "b_k"), _get(p, "b_v")]))
            mod.out_proj.bias.copy_(_get(p, "b_o"))
        mod.out_proj.weight.copy_(w_o.T)
    return mod


def mha_from_torch(mod: nn.MultiheadAttention, prefix: str = "") -> dict:
    """``nn.MultiheadAttention`` -> spec ``mha`` parameters (transposed, unpacked)."""
    e = mod.embed_dim
    if mod._qkv_same_embed_dim:
        w_q, w_k, w_v = mod.in_proj_weight.detach().split(e, dim=0)
    else:
        w_q, w_k, w_v = mod.q_proj_weight, mod.k_proj_weight, mod.v_proj_weight
    out = {"w_q": w_q.T, "w_k": w_k.T, "w_v": w_v.T, "w_o": mod.out_proj.weight.T}
    if mod.in_proj_bias is not None:
        b_q, b_k, b_v = mod.in_proj_bias.detach().split(e)
        out.update(b_q=b_q, b_k=b_k, b_v=b_v, b_o=mod.out_proj.bias)
    if mod.bias_k is not None:
        raise ConfigError("add_bias_kv=True has no spec equivalent")
    order = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")
    return {prefix + n: _t(out[n]) for n in order if n in out}


# -- LayerNorm --------------------------------------------------------------------------


def layer_norm_to_torch(params, *, eps: float = 1e-5) -> nn.LayerNorm:
    p = params_of(params)
    gamma, beta = _get(p, "gamma"), _get(p, "beta")
    mod = nn.LayerNorm(gamma.shape[0], eps=eps, device=gamma.device, dtype=gamma.dtype)
    with torch.no_grad():
        mod.weight.copy_(gamma)
        mod.bias.copy_(beta)
    return mod


def layer_norm_from_torch(mod: nn.LayerNorm, prefix: str = "") -> dict:
    if mod.weight is None or len(mod.normalized_shape) != 1:
        raise ConfigError("only nn.LayerNorm(D, elementwise_affine=True) maps to the spec")
    beta = mod.bias if mod.bias is not None else torch.zeros_like(mod.weight)
    return {prefix + "gamma": _t(mod.weight), prefix + "beta": _t(beta)}


# -- Transformer layers --------------------------------------------------------------------


def _activation(activation: str):
    if activation == "gelu_tanh":
        return lambda h: F.gelu(h, approximate="tanh")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be relu, gelu or gelu_tanh, got {activation!r}")
    return activation


def _set_linear(lin: nn.Linear, w, b):
    with torch.no_grad():
        lin.weight.copy_(w.T)
        lin.bias.copy_(b)


def _load_sublayers(mod, p, names):
    for torch_name, spec_name in names:
        setattr(mod, torch_name, _attn_or_norm(getattr(mod, torch_name), p.scope(spec_name)))
    _set_linear(mod.linear1, _get(p, "ffn.w1"), _get(p, "ffn.b1"))
    _set_linear(mod.linear2, _get(p, "ffn.w2"), _get(p, "ffn.b2"))


def _attn_or_norm(mod, p):
    with torch.no_grad():
        if isinstance(mod, nn.LayerNorm):
            mod.weight.copy_(_get(p, "gamma"))
            mod.bias.copy_(_get(p, "beta"))
        else:
            fresh = mha_to_torch(p, num_heads=mod.num_heads, batch_first=mod.batch_first)
            state = fresh.state_dict()
            for name, value in mod.state_dict().items():  # spec without biases: zero biases
                state.setdefault(name, torch.zeros_like(value))
            mod.load_state_dict(state)
    return mod


def encoder_layer_to_torch(params, *, num_heads: int, norm: str = "post", eps: float = 1e-5,
                           activation: str = "relu") -> nn.TransformerEncoderLayer:
    """Spec ``encoder_layer`` parameters -> ``nn.TransformerEncoderLayer`` (batch_first,
    dropout 0, ``norm_first`` = (norm == "pre"))."""
    p = params_of(params)
    w1 = _get(p, "ffn.w1")
    d, f = w1.shape
    mod = nn.TransformerEncoderLayer(d, num_heads, dim_feedforward=f, dropout=0.0,
                                     activation=_activation(activation), layer_norm_eps=eps,
                                     batch_first=True, norm_first=(norm == "pre"),
                                     device=w1.device, dtype=w1.dtype)
    _load_sublayers(mod, p, [("self_attn", "self_attn"), ("norm1", "norm1"),
                             ("norm2", "norm2")])
    return mod.eval()


def encoder_layer_from_torch(mod: nn.TransformerEncoderLayer, prefix: str = "") -> dict:
    out = mha_from_torch(mod.self_attn, prefix + "self_attn.")
    out.update(layer_norm_from_torch(mod.norm1, prefix + "norm1."))
    out.update(_ffn_from_torch(mod, prefix))
    out.update(layer_norm_from_torch(mod.norm2, prefix + "norm2."))
    return out


def _ffn_from_torch(mod, prefix):
    return {prefix + "ffn.w1": _t(mod.linear1.weight.T), prefix + "ffn.b1": _t(mod.linear1.bias),
            prefix + "ffn.w2": _t(mod.linear2.weight.T), prefix + "ffn.b2": _t(mod.linear2.bias)}


def decoder_layer_to_torch(params, *, num_heads: int, norm: str = "post", eps: float = 1e-5,
                           activation: str = "relu") -> nn.TransformerDecoderLayer:
    """Spec ``decoder_layer`` parameters -> ``nn.TransformerDecoderLayer`` (``cross_attn`` is
    PyTorch's ``multihead_attn``)."""
    p = params_of(params)
    w1 = _get(p, "ffn.w1")
    d, f = w1.shape
    mod = nn.TransformerDecoderLayer(d, num_heads, dim_feedforward=f, dropout=0.0,
                                     activation=_activation(activation), layer_norm_eps=eps,
                                     batch_first=True, norm_first=(norm == "pre"),
                                     device=w1.device, dtype=w1.dtype)
    _load_sublayers(mod, p, [("self_attn", "self_attn"), ("multihead_attn", "cross_attn"),
                             ("norm1", "norm1"), ("norm2", "norm2"), ("norm3", "norm3")])
    return mod.eval()


def decoder_layer_from_torch(mod: nn.TransformerDecoderLayer, prefix: str = "") -> dict:
    out = mha_from_torch(mod.self_attn, prefix + "self_attn.")
    out.update(layer_norm_from_torch(mod.norm1, prefix + "norm1."))
    out.update(mha_from_torch(mod.multihead_attn, prefix + "cross_attn."))
    out.update(layer_norm_from_torch(mod.norm2, prefix + "norm2."))
    out.update(_ffn_from_torch(mod, prefix))
    out.update(layer_norm_from_torch(mod.norm3, prefix + "norm3."))
    return out


# -- GRU ------------------------------------------------------------------------------------


def gru_to_torch(params) -> nn.GRU:
    """Spec ``gru`` parameters -> one-layer, unidirectional ``nn.GRU(batch_first=True)``.
    Absent spec biases are zero (PyTorch's GRU then has zero biases)."""
    p = params_of(params)
    w_ih, w_hh = _get(p, "w_ih"), _get(p, "w_hh")
    i, h3 = w_ih.shape
    mod = nn.GRU(i, h3 // 3, batch_first=True, device=w_ih.device, dtype=w_ih.dtype)
    with torch.no_grad():
        mod.weight_ih_l0.copy_(w_ih.T)
        mod.weight_hh_l0.copy_(w_hh.T)
        for name in ("b_ih", "b_hh"):
            b = p.get(name)
            getattr(mod, f"bias_{name[2:]}_l0").copy_(0 if b is None else b)
    return mod


def gru_from_torch(mod: nn.GRU | nn.GRUCell, prefix: str = "") -> dict:
    if isinstance(mod, nn.GRU) and (mod.num_layers != 1 or mod.bidirectional):
        raise ParameterError("only a one-layer unidirectional nn.GRU maps to the spec's gru")
    sfx = "_l0" if isinstance(mod, nn.GRU) else ""
    out = {prefix + "w_ih": _t(getattr(mod, "weight_ih" + sfx).T),
           prefix + "w_hh": _t(getattr(mod, "weight_hh" + sfx).T)}
    if getattr(mod, "bias_ih" + sfx, None) is not None:
        out[prefix + "b_ih"] = _t(getattr(mod, "bias_ih" + sfx))
        out[prefix + "b_hh"] = _t(getattr(mod, "bias_hh" + sfx))
    return out
