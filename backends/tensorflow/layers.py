"""Transformer layers and stacks: encoder layer, decoder layer, N-layer encoder and
decoder, in post-norm (the paper) and pre-norm (GPT-2) arrangements."""

from __future__ import annotations

from attnspec.spec.trace import record, scope

from .. import _checks as check
from ._core import floating
from .feedforward import feedforward
from .multihead import mha
from .norm import layer_norm

NORMS = ("post", "pre")


def _sublayer(x, f, p, norm_name: str, norm: str, eps):
    """post: LN(x + f(x));  pre: x + f(LN(x))."""
    if norm == "post":
        return layer_norm(x + f(x), eps=eps, params=p.scope(norm_name))
    return x + f(layer_norm(x, eps=eps, params=p.scope(norm_name)))


def _attention(name: str, memory, mask, heads: int, p, trace):
    """The sublayer MHA(h, memory, memory) (memory None: self-attention), traced as name.*."""
    def f(h):
        p.scope(name).require("w_o", (None, h.shape[-1]))  # the output re-enters the residual
        kv = h if memory is None else memory
        out, weights = mha(h, kv, kv, mask, num_heads=heads, params=p.scope(name))
        record(trace, f"{name}.weights", weights)
        record(trace, f"{name}.output", out)
        return out
    return f


def _ffn(activation: str, p, trace):
    def f(h):
        out = feedforward(h, activation=activation, params=p.scope("ffn"))
        record(trace, "ffn.output", out)
        return out
    return f


def _layer_checks(x, num_heads, norm):
    x = floating("x", x)
    check.rank("x", x, min_rank=3, max_rank=3)
    check.choice("norm", norm, NORMS)
    return x, check.integer("num_heads", num_heads, lo=1)


def encoder_layer(x, mask=None, *, num_heads, norm="post", eps=1e-5, activation="relu", params,
                  trace=None):
    """post: r1 = LN1(x + MHA(x, x, x)), y = LN2(r1 + FFN(r1));
    pre:  r1 = x + MHA(LN1(x), ...),   y = r1 + FFN(LN2(r1)).
    """
    x, heads = _layer_checks(x, num_heads, norm)
    p = check.params_of(params)
    r1 = _sublayer(x, _attention("self_attn", None, mask, heads, p, trace), p, "norm1", norm, eps)
    record(trace, "residual1.output", r1)
    r2 = _sublayer(r1, _ffn(activation, p, trace), p, "norm2", norm, eps)
    record(trace, "residual2.output", r2)
    return r2


def _memory_checks(x, memory):
    memory = floating("memory", memory)
    check.rank("memory", memory, min_rank=3, max_rank=3)
    check.same("batch size", **{"x.shape[0]": x.shape[0], "memory.shape[0]": memory.shape[0]})
    check.same("model width", **{"x.shape[-1]": x.shape[-1],
                                 "memory.shape[-1]": memory.shape[-1]})
    return memory


def decoder_layer(x, memory, self_mask=None, memory_mask=None, *, num_heads, norm="post",
                  eps=1e-5, activation="relu", params, trace=None):
    """post: r1 = LN1(x + SelfMHA(x)), r2 = LN2(r1 + MHA(r1, memory, memory)),
    y = LN3(r2 + FFN(r2)); pre: r1 = x + SelfMHA(LN1(x)), r2 = r1 + MHA(LN2(r1), memory,
    memory), y = r2 + FFN(LN3(r2)).
    """
    x, heads = _layer_checks(x, num_heads, norm)
    memory = _memory_checks(x, memory)
    p = check.params_of(params)
    r1 = _sublayer(x, _attention("self_attn", None, self_mask, heads, p, trace), p, "norm1",
                   norm, eps)
    record(trace, "residual1.output", r1)
    r2 = _sublayer(r1, _attention("cross_attn", memory, memory_mask, heads, p, trace), p,
                   "norm2", norm, eps)
    record(trace, "residual2.output", r2)
    r3 = _sublayer(r2, _ffn(activation, p, trace), p, "norm3", norm, eps)
    record(trace, "residual3.output", r3)
    return r3


def _stack(layer, x, num_layers, norm, eps, params, trace, **kw):
    """h_{i+1} = layer_i(h_i) over layers.<i>.*; pre-norm ends with final_norm."""
    n = check.integer("num_layers", num_layers, lo=1)
    check.choice("norm", norm, NORMS)
    p = check.params_of(params)
    h = x
    for i in range(n):
        h = layer(h, norm=norm, eps=eps, params=p.scope(f"layers.{i}"),
                  trace=scope(trace, f"layers.{i}"), **kw)
    if norm == "pre":
        h = layer_norm(h, eps=eps, params=p.scope("final_norm"))
        record(trace, "final_norm.output", h)
    return h


def encoder(x, mask=None, *, num_layers, num_heads, norm="post", eps=1e-5, activation="relu",
            params, trace=None):
    """h_{i+1} = EncoderLayer_i(h_i, mask); y = h_N (post) or LN_final(h_N) (pre)."""
    x, _ = _layer_checks(x, num_heads, norm)
    return _stack(encoder_layer, x, num_layers, norm, eps, params, trace, mask=mask,
                  num_heads=num_heads, activation=activation)


def decoder(x, memory, self_mask=None, memory_mask=None, *, num_layers, num_heads, norm="post",
            eps=1e-5, activation="relu", params, trace=None):
    """h_{i+1} = DecoderLayer_i(h_i, memory, self_mask, memory_mask); y = h_N or LN_final(h_N)."""
    x, _ = _layer_checks(x, num_heads, norm)
    memory = _memory_checks(x, memory)
    return _stack(decoder_layer, x, num_layers, norm, eps, params, trace, memory=memory,
                  self_mask=self_mask, memory_mask=memory_mask, num_heads=num_heads,
                  activation=activation)
