"""Whole models on token ids: the encoder-decoder Transformer, an encoder-only (BERT-style),
a decoder-only (GPT-style) and a Llama-style model. Inference only: no dropout."""

from __future__ import annotations

from attnspec.spec.errors import ParameterError
from attnspec.spec.trace import record, scope

from .. import _checks as check
from .layers import Layers


class Models(Layers):
    EXPORTS = ("transformer", "encoder_only", "decoder_only", "llama_decoder_only",
               "decoder_only_loss")

    def token_ids(self, name: str, ids, vocab: int, table_path: str):
        """(B, T) integer ids in [0, L), or DomainError naming the offending ids."""
        ops = self.ops
        ids = ops.integers(name, ids)
        check.rank(name, ids, min_rank=2, max_rank=2)

        def message(a):
            bad = a[(a < 0) | (a >= vocab)]
            return (f"{name} must be token ids in [0, {vocab}) ({table_path} has {vocab} "
                    f"rows), got {sorted(set(bad.tolist()))} in {name} of shape {a.shape}")
        ops.value_check(ops.all_((ids >= 0) & (ids < vocab)), message, ids)
        return ids

    @staticmethod
    def _vocab(p, path: str, width=None) -> tuple:
        return check.shape(p.require(path, (None, width)))

    def _sinusoidal_embed(self, ids, p, name: str):
        """table[ids] * sqrt(D) + PE(0..T-1)."""
        e = self.k.embedding(ids, scale=True, params=p.scope(name))  # (B, T, D)
        return e + self.ops.cast(self.k.sinusoidal_pe(length=e.shape[1], d_model=e.shape[2]), e)

    def learned_embed(self, ids, p, offset: int = 0):
        """embed.table[ids] + pos.table[offset..offset+T-1], unscaled."""
        e = self.k.embedding(ids, scale=False, params=p.scope("embed"))  # (B, T, D)
        positions = self.ops.arange(offset, offset + ids.shape[1], like=ids)  # (T,)
        return e + self.ops.cast(self.k.learned_pe(positions, params=p.scope("pos")), e)

    def transformer_inputs(self, src_ids, tgt_ids, pad_id, p):
        """Checked ids and the vocabulary sizes of the two tables."""
        L_src, D = self._vocab(p, "src_embed.table")
        L_tgt, _ = self._vocab(p, "tgt_embed.table", D)
        src_ids = self.token_ids("src_ids", src_ids, L_src, p.path("src_embed.table"))
        if tgt_ids is not None:
            tgt_ids = self.token_ids("tgt_ids", tgt_ids, L_tgt, p.path("tgt_embed.table"))
            check.same("batch size", **{"src_ids.shape[0]": src_ids.shape[0],
                                        "tgt_ids.shape[0]": tgt_ids.shape[0]})
        return src_ids, tgt_ids, check.integer("pad_id", pad_id)

    def encode(self, src_ids, pad_id, cfg: dict, p, trace=None):
        """memory = Encoder(src_embed(src_ids) + PE, padding(src_ids)); returns (memory, mask)."""
        e_src = self._sinusoidal_embed(src_ids, p, "src_embed")
        record(trace, "src_embed.output", e_src)
        m_src = self.k.padding_mask(src_ids, pad_id=pad_id)  # (B, 1, 1, S)
        memory = self.k.encoder(e_src, m_src, params=p.scope("encoder"),
                                trace=scope(trace, "encoder"), **cfg)
        return memory, m_src

    def decode(self, tgt_ids, memory, m_src, pad_id, cfg: dict, tie_embeddings: bool, p,
               trace=None):
        """logits of Decoder(tgt_embed(tgt_ids) + PE, memory, padding & causal, m_src)."""
        e_tgt = self._sinusoidal_embed(tgt_ids, p, "tgt_embed")
        record(trace, "tgt_embed.output", e_tgt)
        m_self = self.k.combined_mask(tgt_ids, pad_id=pad_id, t=tgt_ids.shape[1])  # (B, 1, T, T)
        h = self.k.decoder(e_tgt, memory, m_self, m_src, params=p.scope("decoder"),
                           trace=scope(trace, "decoder"), **cfg)
        head = p.scope("tgt_embed") if tie_embeddings else p.scope("lm_head")
        return self.k.lm_head(h, tied=tie_embeddings, params=head)

    def transformer(self, src_ids, tgt_ids, *, pad_id, num_layers, num_heads, norm="post",
                    eps=1e-5, activation="relu", tie_embeddings=False, params, trace=None):
        """memory = Encoder(E_src[src] sqrt(D) + PE, pad(src));
        logits = LMHead(Decoder(E_tgt[tgt] sqrt(D) + PE, memory, pad(tgt) & causal, pad(src))).
        """
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        src_ids, tgt_ids, pad_id = self.transformer_inputs(src_ids, tgt_ids, pad_id, p)
        cfg = dict(num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                   activation=activation)
        memory, m_src = self.encode(src_ids, pad_id, cfg, p, trace)
        return self.decode(tgt_ids, memory, m_src, pad_id, cfg, tie, p, trace)

    def _model_ids(self, ids, pad_id, p):
        L, _ = self._vocab(p, "embed.table")
        ids = self.token_ids("ids", ids, L, p.path("embed.table"))
        return ids, check.integer("pad_id", pad_id)

    def encoder_only(self, ids, *, pad_id, num_layers, num_heads, norm="post", eps=1e-5,
                     activation="gelu", params, trace=None):
        """hidden = Encoder(E[ids] + P[0..T-1], pad(ids)) (no sqrt(D) scale, as BERT);
        logits = hidden W + b."""
        p = check.params_of(params)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        e = self.learned_embed(ids, p)
        record(trace, "embed.output", e)
        hidden = self.k.encoder(e, self.k.padding_mask(ids, pad_id=pad_id), num_layers=num_layers,
                                num_heads=num_heads, norm=norm, eps=eps, activation=activation,
                                params=p.scope("encoder"), trace=scope(trace, "encoder"))
        return hidden, self.k.lm_head(hidden, params=p.scope("lm_head"))

    def decoder_only(self, ids, *, pad_id, num_layers, num_heads, norm="pre", eps=1e-5,
                     activation="gelu", tie_embeddings=False, params, trace=None):
        """logits = LMHead(Stack(E[ids] + P[0..T-1], pad(ids) & causal)); the stack is N
        encoder layers (no cross-attention), pre-norm with a final LayerNorm by default.
        tie_embeddings (GPT-2): logits = h E^T, no bias and no lm_head.* parameters."""
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        if tie:
            self.no_head_params(p)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        e = self.learned_embed(ids, p)
        record(trace, "embed.output", e)
        mask = self.k.combined_mask(ids, pad_id=pad_id, t=ids.shape[1])  # (B, 1, T, T)
        h = self.k.encoder(e, mask, num_layers=num_layers, num_heads=num_heads, norm=norm,
                           eps=eps, activation=activation, params=p, trace=trace)
        return self.decoder_only_head(h, tie, p)

    def decoder_only_head(self, h, tie: bool, p):
        """decoder_only's head (shared by decoder_only_step and the decoders): h lm_head.w +
        lm_head.b, or tied (GPT-2) h embed.table^T without a bias."""
        if tie:
            return self.k.lm_head(h, tied=True, params=p.scope("embed"))
        return self.k.lm_head(h, params=p.scope("lm_head"))

    @staticmethod
    def no_head_params(p):
        """A tied head reads embed.table only: an lm_head.* parameter (a bias GPT-2 does not
        have, a W that would be ignored) is refused, naming it."""
        extra = sorted(k for k in p.keys() if k.startswith("lm_head."))
        if extra:
            raise ParameterError(f"tie_embeddings=True: the head is embed.table^T without a bias; "
                                 f"{p.path(extra[0])!r} of shape "
                                 f"{check.shape(p.require(extra[0]))} must not be given")

    def decoder_only_loss(self, ids, targets, *, pad_id, num_layers, num_heads, norm="pre",
                          eps=1e-5, activation="gelu", ignore_index=-100, label_smoothing=0.0,
                          params, trace=None):
        """loss = CrossEntropy(DecoderOnly(ids), targets): the mean over the targets that are
        not ignore_index (targets[b, t] = the id after position t); one training step's loss."""
        logits = self.k.decoder_only(ids, pad_id=pad_id, num_layers=num_layers,
                                     num_heads=num_heads, norm=norm, eps=eps,
                                     activation=activation, params=params, trace=trace)
        record(trace, "logits", logits)
        return self.k.cross_entropy(logits, targets, ignore_index=ignore_index,
                                    label_smoothing=label_smoothing)

    def llama_decoder_only(self, ids, *, pad_id, num_layers, num_heads, num_kv_heads=None,
                           eps=1e-6, rope_base=10000.0, window=None, rope_scaling=None,
                           rotary_dim=None, attention_bias=False, tie_embeddings=False,
                           params, trace=None):
        """h_0 = E[ids] (no positions, no scale); h_{i+1} = LlamaLayer_i(h_i, pad(ids));
        logits = RMSNorm(h_N) W_lm (no bias). rope_scaling and rotary_dim go to every layer
        (only when given, so a layer without them is called as before), attention_bias
        (Qwen2's q, k, v biases) too; tie_embeddings: W_lm = E^T, no lm_head.* parameters."""
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        bias = {"attention_bias": True} if check.flag("attention_bias", attention_bias) else {}
        if tie:
            self.no_head_params(p)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        n = check.integer("num_layers", num_layers, lo=1)
        self.llama_heads(num_heads, num_kv_heads)
        self.llama_window(window)
        rope = {"rope_scaling": rope_scaling, "rotary_dim": rotary_dim}
        self.llama_rope(**rope)
        rope = {k: v for k, v in rope.items() if v is not None}
        h = self.k.embedding(ids, scale=False, params=p.scope("embed"))  # (B, T, D)
        record(trace, "embed.output", h)
        pad = self.k.padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, T)
        for i in range(n):
            h = self.k.llama_layer(h, pad, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                   eps=eps, rope_base=rope_base, window=window, offset=0,
                                   params=p.scope(f"layers.{i}"), trace=scope(trace, f"layers.{i}"),
                                   **rope, **bias)
        return self.llama_head(h, eps, p, trace, tie=tie)

    def llama_head(self, h, eps, p, trace=None, tie=False):
        """logits = RMSNorm(h; norm.gamma) lm_head.w: (B, t, L); tie: embed.table^T."""
        h = self.k.rms_norm(h, eps=eps, params=p.scope("norm"))
        record(trace, "norm.output", h)
        if tie:
            return self.k.lm_head(h, tied=True, params=p.scope("embed"))
        return self.project(h, p.scope("lm_head"), "w")


