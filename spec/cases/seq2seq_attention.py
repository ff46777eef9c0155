"""seq2seq_attention: GRU encoder, GRU decoder attending over the encoder outputs
(Bahdanau "additive" or Luong "dot" / "general" / "concat"), teacher-forced logits and
greedy decoding."""

import numpy as np

from ..oracle.seq2seq_attention import greedy
from ..oracle.seq2seq_attention import seq2seq_attention as oracle
from ..oracle.seq2seq_attention import seq2seq_greedy_decode as oracle_decode
from ._build import Component, Fn, Rng, error, gradient, value
from .gru_cell import gru_params

COMPONENT = Component("seq2seq_attention", {
    "seq2seq_attention": Fn(required=["attention", "pad_id"], module="rnn", inputs=["src_ids",
                            "tgt_ids"], attributes={"attention": None, "pad_id": None}, params=True,
                            trace=True, returns=["logits"], oracle=oracle),
    "seq2seq_greedy_decode": Fn(required=["attention", "pad_id", "bos_id", "eos_id", "max_len"],
                                module="rnn", inputs=["src_ids"], attributes={"attention": None,
                                "pad_id": None, "bos_id": None, "eos_id": None, "max_len": None},
                                params=True, returns=["ids"], oracle=oracle_decode),
})

PAD, BOS, EOS = 0, 1, 2


def tf(attention, pad_id=PAD):
    """Attributes of seq2seq_attention (all required: None in the header)."""
    return {"attention": attention, "pad_id": pad_id}


def dec(attention, max_len, **changes):
    """Attributes of seq2seq_greedy_decode."""
    return {"attention": attention, "pad_id": PAD, "bos_id": BOS, "eos_id": EOS,
            "max_len": max_len, **changes}
# Greedy vectors keep the top-2 logits at least this far apart at every decoded step, far
# wider than any dtype's tolerance, so every conforming backend picks the same ids.
MARGIN = 0.25


def s2s_params(rng, attention, *, src_vocab=16, vocab=16, e=8, h=8, a=8, out_scale=1.0,
               out_bias=True):
    """A full parameter set under the canonical paths."""
    p = {"encoder.embed.table": rng.weights((src_vocab, e))}
    p.update({f"encoder.gru.{k}": v for k, v in gru_params(rng, e, h, 0.75).items()})
    p["decoder.embed.table"] = rng.weights((vocab, e))
    d_in = e + h if attention == "additive" else e
    p.update({f"decoder.gru.{k}": v for k, v in gru_params(rng, d_in, h, 0.75).items()})
    if attention == "additive":
        p.update({"attention.w_q": rng.weights((h, a)), "attention.w_k": rng.weights((h, a)),
                  "attention.v": rng.weights((a,), 2.0)})
    elif attention == "general":
        p["attention.w"] = rng.weights((h, h), 2.0)
    elif attention == "concat":
        p.update({"attention.w": rng.weights((2 * h, a)), "attention.v": rng.weights((a,), 2.0)})
    if attention != "additive":
        p["decoder.combine.w"] = rng.weights((2 * h, h))
    p["out.w"] = rng.weights((h, vocab), out_scale)
    if out_bias:
        p["out.b"] = rng.weights((vocab,), 0.5)
    return p


def src_batch(rng, lengths, s, vocab=16):
    """(B, S) ids in [3, vocab), row b padded with PAD after lengths[b] tokens."""
    ids = rng.integers(3, vocab, (len(lengths), s))
    for b, n in enumerate(lengths):
        ids[b, n:] = PAD
    return ids


def tgt_batch(rng, b, t, vocab=16):
    ids = rng.integers(3, vocab, (b, t))
    ids[:, 0] = BOS
    return ids


def decode_case(rng, attention, lengths, s, max_len, vocab=12, tries=400):
    """Search the stream for weights whose greedy decode has a top-2 logit margin above
    MARGIN at every decoded step, where some row ends with EOS and not every row does.
    Deterministic (the same stream every time); raises if no candidate qualifies."""
    for _ in range(tries):
        params = s2s_params(rng, attention, vocab=vocab, out_scale=4.0)
        src = src_batch(rng, lengths, s)
        ids, chosen = greedy(src, attention, PAD, BOS, EOS, max_len, params)
        margins = [sorted(row)[-1] - sorted(row)[-2] for _, _, row in chosen]
        ended = (ids == EOS).any(axis=1)
        if min(margins) > MARGIN and ended.any() and not ended.all() \
                and len(set(ids[:, 1:].ravel().tolist())) >= 4:
            return src, params
    raise RuntimeError(f"no {attention} decoding candidate with a logit margin > {MARGIN} "
                       f"in {tries} tries")


