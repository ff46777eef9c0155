"""GRU encoder-decoder with attention: Bahdanau style ("additive") or Luong style
("dot", "general", "concat").

Encoder (every attention kind):
    e_s = E_src[src_s]                                   (unscaled embedding)
    o_s = gru(e)_s                                       encoder.outputs (B, S, H), h_0 = 0
    keep_s = (src_s != pad_id)                           key padding mask
    h_dec_0 = o_{last}, last = max{s : keep_s}           (zeros when the row is all padding)

Decoder step t (input token y_{t-1} = tgt_ids[:, t] when teacher-forced):
  additive (Bahdanau et al. 2015; the PyTorch seq2seq tutorial):
    a_t, c_t = additive_attention(h_{t-1}, o, keep)      attention from the PREVIOUS state
    h_t      = gru_cell([E_tgt[y_{t-1}]; c_t], h_{t-1})
    logits_t = h_t W_out + b_out
  dot / general / concat (Luong et al. 2015, no input feeding):
    h_t      = gru_cell(E_tgt[y_{t-1}], h_{t-1})
    a_t, c_t = luong_attention(h_t, o, keep, score)      attention from the CURRENT state
    ht_t     = tanh([c_t; h_t] W_c)                      decoder.combined
    logits_t = ht_t W_out + b_out

Greedy decoding: ids_0 = bos; ids_t = argmax(logits_{t-1}) (lowest id on ties) fed back;
after a row emits eos, the rest of the row is pad_id.
"""

import mpmath
import numpy as np

from .additive_attention import additive_attention, additive_attention_vjp
from .core import emap, matmul, merge, mpa, prefixed, sub, transpose_last, zeros
from .embedding import embedding, embedding_vjp, lm_head, lm_head_vjp
from .gru import gru, gru_vjp
from .gru_cell import gru_step_vjp
from .gru_cell import step as gru_step
from .luong_attention import luong_attention, luong_attention_vjp


def encode(src_ids, pad_id, params):
    src_ids = np.asarray(src_ids)
    e = embedding(src_ids, scale=False, params=sub(params, "encoder.embed"))["y"]  # (B, S, E)
    outputs = gru(e, None, params=sub(params, "encoder.gru"))["outputs"]  # (B, S, H)
    keep = src_ids != pad_id  # (B, S)
    b, _, hid = outputs.shape
    h0 = zeros((b, hid))
    for bi in range(b):
        kept = [s for s in range(src_ids.shape[1]) if keep[bi, s]]
        if kept:
            h0[bi] = outputs[bi, kept[-1]]
    return outputs, keep, h0


def _attend(attention, query, outputs, keep, params):
    """query (B, H) -> context (B, H), weights (B, S) over the kept encoder outputs."""
    q = query[:, None, :]
    mask = keep[:, None, :]
    p = sub(params, "attention")
    if attention == "additive":
        r = additive_attention(q, outputs, None, mask, params=p)
    else:
        r = luong_attention(q, outputs, None, mask, score=attention, params=p)
    return r["context"][:, 0], r["weights"][:, 0]


def decoder_step(attention, y_prev, h_prev, outputs, keep, params):
    """One decoder step; returns a dict of this step's values (logits (B, L) and the rest)."""
    emb = embedding(np.asarray(y_prev), scale=False, params=sub(params, "decoder.embed"))["y"]
    dec = sub(params, "decoder.gru")
    if attention == "additive":
        context, weights = _attend(attention, h_prev, outputs, keep, params)
        h = gru_step(np.concatenate([emb, context], axis=-1), h_prev, dec)
        top = h
        combined = None
    else:
        h = gru_step(emb, h_prev, dec)
        context, weights = _attend(attention, h, outputs, keep, params)
        combined = emap(mpmath.tanh, matmul(np.concatenate([context, h], axis=-1),
                                            mpa(params["decoder.combine.w"])))
        top = combined
    logits = lm_head(top, tied=False, params=sub(params, "out"))["logits"]
    return {"h": h, "weights": weights, "context": context, "combined": combined,
            "logits": logits}


def seq2seq_attention(src_ids, tgt_ids, attention, pad_id, params=None):
    outputs, keep, h0 = encode(src_ids, pad_id, params)
    tgt_ids = np.asarray(tgt_ids)
    h = h0
    steps = []
    for t in range(tgt_ids.shape[1]):
        r = decoder_step(attention, tgt_ids[:, t], h, outputs, keep, params)
        h = r["h"]
        steps.append(r)

    def stack(name):
        return np.stack([r[name] for r in steps], axis=1)  # (B, T, ...)

    result = {"logits": stack("logits"), "encoder.outputs": outputs,
              "decoder.initial_state": h0}
    if attention == "additive":
        result.update({"attention.weights": stack("weights"),
                       "attention.context": stack("context"), "decoder.states": stack("h")})
    else:
        result.update({"decoder.states": stack("h"), "attention.weights": stack("weights"),
                       "attention.context": stack("context"),
                       "decoder.combined": stack("combined")})
    return result