# -- the parallel-residual model: GPT-NeoX, Falcon (issue 25 item 6) -------------------------------

class ParallelModels(Models):
    """GPT-NeoX's and Falcon's decoder-only model: unscaled embeddings without positions,
    parallel_layer (RoPE at 0..T-1) N times, a final LayerNorm, an untied head without a bias
    (GPT-NeoX's embed_out) or the head tied to the embedding table (Falcon)."""

    EXPORTS = ("parallel_decoder_only",)

    def parallel_decoder_only(self, ids, *, pad_id, num_layers, num_heads, num_kv_heads=None,
                              num_norms=2, eps=1e-5, activation="gelu", rope_base=10000.0,
                              rotary_dim=None, tie_embeddings=False, params, trace=None):
        """h_0 = E[ids]; h_{i+1} = ParallelLayer_i(h_i, pad(ids)); logits = LN(h_N;
        final_norm) W_lm (no bias), or LN(h_N) E^T with tie_embeddings (no lm_head.*)."""
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        if tie:
            self.no_head_params(p)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        n = check.integer("num_layers", num_layers, lo=1)
        h = self.k.embedding(ids, scale=False, params=p.scope("embed"))  # (B, T, D)
        record(trace, "embed.output", h)
        pad = self.k.padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, T)
        rope = {} if rotary_dim is None else {"rotary_dim": rotary_dim}
        for i in range(n):
            h = self.k.parallel_layer(h, pad, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                      num_norms=num_norms, eps=eps, activation=activation,
                                      rope_base=rope_base, offset=0, params=p.scope(f"layers.{i}"),
                                      trace=scope(trace, f"layers.{i}"), **rope)
        h = self.k.layer_norm(h, eps=eps, params=p.scope("final_norm"))
        record(trace, "final_norm.output", h)
        if tie:
            return self.k.lm_head(h, tied=True, params=p.scope("embed"))
        return self.project(h, p.scope("lm_head"), "w")


