"""beam_search: beam search over decoder_only (from a prompt) and the encoder-decoder
transformer (from src_ids), with transformers' rules: 2K candidates a step, EOS hypotheses
counted only within the top K, finished hypotheses scored sum / g**length_penalty (g the
generated length), early_stopping True / False / "never".

The ids are compared exactly at every dtype, so every comparison that decides them (the
cut of the live beams, an EOS candidate's rank against K, the cut and order of the finished
hypotheses, the stopping test) keeps a margin of MARGIN in score units, or is an exact tie
made by twin tokens (equal embedding rows and LM-head columns: equal logits at every dtype).
Candidate parameters come from named streams ``beam_search/<case>/<attempt>``; the first
attempt that keeps the margins and shows what the case is about is used.
"""

import numpy as np

from ..generate import GenerationError
from ..oracle.beam_search import beam_search as oracle
from ..oracle.beam_search import remember, run
from ._build import Component, Fn, Rng, error, value
from .encoder_only import lm_params
from .transformer import ids, transformer_params

COMPONENT = Component("beam_search", {
    "beam_search": Fn(module="decoding", inputs=["prompt", "src_ids"],
                      optional=["prompt", "src_ids"], returns=["ids", "scores"],
                      required=["model", "bos_id", "eos_id", "pad_id", "max_len", "num_beams",
                                "num_layers", "num_heads", "norm", "activation"],
                      attributes={"eps": 1e-5, "tie_embeddings": False, "length_penalty": 1.0,
                                  "early_stopping": False, "num_return_sequences": 1},
                      params=True, oracle=oracle),
})

BOS, EOS, PAD = 1, 2, 0
# score units (benchmarks/tolerances.py checks that no correct order flips an id); the random
# models' logits are larger (to 10) and move more at bfloat16 than the bigram tables'
MARGIN = 0.2
RANDOM_MARGIN = 0.4


class _Narrow(Exception):
    pass


def _strict(margin):
    def note(kind, gap, scale=1):
        if gap != 0 and gap < margin * scale:
            raise _Narrow(f"{kind}: {float(gap):.3f}")
    return note


def search(case: str, build, attrs: dict, want, attempts: int = 400, unlike=(), margin=MARGIN):
    """The first candidate (inputs, params) whose search keeps the margins, satisfies
    ``want(ids, scores)`` and decodes other ids under each attribute set of ``unlike``."""
    for attempt in range(attempts):
        inputs, params = build(Rng(f"beam_search/{case}/{attempt}"))
        kwargs = dict(prompt=inputs.get("prompt"), src_ids=inputs.get("src_ids"), **attrs,
                      params=params)
        try:
            result = run(**kwargs, note=_strict(margin))
        except _Narrow:
            continue
        if not want(*result):
            continue
        if any(_same(run(**{**kwargs, **u}), result) for u in unlike):
            continue
        remember(result, **kwargs)
        return inputs, params
    raise GenerationError(f"beam_search/{case}: no candidate in {attempts} attempts keeps the "
                          f"score margins and shows the case")


def _same(a, b) -> bool:
    return a[0].shape == b[0].shape and np.array_equal(a[0], b[0])


def attrs_of(max_len, k=2, n=1, heads=2, norm="pre", activation="gelu", model="decoder_only",
             **beam):
    return {"model": model, "bos_id": BOS, "eos_id": EOS, "pad_id": PAD, "max_len": max_len,
            "num_beams": k, "num_layers": n, "num_heads": heads, "norm": norm, "eps": 1e-5,
            "activation": activation, "tie_embeddings": False, "length_penalty": 1.0,
            "early_stopping": False, "num_return_sequences": k, **beam}


def gpt(prompt_len, b, n, d, vocab, norm="pre", eos_bias=0.0, lm_scale=3.0):
    """A random decoder_only; the bias of EOS set to eos_bias, of pad_id to -8 (never likely)."""
    def build(r):
        prompt = ids(r, vocab, [prompt_len] * b, prompt_len, bos_id=BOS)
        p = lm_params(r, n, d, 2 * d, vocab, 8, norm, None, lm_scale=lm_scale)
        p["lm_head.b"][EOS], p["lm_head.b"][PAD] = eos_bias, -8.0  # exact in bfloat16
        return {"prompt": prompt}, p
    return build


