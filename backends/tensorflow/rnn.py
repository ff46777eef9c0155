"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention), the GRU over a
sequence, and a GRU encoder-decoder with attention (Bahdanau or Luong style)."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from attnspec.spec.errors import DTypeError, ShapeError
from attnspec.spec.trace import record

from .. import _checks as check
from ._core import floating, integers


class GRUWeights(NamedTuple):
    w_ih: tf.Tensor  # (I, 3H), column blocks r | z | n
    w_hh: tf.Tensor  # (H, 3H)
    b_ih: tf.Tensor  # (3H,)
    b_hh: tf.Tensor  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p``; absent biases are zero."""
    if hidden is None:
        hidden = p.require("w_hh", (None, None)).shape[0]
    w_hh = floating(p.path("w_hh"), p.require("w_hh", (hidden, 3 * hidden)))
    w_ih = floating(p.path("w_ih"), p.require("w_ih", (in_width, 3 * hidden)))
    zero = tf.zeros(3 * hidden, dtype=w_hh.dtype)
    b_ih, b_hh = (floating(p.path(n), p.get(n, (3 * hidden,))) if n in p else zero
                  for n in ("b_ih", "b_hh"))
    return GRUWeights(w_ih, w_hh, b_ih, b_hh)


def _sigmoid(x):
    return tf.sigmoid(x)  # 1 / (1 + e^-x) without overflow


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    return _step_gi(x @ w.w_ih + w.b_ih, h, w)


def _step_gi(gi, h, w: GRUWeights):
    """The step given gi = x W_ih + b_ih (B, 3H), so a sequence projects its inputs once."""
    gi_r, gi_z, gi_n = tf.split(gi, 3, axis=-1)  # (B, H) each
    gh_r, gh_z, gh_n = tf.split(h @ w.w_hh + w.b_hh, 3, axis=-1)
    r = _sigmoid(gi_r + gh_r)
    z = _sigmoid(gi_z + gh_z)
    n = tf.tanh(gi_n + r * gh_n)
    return (1 - z) * n + z * h


def _state(name: str, h, batch: int, hidden: int, dtype):
    h = floating(name, h)
    check.rank(name, h, min_rank=2, max_rank=2)
    if check.shape(h) != (batch, hidden):
        raise ShapeError(f"{name} has shape {check.shape(h)}, expected (B, H) = {(batch, hidden)} "
                         f"(B from x, H from w_hh)")
    if h.dtype != dtype:
        raise DTypeError(f"{name} has dtype {h.dtype} but x has {dtype}")
    return h


def gru_cell(x, h, *, params):
    """One GRU step (Cho et al. 2014 as in cuDNN/PyTorch, reset after the hidden matmul):

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z = sigmoid(x W_iz + b_iz + h W_hz + b_hz),
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    """
    x = floating("x", x)
    b, i = check.rank("x", x, min_rank=2, max_rank=2)
    w = _gru_weights(check.params_of(params), i)
    h = _state("h", h, b, w.w_hh.shape[0], x.dtype)
    return _step(x, h, w)


def _run(x, h, w: GRUWeights):
    """outputs[:, t] = h_{t+1} = step(x[:, t], h_t); returns (outputs, h_T)."""
    if x.shape[1] == 0:
        return tf.zeros((x.shape[0], 0, h.shape[-1]), dtype=x.dtype), h
    outputs = []
    for gi in tf.unstack(x @ w.w_ih + w.b_ih, axis=1):  # (B, 3H) per step
        h = _step_gi(gi, h, w)
        outputs.append(h)
    return tf.stack(outputs, axis=1), h  # (B, T, H)


def gru(x, h0=None, *, params):
    """h_0 = h0 (zeros when None), h_t = gru_cell(x_t, h_{t-1});
    returns outputs (B, T, H) = (h_1 .. h_T) and h_last = h_T."""
    x = floating("x", x)
    b, _, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    hid = w.w_hh.shape[0]
    h = tf.zeros((b, hid), dtype=x.dtype) if h0 is None else _state("h0", h0, b, hid, x.dtype)
    return _run(x, h, w)


# -- GRU encoder-decoder with attention --------------------------------------------

ATTENTION = ("additive", "dot", "general", "concat")


class Seq2Seq(NamedTuple):
    """Checked parameters and the encoded source of one call."""

    attention: str
    params: check.Params
    decoder: GRUWeights
    combine: tf.Tensor | None  # Luong W_c (H_enc + H, H~); None for additive
    outputs: tf.Tensor  # encoder outputs (B, S, H)
    keep: tf.Tensor  # (B, S) True where src_ids != pad_id
    h0: tf.Tensor  # decoder initial state (B, H)
    score_w: tf.Tensor | None  # the query side of the score: W_q, W (general), W_top (concat)
    score_keys: tf.Tensor  # the key side, computed once: o W_k, o, o W_bot (concat)
    score_v: tf.Tensor | None  # v of the tanh scores (additive, concat)


def _score_setup(attention: str, p, outputs):
    """(query-side weight, key side (B, S, .), v) of the alignment scores; the key side
    does not change from step to step, so it is computed once."""
    from .alignment import _param

    h = outputs.shape[-1]
    if attention == "dot":
        return None, outputs, None
    if attention == "general":
        return _param(p, "w", (h, h)), outputs, None
    if attention == "additive":
        w_q = _param(p, "w_q", (h, None))
        a = w_q.shape[1]
        return w_q, outputs @ _param(p, "w_k", (h, a)), _param(p, "v", (a,))
    w = _param(p, "w", (2 * h, None))  # concat: [q; k] W = q W_top + k W_bot
    v = _param(p, "v", (w.shape[1],))
    w_top, w_bot = tf.split(w, 2, axis=0)
    return w_top, outputs @ w_bot, v


def _ids(name: str, ids):
    ids = integers(name, ids)
    check.rank(name, ids, min_rank=2, max_rank=2)
    return ids


def _encode(src_ids, attention, pad_id, params) -> Seq2Seq:
    """o = GRU(E_src[src]); h_0 = o at the last non-pad position (zeros if none)."""
    from .embedding import embedding

    attention = check.choice("attention", attention, ATTENTION)
    pad_id = check.integer("pad_id", pad_id)
    p = check.params_of(params)
    e = floating(p.path("encoder.embed.table"),
                 embedding(src_ids, scale=False, params=p.scope("encoder.embed")))  # (B, S, E)
    enc = _gru_weights(p.scope("encoder.gru"), e.shape[-1])
    b, s, hid = e.shape[0], e.shape[1], enc.w_hh.shape[0]
    outputs, _ = _run(e, tf.zeros((b, hid), dtype=e.dtype), enc)  # (B, S, H)
    keep = src_ids != pad_id  # (B, S)
    last = s - 1 - tf.argmax(tf.cast(keep[:, ::-1], tf.int32), axis=1)  # (B,) last kept
    h0 = tf.where(tf.reduce_any(keep, axis=1)[:, None], tf.gather(outputs, last, batch_dims=1),
                  tf.zeros((b, hid), dtype=e.dtype))
    e_t = p.require("decoder.embed.table", (None, None)).shape[1]
    combine = None
    if attention == "additive":
        dec = _gru_weights(p.scope("decoder.gru"), e_t + hid, hid)
    else:
        dec = _gru_weights(p.scope("decoder.gru"), e_t, hid)
        combine = floating(p.path("decoder.combine.w"),
                           p.require("decoder.combine.w", (2 * hid, None)))
    vocab = p.require("decoder.embed.table", (None, None)).shape[0]
    top = hid if combine is None else combine.shape[1]
    p.require("out.w", (top, vocab))
    score = _score_setup(attention, p.scope("attention"), outputs)
    return Seq2Seq(attention, p, dec, combine, outputs, keep, h0, *score)


def _attend_all(m: Seq2Seq, q):
    """queries q (B, T, H) -> context (B, T, H), weights (B, T, S) over the kept encoder
    outputs: additive e_s = v . tanh(q W_q + o_s W_k); dot e_s = q . o_s;
    general e_s = q W o_s; concat e_s = v . tanh([q; o_s] W); w = masked softmax_s(e),
    context = w o."""
    from .alignment import _attend as attend
    from .alignment import _tanh_score

    if m.attention in ("additive", "concat"):
        scores = _tanh_score(q @ m.score_w, m.score_keys, m.score_v)  # (B, T, S)
    else:
        q = q if m.score_w is None else q @ m.score_w
        scores = tf.matmul(q, m.score_keys, transpose_b=True)  # (B, T, S)
    return attend(scores, m.outputs, tf.expand_dims(m.keep, 1))


def _attend(m: Seq2Seq, query):
    """query (B, H) -> context (B, H), weights (B, S)."""
    context, weights = _attend_all(m, tf.expand_dims(query, 1))
    return tf.squeeze(context, 1), tf.squeeze(weights, 1)


def _decoder_step(m: Seq2Seq, emb, h_prev):
    """additive: c_t from h_{t-1}, h_t = GRU([E y; c_t], h_{t-1}), logits = h_t W_out + b;
    Luong: h_t = GRU(E y, h_{t-1}), c_t from h_t, h~_t = tanh([c_t; h_t] W_c),
    logits = h~_t W_out + b. ``emb`` is E y_{t-1} (B, E).
    Returns (h_t, logits, weights, context, h~_t)."""
    if m.attention == "additive":
        context, weights = _attend(m, h_prev)
        h = _step(tf.concat([emb, context], axis=-1), h_prev, m.decoder)
        top = combined = h
    else:
        h = _step(emb, h_prev, m.decoder)
        context, weights = _attend(m, h)
        top = combined = tf.tanh(tf.concat([context, h], axis=-1) @ m.combine)
    return h, _logits(m, top), weights, context, combined


def _logits(m: Seq2Seq, top):
    from .embedding import lm_head

    return lm_head(top, tied=False, params=m.params.scope("out"))  # (..., L)


def _embed(m: Seq2Seq, ids):
    from .embedding import embedding

    return embedding(ids, scale=False, params=m.params.scope("decoder.embed"))


def seq2seq_attention(src_ids, tgt_ids, *, attention, pad_id, params, trace=None):
    """Teacher-forced logits (B, T, L): step t reads tgt_ids[:, t] and predicts the next
    token. Records encoder.outputs, decoder.initial_state, attention.weights (B, T, S),
    attention.context, decoder.states and (Luong) decoder.combined."""
    src_ids, tgt_ids = _ids("src_ids", src_ids), _ids("tgt_ids", tgt_ids)
    check.same("batch size", **{"src_ids.shape[0]": src_ids.shape[0],
                                "tgt_ids.shape[0]": tgt_ids.shape[0]})
    if tgt_ids.shape[1] < 1:
        raise ShapeError(f"tgt_ids must hold at least one token per row, got shape "
                         f"{tgt_ids.shape}")
    m = _encode(src_ids, attention, pad_id, params)
    embs = _embed(m, tgt_ids)  # (B, T, E)
    if m.attention == "additive":  # c_t depends on h_{t-1}: one step at a time
        h, steps = m.h0, []
        for emb in tf.unstack(embs, axis=1):  # (B, E) per step
            context, weights = _attend(m, h)
            h = _step(tf.concat([emb, context], axis=-1), h, m.decoder)
            steps.append((h, weights, context))
        states, weights, context = (tf.stack(v, axis=1) for v in zip(*steps))
        top = combined = states
    else:  # Luong: the states do not depend on the attention, so it runs on all at once
        states, _ = _run(embs, m.h0, m.decoder)  # (B, T, H)
        context, weights = _attend_all(m, states)  # (B, T, H), (B, T, S)
        top = combined = tf.tanh(tf.concat([context, states], axis=-1) @ m.combine)
    logits = _logits(m, top)  # (B, T, L)
    record(trace, "encoder.outputs", m.outputs)
    record(trace, "decoder.initial_state", m.h0)
    record(trace, "attention.weights", weights)
    record(trace, "attention.context", context)
    record(trace, "decoder.states", states)
    if m.attention != "additive":
        record(trace, "decoder.combined", combined)
    return logits


def seq2seq_greedy_decode(src_ids, *, attention, pad_id, bos_id, eos_id, max_len, params):
    """ids[:, 0] = bos_id; ids[:, t] = argmax logits_{t-1} (lowest id on ties), fed back;
    after a row emits eos_id the rest of it is pad_id."""
    src_ids = _ids("src_ids", src_ids)
    max_len = check.integer("max_len", max_len, lo=1)
    m = _encode(src_ids, attention, pad_id, params)
    vocab = m.params.require("out.w").shape[1]
    bos_id, eos_id, pad_id = (check.integer(n, v, lo=0, hi=vocab - 1) for n, v in
                              (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)))
    b = src_ids.shape[0]
    ids = [tf.fill((b,), tf.constant(bos_id, tf.int64))]
    done = tf.zeros(b, dtype=tf.bool)
    h = m.h0
    for t in range(1, max_len):
        if tf.executing_eagerly() and bool(tf.reduce_all(done)):
            ids.extend([tf.fill((b,), tf.constant(pad_id, tf.int64))] * (max_len - t))
            break
        h, logits = _decoder_step(m, _embed(m, ids[t - 1]), h)[:2]
        ids.append(tf.where(done, tf.constant(pad_id, tf.int64), tf.argmax(logits, axis=-1)))
        done |= ids[t] == eos_id
    return tf.stack(ids, axis=1)