# -- the Gemma 2 model (issue 25) ---------------------------------------------------------------

class GemmaModels(Models):
    """Gemma 2's decoder-only model: sqrt(D)-scaled embeddings, gemma_layer with a sliding
    window on the even layers (0, 2, ...; Gemma 2's alternation), a final (1 + w) RMSNorm,
    the head tied to the embedding table, an optional final logit soft-cap."""

    EXPORTS = ("gemma_decoder_only",)

    def gemma_decoder_only(self, ids, *, pad_id, num_layers, num_heads, num_kv_heads=None,
                           eps=1e-6, rope_base=10000.0, window=None, query_pre_attn_scalar=None,
                           softcap=None, final_softcap=None, qk_norm=False, rope_local_base=None,
                           rope_scaling=None, sliding_window_pattern=2, params, trace=None):
        """h_0 = E[ids] sqrt(D); h_{i+1} = GemmaLayer_i(h_i, pad(ids)), window on the local
        layers only: layer i is global where (i + 1) % sliding_window_pattern == 0 (2: the
        odd layers, Gemma 2's alternation; 6: Gemma 3's five local to one global), local
        otherwise;
        logits = cap_f(N(h_N; norm.gamma) E^T), cap_f(z) = c tanh(z / c) (final_softcap c).
        The local layers rotate with rope_local_base (None: rope_base), unscaled; the
        global ones with rope_base and rope_scaling (Gemma 3's rope_local_base_freq,
        rope_theta and rope_parameters["full_attention"]); rope_scaling is passed to a layer
        only when given, so a model without it calls its layers as before."""
        p = check.params_of(params)
        ids, pad_id = self._model_ids(ids, pad_id, p)
        n = check.integer("num_layers", num_layers, lo=1)
        cap = check.softcap(final_softcap, "final_softcap")
        local = rope_base if rope_local_base is None else check.eps(rope_local_base,
                                                                    "rope_local_base")
        self.llama_rope(rope_scaling, None)
        pattern = check.integer("sliding_window_pattern", sliding_window_pattern, lo=1)
        scaled = {} if rope_scaling is None else {"rope_scaling": rope_scaling}
        h = self.k.embedding(ids, scale=True, params=p.scope("embed"))  # (B, T, D)
        record(trace, "embed.output", h)
        pad = self.k.padding_mask(ids, pad_id=pad_id)  # (B, 1, 1, T)
        for i in range(n):
            glob = (i + 1) % pattern == 0
            h = self.k.gemma_layer(h, pad, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                   eps=eps, rope_base=rope_base if glob else local,
                                   window=None if glob else window, offset=0,
                                   query_pre_attn_scalar=query_pre_attn_scalar, softcap=softcap,
                                   qk_norm=qk_norm, params=p.scope(f"layers.{i}"),
                                   trace=scope(trace, f"layers.{i}"), **(scaled if glob else {}))
        h = self.k.rms_norm(h, eps=eps, unit_offset=True, params=p.scope("norm"))
        record(trace, "norm.output", h)
        logits = self.k.lm_head(h, tied=True, params=p.scope("embed"))  # (B, T, L)
        return logits if cap is None else self.k.softcap(logits, cap=cap)