def bigram(prompt, vocab=16, d=16, spread=1.0, twins=(), eos_bias=0.0):
    """decoder_only whose logits depend on the last token only: one-hot embeddings (twins
    share a row), zero positions, w_o = 0 and w2 = 0 (the layer passes x through), so the
    logits are LN(E[last]) W + b, a table drawn with ``spread``. Twin tokens (tuples) have equal
    embedding rows and LM-head columns: their logits and continuations tie exactly."""
    def build(r):
        p = lm_params(r, 1, d, 2 * d, vocab, 8, "pre", None, lm_scale=spread)
        slot = list(range(vocab))
        for group in twins:
            for t in group[1:]:
                slot[t] = slot[group[0]]
        p["embed.table"] = np.zeros((vocab, d))
        p["embed.table"][np.arange(vocab), slot] = 1.0
        p["pos.table"] = np.zeros_like(p["pos.table"])
        for name in ("self_attn.w_o", "self_attn.b_o", "ffn.w2", "ffn.b2"):
            p[f"layers.0.{name}"] = np.zeros_like(p[f"layers.0.{name}"])
        p["final_norm.gamma"], p["final_norm.beta"] = np.ones(d), np.zeros(d)
        p["lm_head.b"] = np.zeros(vocab)
        p["lm_head.b"][EOS], p["lm_head.b"][PAD] = eos_bias, -8.0
        for group in twins:
            for t in group[1:]:
                p["lm_head.w"][:, t] = p["lm_head.w"][:, group[0]]
        return {"prompt": np.array(prompt, dtype=np.int64)}, p
    return build


def seq2seq(lengths, s, n, d, vocab, norm="post", eos_bias=0.0):
    def build(r):
        src = ids(r, vocab, lengths, s)
        p = transformer_params(r, n, d, 2 * d, vocab, norm=norm, lm_scale=3.0)
        p["lm_head.b"][EOS], p["lm_head.b"][PAD] = eos_bias, -8.0
        for i in range(n):  # sharper cross-attention: the source must steer the output
            for w in ("w_q", "w_k"):
                name = f"decoder.layers.{i}.cross_attn.{w}"
                p[name] = p[name] * 2
        return {"src_ids": src}, p
    return build


def _generated(x, start):
    """Per hypothesis, the generated tokens up to and with EOS."""
    out = []
    for row in x:
        for hyp in row:
            g = [int(t) for t in hyp[start:]]
            out.append(g[:g.index(EOS) + 1] if EOS in g else g)
    return out


def no_pad(start):
    """No hypothesis generates pad_id (an ordinary token, but its key is then masked)."""
    return lambda x, s: all(PAD not in g for g in _generated(x, start))


def some_eos(start, also=lambda x, s: True):
    """Some returned hypothesis ends with EOS and some other does not (max_len)."""
    def want(x, s):
        ends = [EOS in g for g in _generated(x, start)]
        return no_pad(start)(x, s) and any(ends) and not all(ends) and also(x, s)
    return want


def eos_lengths_differ(start):
    """Returned hypotheses of different generated lengths (the length penalty matters)."""
    def want(x, s):
        gens = _generated(x, start)
        return no_pad(start)(x, s) and len({len(g) for g in gens}) > 1
    return want


def cases(rng):
    yield from _value_cases()
    yield from _error_cases(rng)
    yield from _gpt2_cases()


