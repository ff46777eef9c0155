"""Greedy decoding, and incremental decoding of the decoder-only model with a key/value
cache.

The cache is a plain dict, so every backend can hold it in its own arrays:
    "length":        n, the number of positions already processed (int)
    "keep":          (B, n) bool, False where the token was pad_id (masked as a key)
    "layers.<i>.k":  (B, H, n, K) the projected keys of layer i's self-attention
    "layers.<i>.v":  (B, H, n, V) the projected values
``decoder_only_step`` never modifies the cache it is given; it returns a new one.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError, DomainError

from .. import _checks as check
from ._core import floating, value_check
from .attention import causal_mask, sdpa
from .embedding import lm_head
from .layers import NORMS, _ffn, _sublayer
from .models import decode, encode, learned_embed, token_ids, transformer_inputs
from .multihead import _linear, _split_heads
from .norm import layer_norm

MODELS = ("decoder_only", "transformer")


def decoder_only_init_cache(*, batch_size, num_layers, num_heads, params):
    """An empty cache (length 0) for ``batch_size`` rows, in the dtype of the parameters."""
    b = check.integer("batch_size", batch_size, lo=1)
    n = check.integer("num_layers", num_layers, lo=1)
    heads = check.integer("num_heads", num_heads, lo=1)
    p = check.params_of(params)
    cache = {"length": 0, "keep": tf.zeros((b, 0), dtype=tf.bool)}
    for i in range(n):
        attn = p.scope(f"layers.{i}").scope("self_attn")
        w_k = floating(attn.path("w_k"), attn.require("w_k", (None, None)))
        w_v = floating(attn.path("w_v"), attn.require("w_v", (None, None)))
        k = check.divides(f"query/key width {attn.path('w_k')}.shape[1]", heads, w_k.shape[1],
                          "H*K")
        v = check.divides(f"value width {attn.path('w_v')}.shape[1]", heads, w_v.shape[1], "H*V")
        cache[f"layers.{i}.k"] = tf.zeros((b, heads, 0, k), dtype=w_k.dtype)
        cache[f"layers.{i}.v"] = tf.zeros((b, heads, 0, v), dtype=w_v.dtype)
    return cache


def _cached_attention(cache, new_cache, i: int, mask, heads: int, p):
    """Self-attention of the new positions over the cached and the new keys/values."""
    def f(h):  # h (B, t, D)
        b, t, d = h.shape
        q = _split_heads(_linear(h, p, "w_q", "b_q", d), heads)  # (B, H, t, K)
        k_new = _split_heads(_linear(h, p, "w_k", "b_k", d), heads)  # (B, H, t, K)
        v_new = _split_heads(_linear(h, p, "w_v", "b_v", d), heads)  # (B, H, t, V)
        k = tf.concat([cache[f"layers.{i}.k"], k_new], axis=2)  # (B, H, n+t, K)
        v = tf.concat([cache[f"layers.{i}.v"], v_new], axis=2)  # (B, H, n+t, V)
        new_cache[f"layers.{i}.k"], new_cache[f"layers.{i}.v"] = k, v
        out, _ = sdpa(q, k, v, mask)  # (B, H, t, V)
        hv = out.shape[1] * out.shape[3]
        concat = tf.reshape(tf.transpose(out, (0, 2, 1, 3)), (b, t, hv))  # (B, t, H*V)
        return _linear(concat, p, "w_o", "b_o", hv, d)
    return f


def decoder_only_step(ids, cache, *, pad_id, num_layers, num_heads, norm="pre", eps=1e-5,
                      activation="gelu", params):
    """(logits (B, t, L), new cache) for the t new tokens ``ids`` (B, t) at positions
    n..n+t-1, n = cache["length"]: equal to decoder_only(all ids so far)[:, n:]."""
    p = check.params_of(params)
    L, _ = check.shape(p.require("embed.table", (None, None)))
    ids = token_ids("ids", ids, L, p.path("embed.table"))
    pad_id = check.integer("pad_id", pad_id)
    heads = check.integer("num_heads", num_heads, lo=1)
    n_layers = check.integer("num_layers", num_layers, lo=1)
    check.choice("norm", norm, NORMS)
    n = int(cache["length"])
    check.same("batch size", **{"ids.shape[0]": ids.shape[0],
                                "cache['keep'].shape[0]": cache["keep"].shape[0]})
    t = ids.shape[1]
    keep = tf.concat([cache["keep"], ids != pad_id], axis=1)  # (B, n+t)
    mask = keep[:, None, None, :] & causal_mask(t=t, s=n + t)  # (B, 1, t, n+t)
    new_cache = {"length": n + t, "keep": keep}
    h = learned_embed(ids, p, offset=n)  # (B, t, D)
    for i in range(n_layers):
        lp = p.scope(f"layers.{i}")
        attn = _cached_attention(cache, new_cache, i, mask, heads, lp.scope("self_attn"))
        h = _sublayer(h, attn, lp, "norm1", norm, eps)
        h = _sublayer(h, _ffn(activation, lp, None), lp, "norm2", norm, eps)
    if norm == "pre":
        h = layer_norm(h, eps=eps, params=p.scope("final_norm"))
    return lm_head(h, params=p.scope("lm_head")), new_cache


def _argmax(logits):
    """The arg-max over the last axis; ties go to the lowest id (tf.argmax's first hit)."""
    return tf.argmax(logits, axis=-1, output_type=tf.int64)


def _decoder_only_steps(prompt, pad_id, cfg: dict, p):
    """Next-token logits: the prompt once (prefill), then one token a step, via the cache."""
    cache = decoder_only_init_cache(batch_size=prompt.shape[0], num_layers=cfg["num_layers"],
                                    num_heads=cfg["num_heads"], params=p)
    logits, cache = decoder_only_step(prompt, cache, pad_id=pad_id, params=p, **cfg)
    while True:
        nxt = yield logits[:, -1]
        logits, cache = decoder_only_step(nxt[:, None], cache, pad_id=pad_id, params=p, **cfg)


def _transformer_steps(src_ids, pad_id, cfg: dict, tie: bool, p):
    """Next-token logits: the encoder once, the decoder on the whole prefix every step."""
    memory, m_src = encode(src_ids, pad_id, cfg, p)
    seq = yield
    while True:
        seq = yield decode(seq, memory, m_src, pad_id, cfg, tie, p)[:, -1]


def greedy_decode(prompt=None, src_ids=None, *, model, bos_id, eos_id, pad_id, max_len,
                  num_layers, num_heads, norm, eps=1e-5, activation, tie_embeddings=False,
                  params):
    """ids (B, max_len): the prompt (decoder_only) or [bos_id] (transformer), extended by
    next = argmax_j logits[:, -1, j] (ties: lowest id) until a row emits eos_id, after which
    the row holds pad_id; stops when every row has ended or the length is max_len."""
    check.choice("model", model, MODELS)
    p = check.params_of(params)
    bos_id, eos_id = check.integer("bos_id", bos_id), check.integer("eos_id", eos_id)
    pad_id = check.integer("pad_id", pad_id)
    check.choice("norm", norm, NORMS)
    cfg = dict(num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
               activation=activation)
    if model == "decoder_only":
        if prompt is None or src_ids is not None:
            raise ConfigError("model 'decoder_only' takes a prompt (B, P) and no src_ids")
        L, _ = check.shape(p.require("embed.table", (None, None)))
        seq = token_ids("prompt", prompt, L, p.path("embed.table"))
        value_check(~tf.reduce_any(seq == pad_id), lambda: (
            f"prompt must not contain pad_id={pad_id} (rows are not "
            f"padded), got prompt of shape {check.shape(seq)}"))
        max_pos = check.shape(p.require("pos.table", (None, None)))[0]
        max_len = check.integer("max_len", max_len, lo=seq.shape[1], hi=max_pos + 1)
        steps = _decoder_only_steps(seq, pad_id, cfg, p)
        logits = next(steps)
    else:
        if src_ids is None or prompt is not None:
            raise ConfigError("model 'transformer' takes src_ids (B, S) and no prompt (the "
                              "target starts with bos_id)")
        src_ids, _, _ = transformer_inputs(src_ids, None, pad_id, p)
        L = check.shape(p.require("tgt_embed.table", (None, None)))[0]
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
            if not 0 <= value < L:
                raise DomainError(f"{name}={value} is not a token id in [0, {L})")
        max_len = check.integer("max_len", max_len, lo=1)
        seq = tf.fill((src_ids.shape[0], 1), tf.constant(bos_id, tf.int64))
        steps = _transformer_steps(src_ids, pad_id, cfg, _flag(tie_embeddings), p)
        next(steps)
        logits = steps.send(seq) if max_len > 1 else None
    seq = tf.cast(seq, tf.int64)
    done = tf.zeros(seq.shape[0], dtype=tf.bool)
    pad = tf.constant(pad_id, tf.int64)
    while seq.shape[1] < max_len and not _all(done):
        nxt = tf.where(done, pad, _argmax(logits))  # (B,)
        done |= nxt == eos_id
        seq = tf.concat([seq, nxt[:, None]], axis=1)
        if seq.shape[1] < max_len and not _all(done):
            logits = steps.send(nxt if model == "decoder_only" else seq)
    rest = tf.fill((seq.shape[0], max_len - seq.shape[1]), pad)
    return tf.concat([seq, rest], axis=1)


def _all(done) -> bool:
    """Every row ended: known eagerly; a graph runs to max_len (ended rows emit pad_id)."""
    return tf.executing_eagerly() and bool(tf.reduce_all(done))


def _flag(value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"tie_embeddings must be True or False, got {value!r}")
    return bool(value)
