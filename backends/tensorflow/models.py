"""Whole models on token ids: the encoder-decoder Transformer, an encoder-only (BERT-style)
and a decoder-only (GPT-style) model. Inference only: no dropout."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from attnspec.spec.errors import ConfigError
from attnspec.spec.trace import record, scope

from .. import _checks as check
from ._core import integers, value_check
from .attention import combined_mask, padding_mask
from .embedding import embedding, lm_head
from .layers import decoder, encoder
from .positional import learned_pe, sinusoidal_pe


def token_ids(name: str, ids, vocab: int, table_path: str):
    """(B, T) integer ids in [0, L), or DomainError naming the offending ids."""
    ids = integers(name, ids)
    check.rank(name, ids, min_rank=2, max_rank=2)
    ok = tf.reduce_all((ids >= 0) & (ids < vocab)) if check.shape(ids)[1] else tf.constant(True)

    def message(a):
        bad = a[(a < 0) | (a >= vocab)]
        return (f"{name} must be token ids in [0, {vocab}) ({table_path} has {vocab} "
                f"rows), got {sorted(set(bad.tolist()))} in {name} of shape {a.shape}")
    value_check(ok, message, ids)
    return ids


def _vocab(p, path: str, width=None) -> tuple:
    return check.shape(p.require(path, (None, width)))


def _sinusoidal_embed(ids, p, name: str):
    """table[ids] * sqrt(D) + PE(0..T-1)."""
    e = embedding(ids, scale=True, params=p.scope(name))  # (B, T, D)
    return e + tf.cast(sinusoidal_pe(length=e.shape[1], d_model=e.shape[2]), e.dtype)


def learned_embed(ids, p, offset: int = 0):
    """embed.table[ids] + pos.table[offset..offset+T-1], unscaled."""
    e = embedding(ids, scale=False, params=p.scope("embed"))  # (B, T, D)
    positions = tf.range(offset, offset + ids.shape[1], dtype=tf.int64)
    return e + tf.cast(learned_pe(positions, params=p.scope("pos")), e.dtype)


def transformer_inputs(src_ids, tgt_ids, pad_id, p):
    """Checked ids and the vocabulary sizes of the two tables."""
    L_src, D = _vocab(p, "src_embed.table")
    L_tgt, _ = _vocab(p, "tgt_embed.table", D)
    src_ids = token_ids("src_ids", src_ids, L_src, p.path("src_embed.table"))
    if tgt_ids is not None:
        tgt_ids = token_ids("tgt_ids", tgt_ids, L_tgt, p.path("tgt_embed.table"))
        check.same("batch size", **{"src_ids.shape[0]": src_ids.shape[0],
                                    "tgt_ids.shape[0]": tgt_ids.shape[0]})
    return src_ids, tgt_ids, check.integer("pad_id", pad_id)


def encode(src_ids, pad_id, cfg: dict, p, trace=None):
    """memory = Encoder(src_embed(src_ids) + PE, padding(src_ids)); returns (memory, mask)."""
    e_src = _sinusoidal_embed(src_ids, p, "src_embed")
    record(trace, "src_embed.output", e_src)
    m_src = padding_mask(src_ids, pad_id=pad_id)  # (B, 1, 1, S)
    memory = encoder(e_src, m_src, params=p.scope("encoder"), trace=scope(trace, "encoder"),
                     **cfg)
    return memory, m_src


def decode(tgt_ids, memory, m_src, pad_id, cfg: dict, tie_embeddings: bool, p, trace=None):
    """logits of Decoder(tgt_embed(tgt_ids) + PE, memory, padding & causal, m_src)."""
    e_tgt = _sinusoidal_embed(tgt_ids, p, "tgt_embed")
    record(trace, "tgt_embed.output", e_tgt)
    t = tgt_ids.shape[1]
    m_self = combined_mask(tgt_ids, pad_id=pad_id, t=t)  # (B, 1, T, T)
    h = decoder(e_tgt, memory, m_self, m_src, params=p.scope("decoder"),
                trace=scope(trace, "decoder"), **cfg)
    head = p.scope("tgt_embed") if tie_embeddings else p.scope("lm_head")
    return lm_head(h, tied=tie_embeddings, params=head)


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def transformer(src_ids, tgt_ids, *, pad_id, num_layers, num_heads, norm="post", eps=1e-5,
                activation="relu", tie_embeddings=False, params, trace=None):
    """memory = Encoder(E_src[src] sqrt(D) + PE, pad(src));
    logits = LMHead(Decoder(E_tgt[tgt] sqrt(D) + PE, memory, pad(tgt) & causal, pad(src))).
    """
    p = check.params_of(params)
    tie = _flag("tie_embeddings", tie_embeddings)
    src_ids, tgt_ids, pad_id = transformer_inputs(src_ids, tgt_ids, pad_id, p)
    cfg = dict(num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
               activation=activation)
    memory, m_src = encode(src_ids, pad_id, cfg, p, trace)
    return decode(tgt_ids, memory, m_src, pad_id, cfg, tie, p, trace)


def _model_ids(ids, pad_id, p):
    L, _ = _vocab(p, "embed.table")
    ids = token_ids("ids", ids, L, p.path("embed.table"))
    return ids, check.integer("pad_id", pad_id)


def encoder_only(ids, *, pad_id, num_layers, num_heads, norm="post", eps=1e-5,
                 activation="gelu", params, trace=None):
    """hidden = Encoder(E[ids] + P[0..T-1], pad(ids)) (no sqrt(D) scale, as BERT);
    logits = hidden W + b."""
    p = check.params_of(params)
    ids, pad_id = _model_ids(ids, pad_id, p)
    e = learned_embed(ids, p)
    record(trace, "embed.output", e)
    hidden = encoder(e, padding_mask(ids, pad_id=pad_id), num_layers=num_layers,
                     num_heads=num_heads, norm=norm, eps=eps, activation=activation,
                     params=p.scope("encoder"), trace=scope(trace, "encoder"))
    return hidden, lm_head(hidden, params=p.scope("lm_head"))


def decoder_only(ids, *, pad_id, num_layers, num_heads, norm="pre", eps=1e-5,
                 activation="gelu", params, trace=None):
    """logits = LMHead(Stack(E[ids] + P[0..T-1], pad(ids) & causal)); the stack is N encoder
    layers (no cross-attention), pre-norm with a final LayerNorm by default."""
    p = check.params_of(params)
    ids, pad_id = _model_ids(ids, pad_id, p)
    e = learned_embed(ids, p)
    record(trace, "embed.output", e)
    mask = combined_mask(ids, pad_id=pad_id, t=ids.shape[1])  # (B, 1, T, T)
    h = encoder(e, mask, num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
                activation=activation, params=p, trace=trace)
    return lm_head(h, params=p.scope("lm_head"))