def _value_cases():
    a = attrs_of(7)
    inputs, p = search("gpt-001", gpt(2, 2, 1, 16, 16, eos_bias=1.0), a, some_eos(2),
                       margin=RANDOM_MARGIN)
    yield value("beam_search/gpt-001", "beam_search",
                "decoder_only, N=1 pre-norm, D=16, H=2, vocabulary 16, prompt (2, 2), K = 2 "
                "beams, both returned, max_len 7: hypotheses that end at EOS and others that "
                "run to max_len, each scored sum of log-probs / g (g the generated length).",
                inputs=inputs, attributes=a, params=p, flags=["basic", "decoder-only", "eos"])
    a = attrs_of(8, k=3, n=2)
    inputs, p = search("gpt-deep-001", gpt(3, 1, 2, 8, 12, eos_bias=1.5), a,
                       eos_lengths_differ(3), margin=RANDOM_MARGIN)
    yield value("beam_search/gpt-deep-001", "beam_search",
                "decoder_only, N=2, D=8, vocabulary 12, K = 3 (6 candidates a step), one row, "
                "prompt length 3, max_len 8, the 3 finished hypotheses of different lengths "
                "returned best first.",
                inputs=inputs, attributes=a, params=p, flags=["decoder-only", "eos"])
    a = attrs_of(6, model="transformer", norm="post", activation="relu")
    inputs, p = search("seq2seq-001", seq2seq([5, 3], 5, 1, 16, 12, eos_bias=1.0), a,
                       no_pad(1), margin=RANDOM_MARGIN)
    yield value("beam_search/seq2seq-001", "beam_search",
                "transformer, N=1 post-norm, ReLU, D=16, H=2, src_ids (2, 5) with row 1 padded "
                "after 3; the target starts with BOS (P = 1: g counts the tokens after BOS); "
                "K = 2, max_len 6.",
                inputs=inputs, attributes=a, params=p, flags=["basic", "encoder-decoder"])
    # length penalty: the same bigram table decodes other ids under alpha = 0, 1, 2
    for id_, alpha, eos_bias, desc in (
            ("length-penalty-001", 0.0, 1.5, "length_penalty = 0: the plain sum of log-probs (the "
             "canonical beam search), which favours short hypotheses"),
            ("length-penalty-002", 2.0, 2.5, "length_penalty = 2: sum / g^2 favours long ones"),
            ("length-penalty-003", -1.0, 1.5, "length_penalty = -1: sum * g, favouring short ones "
             "more than the sum")):
        a = attrs_of(7, length_penalty=alpha)
        inputs, p = search(id_, bigram([[BOS, 5]], spread=1.5, eos_bias=eos_bias), a,
                           eos_lengths_differ(2),
                           unlike=[{"length_penalty": 1.0}])
        yield value(f"beam_search/{id_}", "beam_search",
                    f"{desc}; a bigram decoder_only (logits set by the last token), K = 2, "
                    "max_len 7; decodes other ids than length_penalty = 1.",
                    inputs=inputs, attributes=a, params=p, flags=["length-penalty"])
    a = attrs_of(7, early_stopping=True)
    inputs, p = search("early-stopping-001", bigram([[BOS, 4]], spread=1.5, eos_bias=1.5), a,
                       eos_lengths_differ(2), unlike=[{"early_stopping": False}])
    yield value("beam_search/early-stopping-001", "beam_search",
                "early_stopping = True: a row stops as soon as K = 2 hypotheses have finished, "
                "so a later, better one is never found (False goes on and returns other ids).",
                inputs=inputs, attributes=a, params=p, flags=["early-stopping", "eos"])
    a = attrs_of(7, early_stopping="never", length_penalty=2.0)
    inputs, p = search("early-stopping-002", bigram([[BOS, 6]], spread=1.5, eos_bias=2.5), a,
                       eos_lengths_differ(2), unlike=[{"early_stopping": False}])
    yield value("beam_search/early-stopping-002", "beam_search",
                "early_stopping = 'never' with length_penalty 2: the stopping test bounds a "
                "live beam's best score with the longest length max_len - P, where False's "
                "uses the current length and stops too soon: other ids.",
                inputs=inputs, attributes=a, params=p, flags=["early-stopping", "length-penalty"])
    a = attrs_of(6, k=2)
    inputs, p = search("tie-001", bigram([[BOS, 3]], twins=[(5, 9, 11)], spread=1.5), a,
                       _ties_seen, attempts=400)
    yield value("beam_search/tie-001", "beam_search",
                "Tokens 5, 9, 11 are triplets (equal embedding rows and LM-head columns): "
                "their scores tie exactly at every dtype. Candidates are ordered by score, "
                "ties by the lower beam slot, then the lower token id: 5 and 9 are kept over "
                "11, and of two equal finished hypotheses the one through 5 comes first.",
                inputs=inputs, attributes=a, params=p, flags=["ties"])
    a = attrs_of(6, k=3, num_return_sequences=3)
    inputs, p = search("max-len-001", bigram([[BOS, 3]], spread=1.5, eos_bias=-4.0), a,
                       lambda x, s: all(EOS not in g for g in _generated(x, 2))
                       and no_pad(2)(x, s))
    yield value("beam_search/max-len-001", "beam_search",
                "No hypothesis emits EOS (its logit -4 below): at max_len 6 the top K = 3 "
                "candidates finish by length, and the row's 3 hypotheses are those, scored "
                "sum / 4.",
                inputs=inputs, attributes=a, params=p, flags=["edge", "max-len"])
    a = attrs_of(7, k=3, num_return_sequences=2)
    inputs, p = search("return-001", gpt(2, 2, 1, 16, 16, eos_bias=1.5), a, some_eos(2),
                       margin=RANDOM_MARGIN)
    yield value("beam_search/return-001", "beam_search",
                "num_return_sequences = 2 of K = 3: the best two finished hypotheses per row, "
                "best first.",
                inputs=inputs, attributes=a, params=p, flags=["return-sequences"])
    a = attrs_of(7, k=1, num_return_sequences=1)
    inputs, p = search("greedy-001", gpt(2, 2, 1, 16, 16, eos_bias=1.5), a, some_eos(2),
                       margin=RANDOM_MARGIN)
    yield value("beam_search/greedy-001", "beam_search",
                "num_beams = 1: the greedy path (greedy_decode's ids), ended at its first EOS; "
                "scores its sum of log-probs / g.",
                inputs=inputs, attributes=a, params=p, flags=["edge", "greedy"])
    omitted = ("eps", "tie_embeddings", "length_penalty", "early_stopping",
               "num_return_sequences")
    a = attrs_of(7, num_return_sequences=1)
    left = {k: v for k, v in a.items() if k not in omitted}
    inputs, p = search("defaults-001", bigram([[BOS, 5]], spread=1.5, eos_bias=1.5), a,
                       no_pad(2), unlike=[{"length_penalty": 0.0}])
    yield value("beam_search/defaults-001", "beam_search",
                "length_penalty, early_stopping, num_return_sequences, eps and tie_embeddings "
                "left out (1.0, False, 1, 1e-5, False): a bigram decoder_only where "
                "length_penalty 0 decodes other ids, and num_return_sequences 2 gives "
                "another shape.",
                inputs=inputs, attributes=left, params=p, flags=["defaults"],
                omit_defaults=True)
    inputs, p = search("defaults-003", bigram([[BOS, 7]], spread=1.5, eos_bias=2.5), a,
                       no_pad(2), unlike=[{"length_penalty": 2.0}])
    yield value("beam_search/defaults-003", "beam_search",
                "Every defaulted attribute left out, as defaults-001: a bigram decoder_only "
                "where length_penalty 2 decodes other ids than the default 1.",
                inputs=inputs, attributes=left, params=p, flags=["defaults"],
                omit_defaults=True)
    inputs, p = search("defaults-002", bigram([[BOS, 6]], spread=1.5, eos_bias=1.0), a,
                       no_pad(2), unlike=[{"early_stopping": True}])
    yield value("beam_search/defaults-002", "beam_search",
                "Every defaulted attribute left out, as defaults-001: a bigram decoder_only "
                "where early_stopping True (stop at K finished) decodes other ids than the "
                "default False.",
                inputs=inputs, attributes=left, params=p, flags=["defaults"],
                omit_defaults=True)


