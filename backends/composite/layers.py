"""Transformer layers and stacks: the residual block, encoder layer, decoder layer, N-layer
encoder and decoder, in post-norm (the paper) and pre-norm (GPT-2) arrangements."""

from __future__ import annotations

from attnspec.spec.trace import record, scope

from .. import _checks as check
from . import Composite

NORMS = ("post", "pre")


class Layers(Composite):
    EXPORTS = ("encoder_layer", "decoder_layer", "encoder", "decoder")  # and residual

    def _sublayer(self, x, f, p, norm_name: str, norm: str, eps):
        """post: LN(x + f(x));  pre: x + f(LN(x))."""
        ln = self.k.layer_norm
        if norm == "post":
            return ln(x + f(x), eps=eps, params=p.scope(norm_name))
        return x + f(ln(x, eps=eps, params=p.scope(norm_name)))

    def _attention(self, name: str, memory, mask, heads: int, p, trace):
        """The sublayer MHA(h, memory, memory) (memory None: self-attention), traced as name.*."""
        def f(h):
            p.scope(name).require("w_o", (None, h.shape[-1]))  # the output re-enters the residual
            kv = h if memory is None else memory
            out, weights = self.k.mha(h, kv, kv, mask, num_heads=heads, params=p.scope(name))
            record(trace, f"{name}.weights", weights)
            record(trace, f"{name}.output", out)
            return out
        return f

    def _ffn(self, activation: str, p, trace):
        def f(h):
            out = self.k.feedforward(h, activation=activation, params=p.scope("ffn"))
            record(trace, "ffn.output", out)
            return out
        return f

    def _layer_checks(self, x, num_heads, norm):
        x = self.ops.floating("x", x)
        check.rank("x", x, min_rank=3, max_rank=3)
        check.choice("norm", norm, NORMS)
        return x, check.integer("num_heads", num_heads, lo=1)

    def residual(self, x, *, position="post", eps=1e-5, activation="relu", params, trace=None):
        """post: y = LayerNorm(x + f(x));  pre: y = x + f(LayerNorm(x));  f = feedforward."""
        x = self.ops.floating("x", x)
        check.rank("x", x, min_rank=1)
        check.choice("position", position, NORMS)
        p = check.params_of(params)
        ffn, norm = p.scope("ffn"), p.scope("norm")
        if position == "post":
            f = self.k.feedforward(x, activation=activation, params=ffn)
            record(trace, "sublayer.output", f)
            return self.k.layer_norm(x + f, eps=eps, params=norm)
        n = self.k.layer_norm(x, eps=eps, params=norm)
        record(trace, "norm.output", n)
        f = self.k.feedforward(n, activation=activation, params=ffn)
        record(trace, "sublayer.output", f)
        return x + f

    def encoder_layer(self, x, mask=None, *, num_heads, norm="post", eps=1e-5, activation="relu",
                      params, trace=None):
        """post: r1 = LN1(x + MHA(x, x, x)), y = LN2(r1 + FFN(r1));
        pre:  r1 = x + MHA(LN1(x), ...),   y = r1 + FFN(LN2(r1)).
        """
        x, heads = self._layer_checks(x, num_heads, norm)
        p = check.params_of(params)
        attn = self._attention("self_attn", None, mask, heads, p, trace)
        r1 = self._sublayer(x, attn, p, "norm1", norm, eps)
        record(trace, "residual1.output", r1)
        r2 = self._sublayer(r1, self._ffn(activation, p, trace), p, "norm2", norm, eps)
        record(trace, "residual2.output", r2)
        return r2

    def _memory_checks(self, x, memory):
        memory = self.ops.floating("memory", memory, like=x)
        check.rank("memory", memory, min_rank=3, max_rank=3)
        check.same("batch size", **{"x.shape[0]": x.shape[0], "memory.shape[0]": memory.shape[0]})
        check.same("model width", **{"x.shape[-1]": x.shape[-1],
                                     "memory.shape[-1]": memory.shape[-1]})
        return memory

    def decoder_layer(self, x, memory, self_mask=None, memory_mask=None, *, num_heads,
                      norm="post", eps=1e-5, activation="relu", params, trace=None):
        """post: r1 = LN1(x + SelfMHA(x)), r2 = LN2(r1 + MHA(r1, memory, memory)),
        y = LN3(r2 + FFN(r2)); pre: r1 = x + SelfMHA(LN1(x)), r2 = r1 + MHA(LN2(r1), memory,
        memory), y = r2 + FFN(LN3(r2)).
        """
        x, heads = self._layer_checks(x, num_heads, norm)
        memory = self._memory_checks(x, memory)
        p = check.params_of(params)
        self_attn = self._attention("self_attn", None, self_mask, heads, p, trace)
        r1 = self._sublayer(x, self_attn, p, "norm1", norm, eps)
        record(trace, "residual1.output", r1)
        cross_attn = self._attention("cross_attn", memory, memory_mask, heads, p, trace)
        r2 = self._sublayer(r1, cross_attn, p, "norm2", norm, eps)
        record(trace, "residual2.output", r2)
        r3 = self._sublayer(r2, self._ffn(activation, p, trace), p, "norm3", norm, eps)
        record(trace, "residual3.output", r3)
        return r3

    def _stack(self, layer, x, num_layers, norm, eps, params, trace, **kw):
        """h_{i+1} = layer_i(h_i) over layers.<i>.*; pre-norm ends with final_norm."""
        n = check.integer("num_layers", num_layers, lo=1)
        check.choice("norm", norm, NORMS)
        p = check.params_of(params)
        h = x
        for i in range(n):
            h = layer(h, norm=norm, eps=eps, params=p.scope(f"layers.{i}"),
                      trace=scope(trace, f"layers.{i}"), **kw)
        if norm == "pre":
            h = self.k.layer_norm(h, eps=eps, params=p.scope("final_norm"))
            record(trace, "final_norm.output", h)
        return h

    def encoder(self, x, mask=None, *, num_layers, num_heads, norm="post", eps=1e-5,
                activation="relu", params, trace=None):
        """h_{i+1} = EncoderLayer_i(h_i, mask); y = h_N (post) or LN_final(h_N) (pre)."""
        x, _ = self._layer_checks(x, num_heads, norm)
        return self._stack(self.k.encoder_layer, x, num_layers, norm, eps, params, trace,
                           mask=mask, num_heads=num_heads, activation=activation)

    def decoder(self, x, memory, self_mask=None, memory_mask=None, *, num_layers, num_heads,
                norm="post", eps=1e-5, activation="relu", params, trace=None):
        """h_{i+1} = DecoderLayer_i(h_i, memory, self_mask, memory_mask); y = h_N or
        LN_final(h_N)."""
        x, _ = self._layer_checks(x, num_heads, norm)
        memory = self._memory_checks(x, memory)
        return self._stack(self.k.decoder_layer, x, num_layers, norm, eps, params, trace,
                           memory=memory, self_mask=self_mask, memory_mask=memory_mask,
                           num_heads=num_heads, activation=activation)
