"""Recurrent components: the GRU cell (PyTorch/cuDNN gate convention), the GRU over a
sequence, and a GRU encoder-decoder with attention (Bahdanau or Luong style)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from attnspec.spec.errors import DTypeError, ShapeError
from attnspec.spec.trace import record

from .. import _checks as check
from ._core import floating, integers, same_device


class GRUWeights(NamedTuple):
    w_ih: torch.Tensor  # (I, 3H), column blocks r | z | n
    w_hh: torch.Tensor  # (H, 3H)
    b_ih: torch.Tensor  # (3H,)
    b_hh: torch.Tensor  # (3H,)


def _gru_weights(p, in_width: int, hidden: int | None = None) -> GRUWeights:
    """The four GRU parameters under ``p``; absent biases are zero."""
    if hidden is None:
        hidden = p.require("w_hh", (None, None)).shape[0]
    w_hh = floating(p.path("w_hh"), p.require("w_hh", (hidden, 3 * hidden)))
    w_ih = floating(p.path("w_ih"), p.require("w_ih", (in_width, 3 * hidden)), w_hh)
    zero = w_hh.new_zeros(3 * hidden)
    b_ih, b_hh = (floating(p.path(n), p.get(n, (3 * hidden,)), w_hh) if n in p else zero
                  for n in ("b_ih", "b_hh"))
    return GRUWeights(w_ih, w_hh, b_ih, b_hh)


def _sigmoid(x):
    return torch.sigmoid(x)  # 1 / (1 + e^-x) without overflow


def _step(x, h, w: GRUWeights):
    """h' = (1 - z) n + z h with r, z = sigmoid(x W_i{r,z} + b + h W_h{r,z} + b),
    n = tanh(x W_in + b_in + r (h W_hn + b_hn))."""
    hid = h.shape[-1]
    gi = x @ w.w_ih + w.b_ih  # (B, 3H)
    gh = h @ w.w_hh + w.b_hh  # (B, 3H)
    r = _sigmoid(gi[:, :hid] + gh[:, :hid])
    z = _sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = torch.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    return (1 - z) * n + z * h


def _state(name: str, h, batch: int, hidden: int, like):
    h = floating(name, h)
    same_device(name, h, like)
    check.rank(name, h, min_rank=2, max_rank=2)
    if tuple(h.shape) != (batch, hidden):
        raise ShapeError(f"{name} has shape {tuple(h.shape)}, expected (B, H) = {(batch, hidden)} "
                         f"(B from x, H from w_hh)")
    if h.dtype != like.dtype:
        raise DTypeError(f"{name} has dtype {h.dtype} but x has {like.dtype}")
    return h


def gru_cell(x, h, *, params):
    """One GRU step (Cho et al. 2014 as in cuDNN/PyTorch, reset after the hidden matmul):

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z = sigmoid(x W_iz + b_iz + h W_hz + b_hz),
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    """
    x = floating("x", x)
    b, i = check.rank("x", x, min_rank=2, max_rank=2)
    w = _gru_weights(check.params_of(params), i)
    same_device("w_hh", w.w_hh, x)
    h = _state("h", h, b, w.w_hh.shape[0], x)
    return _step(x, h, w)


def _run(x, h, w: GRUWeights):
    """outputs[:, t] = h_{t+1} = step(x[:, t], h_t); returns (outputs, h_T)."""
    outputs = []
    for t in range(x.shape[1]):
        h = _step(x[:, t], h, w)
        outputs.append(h)
    if not outputs:
        return x.new_zeros(x.shape[:2] + (h.shape[-1],)), h  # (B, 0, H)
    return torch.stack(outputs, dim=1), h  # (B, T, H)


def gru(x, h0=None, *, params):
    """h_0 = h0 (zeros when None), h_t = gru_cell(x_t, h_{t-1});
    returns outputs (B, T, H) = (h_1 .. h_T) and h_last = h_T."""
    x = floating("x", x)
    b, _, i = check.rank("x", x, min_rank=3, max_rank=3)
    w = _gru_weights(check.params_of(params), i)
    same_device("w_hh", w.w_hh, x)
    hid = w.w_hh.shape[0]
    h = x.new_zeros((b, hid)) if h0 is None else _state("h0", h0, b, hid, x)
    return _run(x, h, w)


# -- GRU encoder-decoder with attention --------------------------------------------

ATTENTION = ("additive", "dot", "general", "concat")


class Seq2Seq(NamedTuple):
    """Checked parameters and the encoded source of one call."""

    attention: str
    params: check.Params
    decoder: GRUWeights
    combine: torch.Tensor | None  # Luong W_c (H_enc + H, H~); None for additive
    outputs: torch.Tensor  # encoder outputs (B, S, H)
    keep: torch.Tensor  # (B, S) True where src_ids != pad_id
    h0: torch.Tensor  # decoder initial state (B, H)


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
    outputs, _ = _run(e, e.new_zeros((b, hid)), enc)  # (B, S, H)
    keep = src_ids != pad_id  # (B, S)
    last = s - 1 - torch.argmax(keep.flip(1).to(torch.int8), dim=1)  # (B,) last kept position
    rows = torch.arange(b, device=e.device)
    h0 = torch.where(keep.any(dim=1)[:, None], outputs[rows, last], 0).to(e.dtype)
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
    return Seq2Seq(attention, p, dec, combine, outputs, keep, h0)


def _attend(m: Seq2Seq, query):
    """query (B, H) -> context (B, H), weights (B, S) over the kept encoder outputs."""
    from .alignment import additive_attention, luong_attention

    q, mask, p = query[:, None, :], m.keep[:, None, :], m.params.scope("attention")
    if m.attention == "additive":
        context, weights = additive_attention(q, m.outputs, None, mask, params=p)
    else:
        context, weights = luong_attention(q, m.outputs, None, mask, score=m.attention,
                                           params=p)
    return context[:, 0], weights[:, 0]  # (B, H), (B, S)


def _decoder_step(m: Seq2Seq, y_prev, h_prev):
    """additive: c_t from h_{t-1}, h_t = GRU([E y; c_t], h_{t-1}), logits = h_t W_out + b;
    Luong: h_t = GRU(E y, h_{t-1}), c_t from h_t, h~_t = tanh([c_t; h_t] W_c),
    logits = h~_t W_out + b. Returns (h_t, logits, weights, context, h~_t)."""
    from .embedding import embedding, lm_head

    emb = embedding(y_prev, scale=False, params=m.params.scope("decoder.embed"))  # (B, E)
    if m.attention == "additive":
        context, weights = _attend(m, h_prev)
        h = _step(torch.cat([emb, context], dim=-1), h_prev, m.decoder)
        top = combined = h
    else:
        h = _step(emb, h_prev, m.decoder)
        context, weights = _attend(m, h)
        top = combined = torch.tanh(torch.cat([context, h], dim=-1) @ m.combine)
    logits = lm_head(top, tied=False, params=m.params.scope("out"))  # (B, L)
    return h, logits, weights, context, combined


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
    h, steps = m.h0, []
    for t in range(tgt_ids.shape[1]):
        step = _decoder_step(m, tgt_ids[:, t], h)
        h = step[0]
        steps.append(step)
    states, logits, weights, context, combined = (torch.stack(v, dim=1) for v in zip(*steps))
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
    ids = torch.full((b, max_len), pad_id, dtype=torch.int64, device=src_ids.device)
    ids[:, 0] = bos_id
    done = torch.zeros(b, dtype=torch.bool, device=src_ids.device)
    h = m.h0
    for t in range(1, max_len):
        if bool(done.all()):
            break
        h, logits = _decoder_step(m, ids[:, t - 1], h)[:2]
        ids[:, t] = torch.where(done, pad_id, torch.argmax(logits, dim=-1))
        done |= ids[:, t] == eos_id
    return ids