def cases(rng):
    for kind in ("additive", "dot", "general", "concat"):
        yield value(f"seq2seq_attention/{kind}-001", "seq2seq_attention",
                    f"{kind} attention, B=2, S=6, T=4, E=H=A=8, L=16; the second source row has "
                    "2 trailing pads (masked keys; the decoder starts from the state at the last "
                    "real token).",
                    inputs={"src_ids": src_batch(rng, [6, 4], 6), "tgt_ids": tgt_batch(rng, 2, 4)},
                    attributes=tf(kind), params=s2s_params(rng, kind),
                    flags=["basic", kind, "padding", "attention-state"])
    yield value("seq2seq_attention/interior-pad-001", "seq2seq_attention",
                "additive, B=3, S=7, T=5: row 0 has a pad inside ([a b PAD c d PAD PAD]); the "
                "encoder reads it, attention masks it, the initial state is taken at 'd'.",
                inputs={"src_ids": np.array([[5, 7, PAD, 9, 4, PAD, PAD],
                                             [3, 8, 11, 6, 10, 12, 14],
                                             [13, 4, 6, PAD, PAD, PAD, PAD]]),
                        "tgt_ids": tgt_batch(rng, 3, 5)},
                attributes=tf("additive"), params=s2s_params(rng, "additive"),
                flags=["padding", "interior-padding", "initial-state"])
    yield value("seq2seq_attention/all-pad-001", "seq2seq_attention",
                "general, B=2: the second source row is all padding, so its attention weights "
                "and context are zero and its decoder starts from zeros.",
                inputs={"src_ids": src_batch(rng, [5, 0], 5), "tgt_ids": tgt_batch(rng, 2, 3)},
                attributes=tf("general"), params=s2s_params(rng, "general"),
                flags=["padding", "fully-masked"])
    yield value("seq2seq_attention/no-out-bias-001", "seq2seq_attention",
                "dot, B=2, S=4, T=6, H=12, vocabularies of 20 (source) and 24 (target), no "
                "out.b (optional, zero).",
                inputs={"src_ids": src_batch(rng, [3, 4], 4, 20),
                        "tgt_ids": tgt_batch(rng, 2, 6, 24)},
                attributes=tf("dot"),
                params=s2s_params(rng, "dot", src_vocab=20, vocab=24, h=12, out_bias=False),
                flags=["optional-params", "shapes"])
    yield value("seq2seq_attention/pad-id-001", "seq2seq_attention",
                "concat with pad_id=3 (not 0): token 0 is an ordinary source token.",
                inputs={"src_ids": np.array([[0, 5, 9, 3, 3], [7, 0, 4, 12, 6]]),
                        "tgt_ids": tgt_batch(rng, 2, 3)},
                attributes=tf("concat", 3),
                params=s2s_params(rng, "concat"), flags=["padding", "pad-id"])
    for kind, lengths in (("additive", [5, 3, 4]), ("dot", [5, 5, 2]), ("general", [4, 5, 3]),
                          ("concat", [5, 2, 5])):
        src, params = decode_case(rng, kind, lengths, 5, 7)
        yield value(f"seq2seq_attention/greedy-{kind}-001", "seq2seq_greedy_decode",
                    f"Greedy decoding, {kind}, B=3, S=5, max_len=7, L=12: the top-2 logits differ "
                    f"by more than {MARGIN} at every step; some rows emit EOS and are padded "
                    "after it, some run to max_len.",
                    inputs={"src_ids": src},
                    attributes=dec(kind, 7), params=params,
                    flags=["decoding", kind, "eos", "margin"])
    base = s2s_params(rng, "additive")
    yield error("seq2seq_attention/bad-attention-001", "seq2seq_attention",
                "attention='bahdanau' is not one of additive, dot, general, concat.",
                inputs={"src_ids": src_batch(rng, [3, 2], 3), "tgt_ids": tgt_batch(rng, 2, 2)},
                attributes=tf("bahdanau"), params=base,
                error="ConfigError", mentions=["attention", "bahdanau"])
    yield error("seq2seq_attention/batch-001", "seq2seq_attention",
                "src_ids has batch 2 but tgt_ids batch 3.",
                inputs={"src_ids": src_batch(rng, [3, 2], 3), "tgt_ids": tgt_batch(rng, 3, 2)},
                attributes=tf("additive"), params=base, error="ShapeError",
                mentions=["src_ids", "tgt_ids"])
    yield error("seq2seq_attention/dec-w-ih-001", "seq2seq_attention",
                "additive attention feeds [embed; context] (E + H = 16) to the decoder GRU, but "
                "decoder.gru.w_ih is (8, 24) (a Luong-style decoder's).",
                inputs={"src_ids": src_batch(rng, [3, 2], 3), "tgt_ids": tgt_batch(rng, 2, 2)},
                attributes=tf("additive"),
                params={**base, "decoder.gru.w_ih": rng.weights((8, 24))},
                error="ParameterError", mentions=["decoder.gru.w_ih", "(8, 24)"])
    luong = s2s_params(rng, "general")
    yield error("seq2seq_attention/missing-combine-001", "seq2seq_attention",
                "general attention without decoder.combine.w (Luong's W_c).",
                inputs={"src_ids": src_batch(rng, [3, 2], 3), "tgt_ids": tgt_batch(rng, 2, 2)},
                attributes=tf("general"),
                params={k: v for k, v in luong.items() if k != "decoder.combine.w"},
                error="ParameterError", mentions=["decoder.combine.w"])
    yield error("seq2seq_attention/float-ids-001", "seq2seq_attention",
                "Token ids given as floats.",
                inputs={"src_ids": src_batch(rng, [3, 2], 3).astype(np.float64),
                        "tgt_ids": tgt_batch(rng, 2, 2)},
                attributes=tf("additive"), params=base, error="DTypeError", mentions=["src_ids"])
    yield error("seq2seq_attention/max-len-001", "seq2seq_greedy_decode",
                "max_len=0: the output holds at least the BOS token.",
                inputs={"src_ids": src_batch(rng, [3, 2], 3)}, attributes=dec("additive", 0),
                params=base, error="ConfigError", mentions=["max_len"])
    yield error("seq2seq_attention/eos-range-001", "seq2seq_greedy_decode",
                "eos_id=16 is outside the vocabulary of 16 (out.w has 16 columns).",
                inputs={"src_ids": src_batch(rng, [3, 2], 3)},
                attributes=dec("additive", 5, eos_id=16),
                params=base, error="ConfigError", mentions=["eos_id", "16"])
    yield from tie_cases(Rng(f"{COMPONENT.id}/tie"))


