"""The GRU encoder-decoder with attention (Bahdanau or Luong style), over the backend's
``gru``, ``gru_cell``, ``additive_attention``, ``luong_attention``, ``embedding`` and
``lm_head``."""

from __future__ import annotations

from typing import Any, NamedTuple

from attnspec.spec.errors import ShapeError
from attnspec.spec.trace import record

from .. import _checks as check
from . import Composite

ATTENTION = ("additive", "dot", "general", "concat")


class Encoded(NamedTuple):
    """Checked parameters and the encoded source of one call."""

    attention: str
    params: check.Params
    combine: Any  # Luong W_c (H_enc + H, H~); None for additive
    outputs: Any  # encoder outputs (B, S, H)
    keep: Any  # (B, S) True where src_ids != pad_id
    h0: Any  # decoder initial state (B, H)


class Seq2Seq(Composite):
    EXPORTS = ("seq2seq_attention", "seq2seq_greedy_decode")

    def _ids(self, name: str, ids):
        ids = self.ops.integers(name, ids)
        check.rank(name, ids, min_rank=2, max_rank=2)
        return ids

    def _decoder_params(self, p, in_width: int, hid: int) -> None:
        """The decoder GRU's shapes, checked before anything runs."""
        p.require("w_hh", (hid, 3 * hid))
        p.require("w_ih", (in_width, 3 * hid))
        for name in ("b_ih", "b_hh"):
            p.get(name, (3 * hid,))

    def _encode(self, src_ids, attention, pad_id, params) -> Encoded:
        """o = GRU(E_src[src]); h_0 = o at the last non-pad position (zeros if none)."""
        ops, k = self.ops, self.k
        attention = check.choice("attention", attention, ATTENTION)
        pad_id = check.integer("pad_id", pad_id)
        p = check.params_of(params)
        e = ops.floating(p.path("encoder.embed.table"),
                         k.embedding(src_ids, scale=False, params=p.scope("encoder.embed")))
        outputs, _ = k.gru(e, None, params=p.scope("encoder.gru"))  # (B, S, H)
        s, hid = outputs.shape[1], outputs.shape[2]
        keep = src_ids != pad_id  # (B, S)
        last = s - 1 - ops.argmax(ops.reverse(keep, axis=1), axis=1)  # (B,) last kept position
        h0 = ops.where(ops.any_(keep, axis=1)[:, None], ops.take_rows(outputs, last), 0)
        e_t = p.require("decoder.embed.table", (None, None)).shape[1]
        combine = None
        if attention == "additive":
            self._decoder_params(p.scope("decoder.gru"), e_t + hid, hid)
        else:
            self._decoder_params(p.scope("decoder.gru"), e_t, hid)
            combine = ops.floating(p.path("decoder.combine.w"),
                                   p.require("decoder.combine.w", (2 * hid, None)))
        vocab = p.require("decoder.embed.table", (None, None)).shape[0]
        top = hid if combine is None else combine.shape[1]
        p.require("out.w", (top, vocab))
        return Encoded(attention, p, combine, outputs, keep, h0)

    def _attend(self, m: Encoded, queries):
        """queries (B, T, H) -> context (B, T, H), weights (B, T, S) over the kept encoder
        outputs."""
        mask, p = m.keep[:, None, :], m.params.scope("attention")  # (B, 1, S)
        if m.attention == "additive":
            return self.k.additive_attention(queries, m.outputs, None, mask, params=p)
        return self.k.luong_attention(queries, m.outputs, None, mask, score=m.attention, params=p)

    def _combine(self, m: Encoded, context, h):
        """Luong: h~ = tanh([c; h] W_c)."""
        ops = self.ops
        return ops.tanh(ops.matmul(ops.concat([context, h], axis=-1), m.combine))

    def _logits(self, m: Encoded, top):
        return self.k.lm_head(top, tied=False, params=m.params.scope("out"))  # (..., L)

    def _embed(self, m: Encoded, ids):
        return self.k.embedding(ids, scale=False, params=m.params.scope("decoder.embed"))

    def _decoder_step(self, m: Encoded, emb, h_prev):
        """additive: c_t from h_{t-1}, h_t = GRU([E y; c_t], h_{t-1}), logits = h_t W_out + b;
        Luong: h_t = GRU(E y, h_{t-1}), c_t from h_t, h~_t = tanh([c_t; h_t] W_c),
        logits = h~_t W_out + b. ``emb`` is E y_{t-1} (B, E). Returns (h_t, logits, weights,
        context)."""
        gru = m.params.scope("decoder.gru")
        if m.attention == "additive":
            context, weights = self._attend(m, h_prev[:, None, :])
            x = self.ops.concat([emb, context[:, 0]], axis=-1)  # (B, E + H)
            h = top = self.k.gru_cell(x, h_prev, params=gru)
        else:
            h = self.k.gru_cell(emb, h_prev, params=gru)
            context, weights = self._attend(m, h[:, None, :])
            top = self._combine(m, context[:, 0], h)
        return h, self._logits(m, top), weights[:, 0], context[:, 0]

    def _teacher_forced(self, m: Encoded, embs):
        """(states, weights, context, combined or None), each (B, T, .)."""
        ops = self.ops
        if m.attention != "additive":  # Luong: the states do not depend on the attention
            states, _ = self.k.gru(embs, m.h0, params=m.params.scope("decoder.gru"))  # (B, T, H)
            context, weights = self._attend(m, states)  # (B, T, H), (B, T, S)
            return states, weights, context, self._combine(m, context, states)
        h, steps = m.h0, []
        for emb in ops.unstack(embs, axis=1):  # additive: c_t depends on h_{t-1}
            h, _, weights, context = self._decoder_step(m, emb, h)
            steps.append((h, weights, context))
        states, weights, context = (ops.stack(v, axis=1) for v in zip(*steps))
        return states, weights, context, None

    def seq2seq_attention(self, src_ids, tgt_ids, *, attention, pad_id, params, trace=None):
        """Teacher-forced logits (B, T, L): step t reads tgt_ids[:, t] and predicts the next
        token. Records encoder.outputs, decoder.initial_state, attention.weights (B, T, S),
        attention.context, decoder.states and (Luong) decoder.combined."""
        src_ids, tgt_ids = self._ids("src_ids", src_ids), self._ids("tgt_ids", tgt_ids)
        check.same("batch size", **{"src_ids.shape[0]": src_ids.shape[0],
                                    "tgt_ids.shape[0]": tgt_ids.shape[0]})
        if tgt_ids.shape[1] < 1:
            raise ShapeError(f"tgt_ids must hold at least one token per row, got shape "
                             f"{check.shape(tgt_ids)}")
        m = self._encode(src_ids, attention, pad_id, params)
        states, weights, context, combined = self._teacher_forced(m, self._embed(m, tgt_ids))
        record(trace, "encoder.outputs", m.outputs)
        record(trace, "decoder.initial_state", m.h0)
        record(trace, "attention.weights", weights)
        record(trace, "attention.context", context)
        record(trace, "decoder.states", states)
        if combined is not None:
            record(trace, "decoder.combined", combined)
        return self._logits(m, states if combined is None else combined)  # (B, T, L)

    def seq2seq_greedy_decode(self, src_ids, *, attention, pad_id, bos_id, eos_id, max_len,
                              params):
        """ids[:, 0] = bos_id; ids[:, t] = argmax logits_{t-1} (lowest id on ties), fed back;
        after a row emits eos_id the rest of it is pad_id."""
        ops = self.ops
        src_ids = self._ids("src_ids", src_ids)
        max_len = check.integer("max_len", max_len, lo=1)
        m = self._encode(src_ids, attention, pad_id, params)
        vocab = m.params.require("out.w").shape[1]
        bos_id, eos_id, pad_id = (check.integer(n, v, lo=0, hi=vocab - 1) for n, v in
                                  (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)))
        b = src_ids.shape[0]
        ids = [ops.full((b,), bos_id, like=src_ids)]  # one (B,) column per position
        done = ops.falses((b,), like=src_ids)
        h = m.h0
        for t in range(1, max_len):
            if ops.known_all(done):
                ids.extend([ops.full((b,), pad_id, like=src_ids)] * (max_len - t))
                break
            h, logits = self._decoder_step(m, self._embed(m, ids[t - 1]), h)[:2]
            ids.append(ops.where(done, pad_id, ops.argmax(logits, axis=-1)))
            done = done | (ids[t] == eos_id)
        return ops.stack(ids, axis=1)  # (B, max_len)