def _ties_seen(x, s):
    """The returned hypotheses go through 5 and 9, never 11; one pair ties exactly."""
    gens = _generated(x, 2)
    tokens = {t for g in gens for t in g}
    return (5 in tokens and 9 in tokens and 11 not in tokens and PAD not in tokens
            and len(set(np.asarray(s).ravel().tolist())) < np.asarray(s).size)


def _error_cases(rng):
    p = lm_params(rng, 1, 8, 16, 12, 8, "pre", None)
    a = attrs_of(6)
    prompt = {"prompt": np.array([[BOS, 5]], dtype=np.int64)}
    yield error("beam_search/num-beams-001", "beam_search", "num_beams = 0 is refused.",
                inputs=prompt, attributes={**a, "num_beams": 0, "num_return_sequences": 1},
                params=p, error="ConfigError", mentions=["num_beams"])
    yield error("beam_search/return-002", "beam_search",
                "num_return_sequences = 3 with num_beams = 2: at most K hypotheses are kept.",
                inputs=prompt, attributes={**a, "num_return_sequences": 3}, params=p,
                error="ConfigError", mentions=["num_return_sequences", "3"])
    yield error("beam_search/early-stopping-003", "beam_search",
                "early_stopping = 'always' is not True, False or 'never'.",
                inputs=prompt, attributes={**a, "early_stopping": "always"}, params=p,
                error="ConfigError", mentions=["early_stopping"])
    yield error("beam_search/vocab-001", "beam_search",
                "num_beams = 7 with a vocabulary of 12: 2K = 14 candidates a step need 2K <= L.",
                inputs=prompt, attributes={**a, "num_beams": 7, "num_return_sequences": 1},
                params=p, error="ConfigError", mentions=["num_beams", "12"])
    yield error("beam_search/max-len-002", "beam_search",
                "max_len = 2 equals the prompt length: beam search generates at least one "
                "token.",
                inputs=prompt, attributes={**a, "max_len": 2}, params=p,
                error="ConfigError", mentions=["max_len"])
    yield error("beam_search/pad-prompt-001", "beam_search",
                "The prompt contains pad_id (prompts are not padded).",
                inputs={"prompt": np.array([[BOS, 5, PAD]], dtype=np.int64)}, attributes=a,
                params=p, error="DomainError", mentions=["prompt", "pad_id"])
    yield error("beam_search/length-penalty-004", "beam_search",
                "length_penalty = '1.0' (a string) is not a number.",
                inputs=prompt, attributes={**a, "length_penalty": "1.0"}, params=p,
                error="ConfigError", mentions=["length_penalty"])