def tie_cases(rng, tries=400):
    """A greedy decode whose top two logits are exactly equal (issue 19's mutation study):
    out.w's and out.b's column 3 copy those of the token row 0 picks first (id >= 4), so the
    two logits are equal at every step and, where they lead, the rule "ties: the lowest id"
    picks 3. Every other top-2 margin stays above MARGIN."""
    for _ in range(tries):
        params = s2s_params(rng, "dot", vocab=12, out_scale=4.0)
        src = src_batch(rng, [5, 3], 5)
        first = int(greedy(src, "dot", PAD, BOS, EOS, 6, params)[0][0, 1])
        if first < 4:
            continue
        params["out.w"][:, 3], params["out.b"][3] = params["out.w"][:, first], params["out.b"][first]
        ids, chosen = greedy(src, "dot", PAD, BOS, EOS, 6, params)
        tops = [sorted(set(row))[-2:] for _, _, row in chosen]
        tied = sum(1 for _, _, row in chosen if row[3] == max(row))
        if all(len(t) == 2 and t[1] - t[0] > MARGIN for t in tops) and tied >= 2 \
                and len(set(ids[:, 1:].ravel().tolist())) >= 3:
            yield value("seq2seq_attention/greedy-tie-001", "seq2seq_greedy_decode",
                        f"Greedy decoding (dot, B=2, S=5, max_len=6, L=12) with tied top "
                        f"logits: token 3's output column and bias equal token {first}'s, so "
                        f"their logits are equal at every step; where they lead ({tied} "
                        f"steps) the rule is the lowest id wins (as argmax's first maximum: "
                        f"numpy, torch, jax), so 3 is emitted, never {first}. Taking the last "
                        f"maximum fails; every other top-2 margin is above {MARGIN}.",
                        inputs={"src_ids": src}, attributes=dec("dot", 6), params=params,
                        flags=["decoding", "dot", "ties"])
            return
    raise RuntimeError(f"no tied decoding candidate in {tries} tries")


def grad_cases(r):
    for n, kind in enumerate(["additive", "dot", "general", "concat"], 1):
        how = ("the attention reads h_(t-1), so dh_(t-1) gets the attention's dquery besides "
               "the GRU's" if kind == "additive" else
               "h~ = tanh([c; h] W_c): decoder.combine.w gets [c; h]^T dz, and h_t gets the "
               "attention's dquery")
        yield gradient(f"seq2seq_attention/grad-00{n}", "seq2seq_attention",
                       f"{kind} attention, B = 2, S = 4, T = 3, E = H = A = 4, vocabularies of "
                       f"8, source row 1 padded after 2: backpropagation through time in the "
                       f"decoder ({how}), the encoder outputs get every step's dkeys plus dh_0 "
                       f"at each row's last real token, then the encoder's BPTT.",
                       inputs={"src_ids": src_batch(r, [4, 2], 4, vocab=8),
                               "tgt_ids": tgt_batch(r, 2, 3, vocab=8)},
                       attributes=tf(kind),
                       params=s2s_params(r, kind, src_vocab=8, vocab=8, e=4, h=4, a=4),
                       cotangents={"logits": r.uniform((2, 3, 8))},
                       flags=["gradient", kind, "padding", "attention-state"])