def greedy(src_ids, attention, pad_id, bos_id, eos_id, max_len, params):
    """ids (B, max_len) and, per decoded position t >= 1, the logits it was chosen from
    (None for rows already finished): [(t, b, logits row)]."""
    outputs, keep, h = encode(src_ids, pad_id, params)
    b = outputs.shape[0]
    ids = np.full((b, max_len), pad_id, dtype=np.int64)
    ids[:, 0] = bos_id
    done = np.zeros(b, dtype=bool)
    chosen = []
    for t in range(1, max_len):
        if done.all():
            break
        r = decoder_step(attention, ids[:, t - 1], h, outputs, keep, params)
        h = r["h"]
        for bi in range(b):
            if done[bi]:
                continue
            row = list(r["logits"][bi])
            best = max(range(len(row)), key=lambda j: (row[j], -j))  # ties -> lowest id
            ids[bi, t] = best
            chosen.append((t, bi, row))
            done[bi] = best == eos_id
    return ids, chosen


def seq2seq_greedy_decode(src_ids, attention, pad_id, bos_id, eos_id, max_len, params=None):
    return {"ids": greedy(src_ids, attention, pad_id, bos_id, eos_id, max_len, params)[0]}


def seq2seq_attention_vjp(cot, src_ids, tgt_ids, attention, pad_id, params=None):
    """Backward through the teacher-forced decoder, t = T-1..0, carrying dh:
        additive:  dh_t = LMHead^T dlogits_t + dh;  ([de; dc], dh_prev) = GRU step^T dh_t;
                   (dh_prev, do) += Attn^T dc  (query h_{t-1}, keys = values = o)
        Luong:     dht = LMHead^T dlogits_t;  dz = dht (1 - ht^2), ht = tanh([c; h] W_c):
                   dW_c += [c; h]^T dz, [dc; dh'] = dz W_c^T;  dh_t = dh' + dh + Attn^T dc (query);
                   (de, dh_prev) = GRU step^T dh_t
    then dh_0 goes to o at each row's last kept position, the encoder GRU's BPTT takes do, and
    the tables get their scatter-added rows."""

    src, tgt = np.asarray(src_ids), np.asarray(tgt_ids)
    outputs, keep, h0 = encode(src, pad_id, params)
    steps, h = [], h0
    for t in range(tgt.shape[1]):
        emb = embedding(tgt[:, t], scale=False, params=sub(params, "decoder.embed"))["y"]
        steps.append(dict(decoder_step(attention, tgt[:, t], h, outputs, keep, params),
                          h_prev=h, emb=emb))
        h = steps[-1]["h"]
    dlogits, dec, mask = mpa(cot["logits"]), sub(params, "decoder.gru"), keep[:, None, :]
    attn_p = sub(params, "attention")
    d_out, dh, grads = zeros(outputs.shape), zeros(h0.shape), {}
    d_emb = zeros(tgt.shape + (np.asarray(params["decoder.embed.table"]).shape[1],))

    def attend_vjp(dc, query):
        c = {"context": dc[:, None, :]}
        if attention == "additive":
            return additive_attention_vjp(c, query[:, None, :], outputs, None, mask, attn_p)
        return luong_attention_vjp(c, query[:, None, :], outputs, None, mask, attention, attn_p)

    for t in reversed(range(tgt.shape[1])):
        r = steps[t]
        top = r["h"] if attention == "additive" else r["combined"]
        gi, g = lm_head_vjp({"logits": dlogits[:, t]}, top, params=sub(params, "out"))
        grads = merge(grads, prefixed("out", g))
        if attention == "additive":
            emb_c = np.concatenate([r["emb"], r["context"]], axis=-1)
            dx, dh, g = gru_step_vjp(emb_c, r["h_prev"], dec, gi["x"] + dh)
            e = r["emb"].shape[1]
            ga, gp = attend_vjp(dx[:, e:], r["h_prev"])
            dh, d_emb[:, t] = dh + ga["query"][:, 0], dx[:, :e]
        else:
            cat = np.concatenate([r["context"], r["h"]], axis=-1)           # (B, 2H)
            dz = gi["x"] * (1 - r["combined"] * r["combined"])
            w_c = mpa(params["decoder.combine.w"])
            grads = merge(grads, {"decoder.combine.w": matmul(transpose_last(cat), dz)})
            dcat = matmul(dz, transpose_last(w_c))
            hid = r["h"].shape[1]
            ga, gp = attend_vjp(dcat[:, :hid], r["h"])
            dh_t = dcat[:, hid:] + dh + ga["query"][:, 0]
            d_emb[:, t], dh, g = gru_step_vjp(r["emb"], r["h_prev"], dec, dh_t)
        d_out = d_out + ga["keys"]
        grads = merge(grads, prefixed("decoder.gru", g), prefixed("attention", gp))
    for b in range(src.shape[0]):  # h_0 = o at the last kept position (zeros: no gradient)
        kept = [s for s in range(src.shape[1]) if keep[b, s]]
        if kept:
            d_out[b, kept[-1]] = d_out[b, kept[-1]] + dh[b]
    e_src = embedding(src, scale=False, params=sub(params, "encoder.embed"))["y"]
    ge, g = gru_vjp({"outputs": d_out}, e_src, None, sub(params, "encoder.gru"))
    _, g_src = embedding_vjp({"y": ge["x"]}, src, scale=False, params=sub(params, "encoder.embed"))
    _, g_tgt = embedding_vjp({"y": d_emb}, tgt, scale=False, params=sub(params, "decoder.embed"))
    return {}, merge(grads, prefixed("encoder.gru", g), prefixed("encoder.embed", g_src),
                      prefixed("decoder.embed", g_tgt))


VJPS = {"seq2seq_attention": seq2seq_attention_vjp}
