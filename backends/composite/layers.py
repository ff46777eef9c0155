"""Transformer layers and stacks: the residual block, encoder layer, decoder layer, N-layer
encoder and decoder, in post-norm (the paper) and pre-norm (GPT-2) arrangements; the
Llama-style decoder layer (pre-RMSNorm, RoPE, grouped-query attention, SwiGLU)."""

from __future__ import annotations

from attnspec.spec.errors import ConfigError, ShapeError
from attnspec.spec.trace import record, scope

from .. import _checks as check
from .._rope import SCALING_KEYS
from . import Composite

NORMS = ("post", "pre")


class Layers(Composite):
    EXPORTS = ("encoder_layer", "decoder_layer", "encoder", "decoder",
               "llama_layer", "parallel_layer")  # and residual

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

    # -- the Llama-style layer ------------------------------------------------------------

    def llama_layer(self, x, mask=None, *, num_heads, num_kv_heads=None, eps=1e-6,
                    rope_base=10000.0, window=None, offset=0, attention_bias=False,
                    rope_scaling=None, rotary_dim=None, params, trace=None):
        """h = x + W_o Attn(RoPE(RMSNorm(x) W_q), RoPE(RMSNorm(x) W_k), RMSNorm(x) W_v);
        y = h + W_down(silu(RMSNorm(h) W_gate) * RMSNorm(h) W_up); causal (within window),
        RoPE "half" at positions offset..offset+T-1, query head h reads kv head h // (H/H_kv).
        attention_bias (Qwen2): + b_q, b_k, b_v after the projections, no output bias.
        rope_scaling (rope's ``scaling``: transformers' rope_parameters) and rotary_dim (the
        first R features of a head rotated) go to rope as they are.
        """
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        window = self.llama_window(window)
        offset = check.integer("offset", offset, lo=0)
        keep = self.llama_keep(mask, b, t, t, window, x)  # (B?, 1, T, T)
        bias = check.flag("attention_bias", attention_bias)
        rope = self.llama_rope(rope_scaling, rotary_dim)
        y, _ = self.llama_block(x, keep, heads, kv, eps, rope_base, offset,
                                check.params_of(params), trace, bias=bias, rope=rope)
        return y

    @staticmethod
    def llama_rope(rope_scaling, rotary_dim) -> dict:
        """rope's extra attributes for the Llama layers: {} without scaling and rotary_dim (so a
        backend's rope is called exactly as before), else rotary_dim (an even integer >= 0;
        at most K, checked by rope) and scaling (a dict of rope_frequencies' attributes)."""
        extra = {}
        if rotary_dim is not None:
            r = check.integer("rotary_dim", rotary_dim, lo=0)
            if r % 2:
                raise ConfigError(f"rotary_dim must be even, got {r}")
            extra["rotary_dim"] = r
        if rope_scaling is not None:
            if not isinstance(rope_scaling, dict):
                raise ConfigError(f"rope_scaling must be a dict of rope_parameters or None, got "
                                  f"{rope_scaling!r}")
            unknown = sorted(set(rope_scaling) - set(SCALING_KEYS))
            if unknown:
                raise ConfigError(f"rope_scaling has unknown keys {unknown}; known: "
                                  f"{list(SCALING_KEYS)}")
            extra["scaling"] = dict(rope_scaling)
        return extra

    @staticmethod
    def llama_heads(num_heads, num_kv_heads) -> tuple:
        """(H, H_kv): H_kv (None: H) divides H."""
        heads = check.integer("num_heads", num_heads, lo=1)
        if num_kv_heads is None:
            return heads, heads
        kv = check.integer("num_kv_heads", num_kv_heads, lo=1)
        check.kv_divides(heads, kv)
        return heads, kv

    @staticmethod
    def llama_window(window):
        return None if window is None else check.integer("window", window, lo=1)

    def llama_keep(self, mask, b: int, t: int, s: int, window, like):
        """keep[b, 0, i, j] = mask and j <= p (and p - window < j), p = i + S - T: the causal
        mask (or sliding window), bottom-right aligned, on like's device, ANDed with mask."""
        k = self.k
        m = (k.causal_mask(t=t, s=s) if window is None
             else k.sliding_window_mask(t=t, s=s, window=window))  # (T, S)
        m = self.ops.cast(m, self.ops.falses((), like=like))
        if mask is None:
            return m
        check.broadcastable("mask", mask, (b, 1, t, s))
        return mask & m  # (B, 1, T, S)

    def project(self, h, p, name: str, d_out=None):
        """h W over the last axis, W = p[name] of shape (D, d_out); no bias."""
        w = self.ops.floating(p.path(name), p.require(name, (h.shape[-1], d_out)), like=h)
        return self.ops.matmul(h, w)

    def llama_qkv(self, n1, p, heads: int, kv: int, base, offset: int, bias=False, rope=None):
        """Queries (B, H, t, K) and keys (B, H_kv, t, K) rotated at positions offset..,
        values (B, H_kv, t, K), from the normed input n1 (B, t, D); with bias, b_q, b_k, b_v
        added before RoPE; rope: rope's rotary_dim and scaling (llama_rope), if any."""
        ops = self.ops
        w_q = check.shape(p.require("w_q", (n1.shape[-1], None)))
        width = check.divides(f"query width {p.path('w_q')}.shape[1]", heads, w_q[1], "H*K")
        if width % 2:
            raise ShapeError(f"RoPE needs an even head width: {p.path('w_q')} of shape {w_q} "
                             f"with num_heads={heads} gives K={width}")
        proj = self.project_bias if bias else self.project
        q = ops.split_heads(proj(n1, p, "w_q", heads * width), heads)  # (B, H, t, K)
        k = ops.split_heads(proj(n1, p, "w_k", kv * width), kv)  # (B, H_kv, t, K)
        v = ops.split_heads(proj(n1, p, "w_v", kv * width), kv)  # (B, H_kv, t, K)
        rot = {"offset": offset, "base": base, "convention": "half", **(rope or {})}
        return self.k.rope(q, **rot), self.k.rope(k, **rot), v

    def project_bias(self, h, p, name: str, d_out):
        """h W + b over the last axis, W = p[name] (D, d_out), b = p["b" + name[1:]] (d_out,)."""
        b = p.require("b" + name[1:], (d_out,))
        return self.project(h, p, name, d_out) + self.ops.floating(p.path("b" + name[1:]), b, like=h)

    def llama_attention(self, n1, keep, heads: int, kv: int, base, offset: int, p, trace,
                        past=None, bias=False, rope=None):
        """W_o concat_h sdpa(Q_h, K_g, V_g, keep) over the past keys/values (B, H_kv, n, K)
        and the new ones; returns (output (B, t, D), (keys, values) (B, H_kv, n+t, K))."""
        ops = self.ops
        q, k, v = self.llama_qkv(n1, p, heads, kv, base, offset, bias, rope)
        if past is not None:
            k = ops.concat([past[0], k], axis=2)  # (B, H_kv, n+t, K)
            v = ops.concat([past[1], v], axis=2)  # (B, H_kv, n+t, K)
        out, weights = self.k.sdpa(q, k, v, keep, num_kv_heads=kv)  # (B, H, t, K), (B, H, t, S)
        record(trace, "attn.weights", weights)
        o = self.project(ops.merge_heads(out), p, "w_o", n1.shape[-1])  # (B, t, D)
        record(trace, "attn.output", o)
        return o, (k, v)

    def llama_block(self, x, keep, heads: int, kv: int, eps, base, offset: int, p, trace,
                    past=None, bias=False, rope=None):
        """The layer on x (B, t, D): (y, (keys, values)) (see llama_attention)."""
        n1 = self.k.rms_norm(x, eps=eps, params=p.scope("attn_norm"))
        a, kv_cache = self.llama_attention(n1, keep, heads, kv, base, offset, p.scope("attn"),
                                           trace, past, bias, rope)
        r1 = x + a
        record(trace, "residual1.output", r1)
        n2 = self.k.rms_norm(r1, eps=eps, params=p.scope("ffn_norm"))
        f = self.k.gated_feedforward(n2, activation="silu", params=p.scope("ffn"))
        record(trace, "ffn.output", f)
        y = r1 + f
        record(trace, "residual2.output", y)
        return y, kv_cache

    # -- the parallel-residual layer (GPT-NeoX, Falcon) ---------------------------------------

    def parallel_layer(self, x, mask=None, *, num_heads, num_kv_heads=None, num_norms=2,
                       eps=1e-5, activation="gelu", rope_base=10000.0, offset=0,
                       rotary_dim=None, params, trace=None):
        """y = x + A(LN_1(x)) + F(LN_2(x)) (num_norms = 1: LN_2 = LN_1), both branches on x;
        A = W_o Attn(RoPE(n W_q + b_q), RoPE(n W_k + b_k), n W_v + b_v) + b_o, causal, RoPE
        "half" at positions offset..offset+T-1 (rotary_dim R: the first R features of a head,
        GPT-NeoX's rotary_pct), query head h reads kv head h // (H/H_kv);
        F = act(n W1 + b1) W2 + b2."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        norms = check.integer("num_norms", num_norms, lo=1, hi=2)
        offset = check.integer("offset", offset, lo=0)
        keep = self.llama_keep(mask, b, t, t, None, x)  # (B?, 1, T, T)
        p = check.params_of(params)
        n1 = self.k.layer_norm(x, eps=eps, params=p.scope("attn_norm"))
        n2 = n1 if norms == 1 else self.k.layer_norm(x, eps=eps, params=p.scope("ffn_norm"))
        rope = self.llama_rope(None, rotary_dim)
        a = self.parallel_attention(n1, keep, heads, kv, rope_base, offset, p.scope("attn"), trace,
                                    rope)
        f = self.k.feedforward(n2, activation=activation, params=p.scope("ffn"))
        record(trace, "ffn.output", f)
        return x + a + f

    def parallel_attention(self, n, keep, heads: int, kv: int, base, offset: int, p, trace,
                           rope=None):
        """W_o concat_h sdpa(Q_h, K_g, V_g, keep) + b_o, every projection with its bias."""
        q, k, v = self.llama_qkv(n, p, heads, kv, base, offset, bias=True, rope=rope)
        out, weights = self.k.sdpa(q, k, v, keep, num_kv_heads=kv)  # (B, H, T, K), (B, H, T, T)
        record(trace, "attn.weights", weights)
        o = self.project_bias(self.ops.merge_heads(out), p, "w_o", n.shape[-1])  # (B, T, D)
        record(trace, "attn.output", o)
        return o


# -- the Gemma 2 / Gemma 3 layer (issue 25) -------------------------------------------------

class GemmaLayers(Layers):
    """Gemma 2/3's decoder layer: sandwich (1 + w) RMSNorms, optional per-head QK-norm,
    RoPE "half", GQA scaled by query_pre_attn_scalar^-1/2, logit soft-cap, sliding window,
    GeGLU (tanh GELU)."""

    EXPORTS = ("gemma_layer",)

    def gemma_layer(self, x, mask=None, *, num_heads, num_kv_heads=None, eps=1e-6,
                    rope_base=10000.0, window=None, offset=0, query_pre_attn_scalar=None,
                    softcap=None, qk_norm=False, rope_scaling=None, params, trace=None):
        """r1 = x + N_pa(W_o Attn(RoPE(N_q(N_in(x) W_q)), RoPE(N_k(N_in(x) W_k)), N_in(x) W_v));
        y = r1 + N_pf2(W_down(gelu_tanh(N_pf1(r1) W_gate) * N_pf1(r1) W_up)); every N an
        RMSNorm with (1 + w); N_q, N_k (per head) only with qk_norm; scores scaled by
        query_pre_attn_scalar^-1/2 (None: K^-1/2), capped c tanh(s / c) with softcap c.
        rope_scaling (rope's ``scaling``, checked by llama_rope) applies to this layer's RoPE
        whatever its window: the layer does not know its type, the model decides (Gemma 3
        scales its global layers only, gemma_decoder_only)."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        window = self.llama_window(window)
        offset = check.integer("offset", offset, lo=0)
        a = {"heads": heads, "kv": kv, "eps": check.eps(eps), "base": rope_base,
             "offset": offset, "softcap": check.softcap(softcap),
             "qk_norm": check.flag("qk_norm", qk_norm),
             "rope": self.llama_rope(rope_scaling, None),
             "s": None if query_pre_attn_scalar is None
             else check.eps(query_pre_attn_scalar, "query_pre_attn_scalar")}
        keep = self.llama_keep(mask, b, t, t, window, x)  # (B?, 1, T, T)
        return self.gemma_block(x, keep, a, check.params_of(params), trace)

    def gemma_norm(self, h, eps, p, name: str):
        return self.k.rms_norm(h, eps=eps, unit_offset=True, params=p.scope(name))

    def gemma_qkv(self, n1, p, a):
        """Queries (B, H, t, K) and keys (B, H_kv, t, K), QK-normed (qk_norm) and then rotated
        (with rope's scaling when the layer has rope_scaling), values (B, H_kv, t, K), from
        the normed input n1 (B, t, D)."""
        ops = self.ops
        w_q = check.shape(p.require("w_q", (n1.shape[-1], None)))
        width = check.divides(f"query width {p.path('w_q')}.shape[1]", a["heads"], w_q[1], "H*K")
        if width % 2:
            raise ShapeError(f"RoPE needs an even head width: {p.path('w_q')} of shape {w_q} "
                             f"with num_heads={a['heads']} gives K={width}")
        q = ops.split_heads(self.project(n1, p, "w_q"), a["heads"])  # (B, H, t, K)
        k = ops.split_heads(self.project(n1, p, "w_k", a["kv"] * width), a["kv"])  # (B, H_kv, t, K)
        v = ops.split_heads(self.project(n1, p, "w_v", a["kv"] * width), a["kv"])  # (B, H_kv, t, K)
        if a["qk_norm"]:
            q, k = self.gemma_norm(q, a["eps"], p, "q_norm"), self.gemma_norm(k, a["eps"], p, "k_norm")
        rot = {"offset": a["offset"], "base": a["base"], "convention": "half", **a["rope"]}
        return self.k.rope(q, **rot), self.k.rope(k, **rot), v, width

    def gemma_attention(self, n1, keep, a, p, trace):
        """W_o concat_h sdpa(Q_h, K_g, V_g, keep; scale s^-1/2, softcap): (B, t, D)."""
        q, k, v, width = self.gemma_qkv(n1, p, a)
        scale = (a["s"] if a["s"] is not None else width) ** -0.5
        out, weights = self.k.sdpa(q, k, v, keep, scale=scale, num_kv_heads=a["kv"],
                                   softcap=a["softcap"])  # (B, H, t, K), (B, H, t, S)
        record(trace, "attn.weights", weights)
        o = self.project(self.ops.merge_heads(out), p, "w_o", n1.shape[-1])  # (B, t, D)
        record(trace, "attn.output", o)
        return o

    def gemma_block(self, x, keep, a, p, trace):
        """The layer on x (B, t, D), sandwich-normed."""
        eps = a["eps"]
        o = self.gemma_attention(self.gemma_norm(x, eps, p, "input_norm"), keep, a,
                                 p.scope("attn"), trace)
        o = self.gemma_norm(o, eps, p, "post_attn_norm")
        record(trace, "post_attn_norm.output", o)
        r1 = x + o
        record(trace, "residual1.output", r1)
        f = self.k.gated_feedforward(self.gemma_norm(r1, eps, p, "pre_ffn_norm"),
                                     activation="gelu_tanh", params=p.scope("ffn"))
        record(trace, "ffn.output", f)
        f = self.gemma_norm(f, eps, p, "post_ffn_norm")
        record(trace, "post_ffn_norm.output", f)
        y = r1 + f
        record(trace, "residual2.output", y)
        return y
