"""Greedy decoding, and incremental decoding of the decoder-only model with a key/value
cache.

The cache is a plain dict, so every backend can hold it in its own arrays:
    "length":        n, the number of positions already processed (int)
    "keep":          (B, n) bool, False where the token was pad_id (masked as a key)
    "layers.<i>.k":  (B, H, n, K) the projected keys of layer i's self-attention
    "layers.<i>.v":  (B, H, n, V) the projected values
``decoder_only_step`` never modifies the cache it is given; it returns a new one.

The Llama cache (``llama_init_cache`` / ``llama_step``) is the same dict, its keys and values
(B, H_kv, n, K) holding the H_kv key/value heads (not H), the keys already rotated (RoPE at
their own positions). It keeps every position: a sliding window is applied by the mask
(bottom-right aligned over the n + t keys), not by dropping old entries.
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError, DomainError

from .. import _checks as check
from .layers import NORMS
from .models import Models

MODELS = ("decoder_only", "transformer", "llama_decoder_only")


class Decoding(Models):
    EXPORTS = ("greedy_decode", "decoder_only_init_cache", "decoder_only_step",
               "llama_init_cache", "llama_step")

    def decoder_only_init_cache(self, *, batch_size, num_layers, num_heads, params):
        """An empty cache (length 0) for ``batch_size`` rows, in the dtype of the parameters."""
        ops = self.ops
        b = check.integer("batch_size", batch_size, lo=1)
        n = check.integer("num_layers", num_layers, lo=1)
        heads = check.integer("num_heads", num_heads, lo=1)
        p = check.params_of(params)
        cache = {"length": 0, "keep": ops.falses((b, 0), like=p.get("embed.table"))}
        for i in range(n):
            attn = p.scope(f"layers.{i}").scope("self_attn")
            w_k = ops.floating(attn.path("w_k"), attn.require("w_k", (None, None)))
            w_v = ops.floating(attn.path("w_v"), attn.require("w_v", (None, None)))
            k = check.divides(f"query/key width {attn.path('w_k')}.shape[1]", heads,
                              w_k.shape[1], "H*K")
            v = check.divides(f"value width {attn.path('w_v')}.shape[1]", heads, w_v.shape[1],
                              "H*V")
            cache[f"layers.{i}.k"] = ops.zeros((b, heads, 0, k), like=w_k)
            cache[f"layers.{i}.v"] = ops.zeros((b, heads, 0, v), like=w_v)
        return cache

    def _cached_attention(self, cache, new_cache, i: int, mask, heads: int, p):
        """Self-attention of the new positions over the cached and the new keys/values."""
        ops = self.ops

        def f(h):  # h (B, t, D)
            d = h.shape[-1]
            q = ops.split_heads(ops.linear(h, p, "w_q", "b_q", d), heads)  # (B, H, t, K)
            k_new = ops.split_heads(ops.linear(h, p, "w_k", "b_k", d), heads)  # (B, H, t, K)
            v_new = ops.split_heads(ops.linear(h, p, "w_v", "b_v", d), heads)  # (B, H, t, V)
            k = ops.concat([cache[f"layers.{i}.k"], k_new], axis=2)  # (B, H, n+t, K)
            v = ops.concat([cache[f"layers.{i}.v"], v_new], axis=2)  # (B, H, n+t, V)
            new_cache[f"layers.{i}.k"], new_cache[f"layers.{i}.v"] = k, v
            out, _ = self.k.sdpa(q, k, v, mask)  # (B, H, t, V)
            concat = ops.merge_heads(out)  # (B, t, H*V)
            return ops.linear(concat, p, "w_o", "b_o", concat.shape[-1], d)
        return f

    def decoder_only_step(self, ids, cache, *, pad_id, num_layers, num_heads, norm="pre",
                          eps=1e-5, activation="gelu", tie_embeddings=False, params):
        """(logits (B, t, L), new cache) for the t new tokens ``ids`` (B, t) at positions
        n..n+t-1, n = cache["length"]: equal to decoder_only(all ids so far)[:, n:] (with the
        same tie_embeddings: the head is decoder_only's own, decoder_only_head)."""
        ops = self.ops
        p = check.params_of(params)
        tie = check.flag("tie_embeddings", tie_embeddings)
        if tie:
            self.no_head_params(p)
        L, _ = check.shape(p.require("embed.table", (None, None)))
        ids = self.token_ids("ids", ids, L, p.path("embed.table"))
        pad_id = check.integer("pad_id", pad_id)
        heads = check.integer("num_heads", num_heads, lo=1)
        n_layers = check.integer("num_layers", num_layers, lo=1)
        check.choice("norm", norm, NORMS)
        n = int(cache["length"])
        check.same("batch size", **{"ids.shape[0]": ids.shape[0],
                                    "cache['keep'].shape[0]": cache["keep"].shape[0]})
        t = ids.shape[1]
        keep = ops.concat([cache["keep"], ids != pad_id], axis=1)  # (B, n+t)
        causal = ops.cast(self.k.causal_mask(t=t, s=n + t), keep)  # (t, n+t)
        mask = keep[:, None, None, :] & causal  # (B, 1, t, n+t)
        new_cache = {"length": n + t, "keep": keep}
        h = self.learned_embed(ids, p, offset=n)  # (B, t, D)
        for i in range(n_layers):
            lp = p.scope(f"layers.{i}")
            attn = self._cached_attention(cache, new_cache, i, mask, heads, lp.scope("self_attn"))
            h = self._sublayer(h, attn, lp, "norm1", norm, eps)
            h = self._sublayer(h, self._ffn(activation, lp, None), lp, "norm2", norm, eps)
        if norm == "pre":
            h = self.k.layer_norm(h, eps=eps, params=p.scope("final_norm"))
        return self.decoder_only_head(h, tie, p), new_cache

    def llama_init_cache(self, *, batch_size, num_layers, num_heads, num_kv_heads=None, params):
        """An empty cache (length 0) for ``batch_size`` rows: keys and values (B, H_kv, 0, K)
        per layer, in the dtype of the parameters."""
        ops = self.ops
        b = check.integer("batch_size", batch_size, lo=1)
        n = check.integer("num_layers", num_layers, lo=1)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        p = check.params_of(params)
        cache = {"length": 0, "keep": ops.falses((b, 0), like=p.get("embed.table"))}
        for i in range(n):
            attn = p.scope(f"layers.{i}").scope("attn")
            w_q = ops.floating(attn.path("w_q"), attn.require("w_q", (None, None)))
            width = check.divides(f"query width {attn.path('w_q')}.shape[1]", heads,
                                  w_q.shape[1], "H*K")
            cache[f"layers.{i}.k"] = ops.zeros((b, kv, 0, width), like=w_q)
            cache[f"layers.{i}.v"] = ops.zeros((b, kv, 0, width), like=w_q)
        return cache

    def llama_step(self, ids, cache, *, pad_id, num_layers, num_heads, num_kv_heads=None,
                   eps=1e-6, rope_base=10000.0, window=None, rope_scaling=None, rotary_dim=None,
                   params):
        """(logits (B, t, L), new cache) for the t new tokens ``ids`` (B, t) at positions
        n..n+t-1, n = cache["length"]: equal to llama_decoder_only(all ids so far)[:, n:].
        With rope_scaling the new positions' frequencies are those of seq_len = n + t (as
        transformers' rotary embedding takes max(position_ids) + 1); the cached keys keep the
        rotation they were stored with, so a rule whose frequencies depend on seq_len
        (dynamic, longrope) equals the full forward only while they do not change."""
        ops = self.ops
        p = check.params_of(params)
        L, _ = check.shape(p.require("embed.table", (None, None)))
        ids = self.token_ids("ids", ids, L, p.path("embed.table"))
        pad_id = check.integer("pad_id", pad_id)
        n_layers = check.integer("num_layers", num_layers, lo=1)
        heads, kv = self.llama_heads(num_heads, num_kv_heads)
        window = self.llama_window(window)
        rope = self.llama_rope(rope_scaling, rotary_dim)
        n = int(cache["length"])
        check.same("batch size", **{"ids.shape[0]": ids.shape[0],
                                    "cache['keep'].shape[0]": cache["keep"].shape[0]})
        b, t = check.shape(ids)
        keep = ops.concat([cache["keep"], ids != pad_id], axis=1)  # (B, n+t)
        mask = self.llama_keep(keep[:, None, None, :], b, t, n + t, window, keep)  # (B,1,t,n+t)
        new_cache = {"length": n + t, "keep": keep}
        h = self.k.embedding(ids, scale=False, params=p.scope("embed"))  # (B, t, D)
        for i in range(n_layers):
            past = cache[f"layers.{i}.k"], cache[f"layers.{i}.v"]
            h, (k, v) = self.llama_block(h, mask, heads, kv, eps, rope_base, n,
                                         p.scope(f"layers.{i}"), None, past, rope=rope)
            new_cache[f"layers.{i}.k"], new_cache[f"layers.{i}.v"] = k, v
        return self.llama_head(h, eps, p), new_cache

    def _llama_steps(self, prompt, pad_id, cfg: dict, p):
        """Next-token logits of llama_decoder_only via llama_init_cache / llama_step."""
        init = self.k.llama_init_cache(batch_size=prompt.shape[0], num_layers=cfg["num_layers"],
                                       num_heads=cfg["num_heads"],
                                       num_kv_heads=cfg["num_kv_heads"], params=p)
        return self._cached_steps(self.k.llama_step, init, prompt, pad_id, cfg, p)

    def _decoder_only_steps(self, prompt, pad_id, cfg: dict, p):
        """Next-token logits of decoder_only via decoder_only_init_cache / decoder_only_step."""
        init = self.k.decoder_only_init_cache(batch_size=prompt.shape[0],
                                              num_layers=cfg["num_layers"],
                                              num_heads=cfg["num_heads"], params=p)
        return self._cached_steps(self.k.decoder_only_step, init, prompt, pad_id, cfg, p)

    @staticmethod
    def _cached_steps(step, cache, prompt, pad_id, cfg: dict, p):
        """Next-token logits: the prompt once (prefill), then one token a step, via the cache.
        Send the next tokens (rows,), or (tokens, reorder): reorder(cache) -> the cache whose
        rows the tokens extend (beam search's gather of the chosen beams' rows)."""
        logits, cache = step(prompt, cache, pad_id=pad_id, params=p, **cfg)
        while True:
            sent = yield logits[:, -1]
            nxt, reorder = sent if isinstance(sent, tuple) else (sent, None)
            if reorder is not None:
                cache = reorder(cache)
            logits, cache = step(nxt[:, None], cache, pad_id=pad_id, params=p, **cfg)

    def _transformer_steps(self, src_ids, pad_id, cfg: dict, tie: bool, p):
        """Next-token logits: the encoder once, the decoder on the whole prefix every step."""
        memory, m_src = self.encode(src_ids, pad_id, cfg, p)
        seq = yield
        while True:
            seq = yield self.decode(seq, memory, m_src, pad_id, cfg, tie, p)[:, -1]

    def _prompt(self, prompt, src_ids, eos_id, pad_id, max_len, p, model="decoder_only"):
        """decoder_only: the checked prompt (B, P) and max_len in [P, max positions];
        llama_decoder_only (no position table): max_len >= P. eos_id in the vocabulary."""
        if prompt is None or src_ids is not None:
            raise ConfigError(f"model {model!r} takes a prompt (B, P) and no src_ids")
        L, _ = check.shape(p.require("embed.table", (None, None)))
        if not 0 <= eos_id < L:
            raise DomainError(f"eos_id={eos_id} is not a token id in [0, {L})")
        seq = self.token_ids("prompt", prompt, L, p.path("embed.table"))
        self.ops.value_check(self.ops.all_(seq != pad_id), lambda: (
            f"prompt must not contain pad_id={pad_id} (rows are not padded), got prompt of "
            f"shape {check.shape(seq)}"))
        if model == "llama_decoder_only":
            return seq, check.integer("max_len", max_len, lo=seq.shape[1])
        max_pos = check.shape(p.require("pos.table", (None, None)))[0]
        return seq, check.integer("max_len", max_len, lo=seq.shape[1], hi=max_pos + 1)

    def _source(self, prompt, src_ids, bos_id, eos_id, pad_id, max_len, p):
        """transformer: the checked src_ids and max_len >= 1; bos_id, eos_id in the vocabulary."""
        if src_ids is None or prompt is not None:
            raise ConfigError("model 'transformer' takes src_ids (B, S) and no prompt (the "
                              "target starts with bos_id)")
        src_ids, _, _ = self.transformer_inputs(src_ids, None, pad_id, p)
        L = check.shape(p.require("tgt_embed.table", (None, None)))[0]
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
            if not 0 <= value < L:
                raise DomainError(f"{name}={value} is not a token id in [0, {L})")
        return src_ids, check.integer("max_len", max_len, lo=1)

    @staticmethod
    def _llama_config(model, norm, activation, num_kv_heads, rope_base, window,
                      rope_scaling=None, rotary_dim=None) -> dict:
        """The Llama attributes; refused (unless defaults) by the other models.
        rope_scaling and rotary_dim are passed on only when given."""
        llama = {"num_kv_heads": num_kv_heads, "rope_base": rope_base, "window": window}
        rope = {k: v for k, v in (("rope_scaling", rope_scaling), ("rotary_dim", rotary_dim))
                if v is not None}
        if model == "llama_decoder_only":
            check.choice("norm", norm, ("pre",))
            check.choice("activation", activation, ("silu",))
        elif llama != {"num_kv_heads": None, "rope_base": 10000.0, "window": None} or rope:
            raise ConfigError(f"num_kv_heads, rope_base, window, rope_scaling and rotary_dim "
                              f"are attributes of model 'llama_decoder_only', not of {model!r}")
        return {**llama, **rope}

    @staticmethod
    def _tie(model, tie_embeddings) -> bool:
        """tie_embeddings checked: a head tied to the (target) embedding for 'transformer' and
        'decoder_only' (GPT-2); refused for 'llama_decoder_only', whose head is lm_head.w."""
        tie = check.flag("tie_embeddings", tie_embeddings)
        if tie and model == "llama_decoder_only":
            raise ConfigError("tie_embeddings is an attribute of models 'transformer' and "
                              "'decoder_only', not of 'llama_decoder_only'")
        return tie

    def greedy_decode(self, prompt=None, src_ids=None, *, model, bos_id, eos_id, pad_id, max_len,
                      num_layers, num_heads, norm, eps=1e-5, activation, tie_embeddings=False,
                      num_kv_heads=None, rope_base=10000.0, window=None, rope_scaling=None,
                      rotary_dim=None, params):
        """ids (B, max_len): the prompt (decoder_only) or [bos_id] (transformer), extended by
        next = argmax_j logits[:, -1, j] (ties: lowest id) until a row emits eos_id, after which
        the row holds pad_id; stops when every row has ended or the length is max_len.
        llama_decoder_only takes num_kv_heads, rope_base, window, rope_scaling and rotary_dim
        (through llama_step), and needs norm='pre',
        activation='silu' (what it is); the others refuse them."""
        ops = self.ops
        check.choice("model", model, MODELS)
        p = check.params_of(params)
        bos_id, eos_id = check.integer("bos_id", bos_id), check.integer("eos_id", eos_id)
        pad_id = check.integer("pad_id", pad_id)
        check.choice("norm", norm, NORMS)
        cfg = dict(num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                   activation=activation)
        llama = self._llama_config(model, norm, activation, num_kv_heads, rope_base, window,
                                   rope_scaling, rotary_dim)
        tie = self._tie(model, tie_embeddings)
        if model == "llama_decoder_only":
            seq, max_len = self._prompt(prompt, src_ids, eos_id, pad_id, max_len, p, model)
            steps = self._llama_steps(seq, pad_id, {**llama, "num_layers": num_layers,
                                                    "num_heads": num_heads, "eps": eps}, p)
            logits = next(steps)
        elif model == "decoder_only":
            seq, max_len = self._prompt(prompt, src_ids, eos_id, pad_id, max_len, p)
            steps = self._decoder_only_steps(seq, pad_id, {**cfg, "tie_embeddings": tie}, p)
            logits = next(steps)
        else:
            src_ids, max_len = self._source(prompt, src_ids, bos_id, eos_id, pad_id, max_len, p)
            seq = ops.full((src_ids.shape[0], 1), bos_id, like=src_ids)  # (B, 1)
            steps = self._transformer_steps(src_ids, pad_id, cfg, tie, p)
            next(steps)
            logits = steps.send(seq) if max_len > 1 else None
        seq = ops.int64(seq)
        done = ops.falses((seq.shape[0],), like=seq)
        while seq.shape[1] < max_len and not ops.known_all(done):
            nxt = ops.where(done, pad_id, ops.argmax(logits, axis=-1))  # (B,)
            done = done | (nxt == eos_id)
            seq = ops.concat([seq, nxt[:, None]], axis=1)
            if seq.shape[1] < max_len and not ops.known_all(done):
                logits = steps.send(seq if model == "transformer" else nxt)
        rest = ops.full((seq.shape[0], max_len - seq.shape[1]), pad_id, like=seq)
        return ops.concat([seq, rest], axis=1)  # (B, max_len)