# -- GPT-2's tied head (issue 25): decoder_only(tie_embeddings) through the cached steps -------

def _gpt2_cases():
    from .greedy_decode import gpt2

    def tied(max_len, **kw):
        return {**attrs_of(max_len, activation="gelu_tanh", **kw), "tie_embeddings": True}
    a = tied(7, n=2, heads=4)
    inputs, p = search("gpt2-001", gpt2(2, 2, 2, 16, 20, eos_scale=1.2, gamma_scale=3.0), a,
                       some_eos(2, also=lambda x, s: len({tuple(r) for r in x[:, 0]}) == 2),
                       margin=RANDOM_MARGIN)
    yield value("beam_search/gpt2-001", "beam_search",
                "GPT-2 (GPT2LMHeadModel): decoder_only with tie_embeddings (logits = h "
                "embed.table^T, no bias, no lm_head.*), GELU tanh, N = 2, D = 16, H = 4, "
                "vocabulary 20 (embed.table[EOS] x 1.2, final_norm.gamma x 3), prompt (2, 2), "
                "K = 2, max_len 7: "
                "hypotheses that end at EOS and others that run to max_len.",
                inputs=inputs, attributes=a, params=p,
                flags=["tied-embeddings", "gelu_tanh", "eos", "decoder-step"])
    a = tied(8, k=3)
    inputs, p = search("gpt2-002", gpt2(3, 1, 1, 16, 16, eos_scale=1.5, gamma_scale=3.0), a,
                       eos_lengths_differ(3), margin=RANDOM_MARGIN)
    yield value("beam_search/gpt2-002", "beam_search",
                "GPT-2's tied head, N = 1, D = 16, H = 2, vocabulary 16 (embed.table[EOS] x 1.5, "
                "final_norm.gamma x 3), K = 3 (the cache rows "
                "of three beams reordered every step), one row, prompt length 3, max_len 8; "
                "the finished hypotheses of different lengths returned best first.",
                inputs=inputs, attributes=a, params=p,
                flags=["tied-embeddings", "eos", "decoder-step"])
    a = {**tied(6), "activation": "gelu"}
    inputs, p = search("gpt2-square-001", gpt2(2, 2, 1, 8, 8, gamma_scale=3.0), a,
                       lambda x, s: no_pad(2)(x, s) and len({tuple(r) for r in x[:, 0]}) == 2,
                       margin=RANDOM_MARGIN)
    yield value("beam_search/gpt2-square-001", "beam_search",
                "Tied head with a square table (vocabulary = D = 8): h embed.table (not "
                "transposed) also runs and picks other ids; exact GELU, N = 1, K = 2, "
                "max_len 6.",
                inputs=inputs, attributes=a, params=p, flags=["tied-embeddings", "transpose"])
    p = gpt2(2, 1, 1, 8, 12)(Rng(f"{COMPONENT.id}/gpt2-errors"))[1]
    prompt = {"prompt": np.array([[BOS, 5]], dtype=np.int64)}
    yield error("beam_search/gpt2-bias-001", "beam_search",
                "decoder_only with tie_embeddings given an lm_head.b (12,): GPT-2's tied head has "
                "no bias; adding it silently is wrong, so it is refused.",
                inputs=prompt, attributes=tied(5), params={**p, "lm_head.b": np.full(12, 0.5)},
                error="ParameterError", mentions=["lm_head.b", "(12,)", "tie_embeddings"])
    yield error("beam_search/llama-tie-001", "beam_search",
                "tie_embeddings = True for model='llama_decoder_only' (its head is lm_head.w).",
                inputs=prompt, attributes={**tied(5), "model": "llama_decoder_only",
                                           "activation": "silu", "eps": 1e-6},
                params=p, error="ConfigError", mentions=["tie_embeddings", "llama_decoder_only"])