# -- T5 (spec/components/t5.md) -----------------------------------------------------------

T5_FEED_FORWARD = ("relu", "gated-gelu")
T5_TABLE = {"encoder": "layers.0.attn.rel_bias", "decoder": "layers.0.self_attn.rel_bias"}


class T5(Models):
    """T5's encoder and decoder stacks: pre-RMSNorm sublayers, unscaled attention, the
    bucketed position bias computed once from layer 0's table and passed to every layer."""

    EXPORTS = ("t5_encoder", "t5_decoder", "t5_model")

    def t5_encoder(self, x, mask=None, *, num_layers, num_heads, num_buckets=32,
                   max_distance=128, eps=1e-6, feed_forward="relu", params, trace=None):
        """P = t5_bias(bidirectional, layers.0.attn.rel_bias); for each layer h += A(RMSNorm(h),
        P), h += F(RMSNorm(h)); y = RMSNorm(h; final_norm)."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        n, heads, ff = self.t5_attrs(num_layers, num_heads, feed_forward)
        p = check.params_of(params)
        keep = self.t5_mask("mask", mask, (b, heads, t, t))
        bias = self.t5_position_bias("encoder", t, num_buckets, max_distance, p)  # (H, T, T) once
        h = x
        for i in range(n):
            q = p.scope(f"layers.{i}")
            h = h + self.t5_attention(self.k.rms_norm(h, eps=eps, params=q.scope("attn_norm")),
                                      None, bias, keep, heads, q.scope("attn"))
            h = h + self.t5_ffn(self.k.rms_norm(h, eps=eps, params=q.scope("ffn_norm")), ff,
                                q.scope("ffn"))
            record(trace, f"layers.{i}.output", h)
        return self.k.rms_norm(h, eps=eps, params=p.scope("final_norm"))

    def t5_decoder(self, x, memory, self_mask=None, memory_mask=None, *, num_layers, num_heads,
                   num_buckets=32, max_distance=128, eps=1e-6, feed_forward="relu", params,
                   trace=None):
        """P = t5_bias(causal buckets, layers.0.self_attn.rel_bias); for each layer
        h += A(RMSNorm(h), P, causal AND self_mask), h += A(RMSNorm(h), memory, no bias,
        memory_mask), h += F(RMSNorm(h)); y = RMSNorm(h; final_norm)."""
        x = self.ops.floating("x", x)
        b, t, _ = check.rank("x", x, min_rank=3, max_rank=3)
        memory = self._memory_checks(x, memory)
        s = memory.shape[1]
        n, heads, ff = self.t5_attrs(num_layers, num_heads, feed_forward)
        p = check.params_of(params)
        causal = self.ops.cast(self.k.causal_mask(t=t, s=t), self.ops.falses((), like=x))  # (T, T)
        keep = self.t5_mask("self_mask", self_mask, (b, heads, t, t))
        keep = causal if keep is None else keep & causal
        cross_keep = self.t5_mask("memory_mask", memory_mask, (b, heads, t, s))
        bias = self.t5_position_bias("decoder", t, num_buckets, max_distance, p)  # (H, T, T) once
        h = x
        for i in range(n):
            q = p.scope(f"layers.{i}")
            h = h + self.t5_attention(self.k.rms_norm(h, eps=eps, params=q.scope("self_norm")),
                                      None, bias, keep, heads, q.scope("self_attn"))
            h = h + self.t5_attention(self.k.rms_norm(h, eps=eps, params=q.scope("cross_norm")),
                                      memory, None, cross_keep, heads, q.scope("cross_attn"))
            h = h + self.t5_ffn(self.k.rms_norm(h, eps=eps, params=q.scope("ffn_norm")), ff,
                                q.scope("ffn"))
            record(trace, f"layers.{i}.output", h)
        return self.k.rms_norm(h, eps=eps, params=p.scope("final_norm"))

    def t5_model(self, src_ids, tgt_ids, *, pad_id, num_layers, num_heads, num_buckets=32,
                 max_distance=128, eps=1e-6, feed_forward="relu", tie_embeddings=True, params,
                 trace=None):
        """memory = t5_encoder(shared[src], pad(src)); h = t5_decoder(shared[tgt], memory,
        causal only, pad(src)) (no sqrt(D) scale, no positions: the bias is in the stacks);
        logits = (h D^-0.5) shared.table^T when tied (T5 1.0), h lm_head.w otherwise (v1.1)."""
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        self.t5_head_params(p, tie)
        L, D = self._vocab(p, "shared.table")
        src_ids = self.token_ids("src_ids", src_ids, L, p.path("shared.table"))
        tgt_ids = self.token_ids("tgt_ids", tgt_ids, L, p.path("shared.table"))
        check.same("batch size", **{"src_ids.shape[0]": src_ids.shape[0],
                                    "tgt_ids.shape[0]": tgt_ids.shape[0]})
        pad_id = check.integer("pad_id", pad_id)
        cfg = dict(num_layers=num_layers, num_heads=num_heads, num_buckets=num_buckets,
                   max_distance=max_distance, eps=eps, feed_forward=feed_forward)
        shared = p.scope("shared")
        m_src = self.k.padding_mask(src_ids, pad_id=pad_id)  # (B, 1, 1, S)
        e_src = self.k.embedding(src_ids, scale=False, params=shared)  # (B, S, D)
        memory = self.t5_encoder(e_src, m_src, params=p.scope("encoder"),
                                 trace=scope(trace, "encoder"), **cfg)
        record(trace, "encoder.output", memory)
        # decoder keys: causal only (T5's decoder start token is the pad id, and it is attended)
        e_tgt = self.k.embedding(tgt_ids, scale=False, params=shared)  # (B, T, D)
        h = self.t5_decoder(e_tgt, memory, None, m_src, params=p.scope("decoder"),
                            trace=scope(trace, "decoder"), **cfg)
        record(trace, "decoder.output", h)
        if tie:
            return self.k.lm_head(h * D ** -0.5, tied=True, params=shared)  # (B, T, L)
        return self.k.lm_head(h, params=p.scope("lm_head"))  # (B, T, L)

    @staticmethod
    def t5_head_params(p, tie: bool):
        """T5's heads have no bias: tied, no lm_head.* at all (the head is shared.table);
        untied, lm_head.w only."""
        extra = sorted(k for k in p.keys() if k.startswith("lm_head.") and (tie or k != "lm_head.w"))
        if extra:
            head = "(h D^-0.5) shared.table^T" if tie else "h lm_head.w, without a bias"
            raise ParameterError(f"tie_embeddings={tie}: T5's head is {head}; "
                                 f"{p.path(extra[0])!r} of shape "
                                 f"{check.shape(p.require(extra[0]))} must not be given")

    @staticmethod
    def t5_attrs(num_layers, num_heads, feed_forward) -> tuple:
        return (check.integer("num_layers", num_layers, lo=1),
                check.integer("num_heads", num_heads, lo=1),
                check.choice("feed_forward", feed_forward, T5_FEED_FORWARD))

    @staticmethod
    def t5_mask(name: str, mask, shape: tuple):
        if mask is not None:
            check.broadcastable(name, mask, shape)
        return mask

    def t5_position_bias(self, kind: str, t: int, num_buckets, max_distance, p):
        """The (H, T, T) bias from layer 0's table, computed once for the whole stack."""
        return self.k.t5_bias(t=t, s=t, bidirectional=kind == "encoder", num_buckets=num_buckets,
                              max_distance=max_distance, params=p.scope(T5_TABLE[kind]))

    def t5_attention(self, a, memory, bias, keep, heads: int, p):
        """concat_h sdpa(a W_q, m W_k, m W_v, keep, bias, scale=1) W_o, m = memory or a."""
        ops = self.ops
        m = a if memory is None else memory
        w_q = check.shape(p.require("w_q", (a.shape[-1], None)))
        check.divides(f"query width {p.path('w_q')}.shape[1]", heads, w_q[1], "H*K")
        q = ops.split_heads(self.project(a, p, "w_q"), heads)  # (B, H, T, K)
        k = ops.split_heads(self.project(m, p, "w_k", w_q[1]), heads)  # (B, H, S, K)
        v = ops.split_heads(self.project(m, p, "w_v", w_q[1]), heads)  # (B, H, S, K)
        out, _ = self.k.sdpa(q, k, v, keep, bias, scale=1.0)  # (B, H, T, K): no 1/sqrt(K)
        return self.project(ops.merge_heads(out), p, "w_o", a.shape[-1])  # (B, T, D)

    def t5_ffn(self, n, feed_forward: str, p):
        """relu: relu(n W_up) W_down; gated-gelu: (gelu_tanh(n W_gate) * n W_up) W_down."""
        if feed_forward == "gated-gelu":
            return self.k.gated_feedforward(n, activation="gelu_tanh", params=p)
        u = self.project(n, p, "w_up")  # (B, T, F)
        return self.project(self.ops.where(u > 0, u, 0), p, "w_down", n.shape[-1])  # (B, T, D)
