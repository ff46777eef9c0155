"""greedy_decode: arg-max decoding of decoder_only (from a prompt) and of the
encoder-decoder transformer (from src_ids, the target starting with BOS).

Every generated token of every unfinished row has a margin between the two largest
logits wider than the loosest (bfloat16) tolerance of the models and at least 0.25, so
that every backend at every dtype must pick the same ids. Candidate parameters are
drawn from named streams ``greedy_decode/<case>/<attempt>`` and the first attempt that
keeps the margin (and shows what the case is about, e.g. a row ending at EOS) is used.
"""

import numpy as np

from ..generate import GenerationError
from ..oracle.greedy_decode import greedy_decode as oracle
from ..oracle.greedy_decode import remember, run
from ._build import Component, Fn, Rng, error, value
from .encoder_layer import TOLERANCES
from .encoder_only import lm_params
from .transformer import ids, transformer_params

COMPONENT = Component("greedy_decode", {
    "greedy_decode": Fn(module="decoding", inputs=["prompt", "src_ids"],
                        optional=["prompt", "src_ids"], returns=["ids"],
                        required=["model", "bos_id", "eos_id", "pad_id", "max_len", "num_layers",
                                  "num_heads", "norm", "activation"],
                        attributes={"eps": 1e-5, "tie_embeddings": False},
                        added={"num_kv_heads": None, "rope_base": 10000.0, "window": None,
                               "rope_scaling": None, "rotary_dim": None},
                        params=True, oracle=oracle),
})

BOS, EOS, PAD = 1, 2, 0
TOL = TOLERANCES["transformer"]["bfloat16"]  # the loosest tolerance of the models


def wide_margin(top1, top2, token) -> bool:
    """top1 - top2 > max(0.25, atol + rtol max(|top1|, |top2|)) with the loosest (bfloat16)
    tolerance of the models, and the token is never pad_id."""
    need = max(0.25, TOL["atol"] + TOL["rtol"] * max(abs(float(top1)), abs(float(top2))))
    return float(top1 - top2) > need and token != PAD


def search(case: str, build, attrs: dict, want, attempts: int = 80):
    """The first candidate (inputs, params) whose decoding keeps the margin and satisfies
    ``want(ids)``; its oracle result is remembered for the generator."""
    for attempt in range(attempts):
        inputs, params = build(Rng(f"greedy_decode/{case}/{attempt}"))
        kwargs = dict(prompt=inputs.get("prompt"), src_ids=inputs.get("src_ids"), **attrs,
                      params=params)
        result = run(**kwargs, accept=wide_margin)
        if result is not None and want(result[0]):
            remember(result, **kwargs)
            return inputs, params
    raise GenerationError(f"greedy_decode/{case}: no candidate in {attempts} attempts keeps "
                          f"the logit margin")


def gpt_attrs(max_len, n=1, heads=4, norm="pre", activation="gelu"):
    return {"model": "decoder_only", "bos_id": BOS, "eos_id": EOS, "pad_id": PAD,
            "max_len": max_len, "num_layers": n, "num_heads": heads, "norm": norm,
            "eps": 1e-5, "activation": activation, "tie_embeddings": False}


def seq_attrs(max_len, n=1, heads=4, norm="post", activation="relu", tied=False):
    return {**gpt_attrs(max_len, n, heads, norm, activation), "model": "transformer",
            "tie_embeddings": tied}


def gpt(prompt_len, b, n, d, vocab, norm, eos_bias=None):
    def build(r):
        prompt = ids(r, vocab, [prompt_len] * b, prompt_len, bos_id=BOS)
        p = lm_params(r, n, d, 2 * d, vocab, 8, norm, None, lm_scale=1.0,
                      eos_bias=None if eos_bias is None else (EOS, eos_bias))
        return {"prompt": prompt}, p
    return build


def seq2seq(lengths, s, n, d, vocab, norm, tied=False, eos_bias=None):
    def build(r):
        src = ids(r, vocab, lengths, s)
        p = transformer_params(r, n, d, 2 * d, vocab, norm=norm, tied=tied, lm_scale=1.0,
                               eos_bias=None if eos_bias is None else (EOS, eos_bias))
        if tied:  # larger target table entries: the tied head needs spread logits
            p["tgt_embed.table"] = p["tgt_embed.table"] * 4
        for i in range(n):  # sharper cross-attention: the source must steer the output
            for w in ("w_q", "w_k"):
                name = f"decoder.layers.{i}.cross_attn.{w}"
                p[name] = p[name] * 2
        return {"src_ids": src}, p
    return build


def varied(x, start=1):
    """Rows differ, and some row generating 3 or more tokens before EOS uses 2 distinct
    ones (a model repeating one token hides position and mask bugs)."""
    gen = [[int(t) for t in row[start:]] for row in x]
    gen = [g[:g.index(EOS)] if EOS in g else g for g in gen]
    rows_differ = len(x) == 1 or len({tuple(r) for r in np.asarray(x).tolist()}) == len(x)
    return rows_differ and (all(len(g) < 3 for g in gen)
                            or any(len(set(g)) >= 2 for g in gen))


def no_eos(start):
    return lambda x: varied(x, start) and not any(EOS in row for row in x)


def one_ends(start):
    return lambda x: varied(x, start) and (EOS in x[0][:-1]) != (EOS in x[1][:-1])


def all_end(start):
    return lambda x: varied(x, start) and all(row[-1] == PAD and EOS in row for row in x)


def cases(rng):
    a = gpt_attrs(7)
    inputs, p = p_gpt = search("gpt-001", gpt(2, 2, 1, 16, 16, "pre"), a, no_eos(2))
    yield value("greedy_decode/gpt-001", "greedy_decode",
                "decoder_only, N=1 pre-norm, D=16, H=4, vocabulary 16, prompt (2, 2) = [BOS, "
                "x]; no row emits EOS, so 5 tokens are appended to reach max_len=7.",
                inputs=inputs, attributes=a, params=p, flags=["basic", "decoder-only"])
    a = gpt_attrs(7)
    inputs, p = search("gpt-eos-001", gpt(2, 2, 1, 16, 16, "pre", eos_bias=1.5), a, one_ends(2))
    yield value("greedy_decode/gpt-eos-001", "greedy_decode",
                "One row emits EOS early and is padded with pad_id after it while the other "
                "goes on to max_len=7.",
                inputs=inputs, attributes=a, params=p, flags=["eos", "padding", "decoder-only"])
    a = gpt_attrs(8, n=2, heads=2)
    inputs, p = search("gpt-all-eos-001", gpt(3, 2, 2, 8, 12, "pre", eos_bias=2.0), a, all_end(3))
    yield value("greedy_decode/gpt-all-eos-001", "greedy_decode",
                "Every row emits EOS before max_len=8: decoding stops and the rest is pad_id; "
                "N=2, D=8, H=2, prompt length 3.",
                inputs=inputs, attributes=a, params=p, flags=["eos", "early-stop"])
    a = gpt_attrs(6, n=2, heads=2, norm="post", activation="relu")
    inputs, p = search("gpt-post-001", gpt(3, 1, 2, 16, 20, "post"), a, lambda x: varied(x, 3))
    yield value("greedy_decode/gpt-post-001", "greedy_decode",
                "decoder_only post-norm, ReLU, N=2, D=16, H=2, one row, prompt length 3, "
                "max_len=6.",
                inputs=inputs, attributes=a, params=p, flags=["post-norm", "decoder-only"])
    a = gpt_attrs(3)
    yield value("greedy_decode/prompt-only-001", "greedy_decode",
                "max_len equals the prompt length: the prompt comes back unchanged.",
                inputs={"prompt": np.array([[1, 5, 9], [1, 7, 7]], dtype=np.int64)},
                attributes=a, params=p_gpt[1], flags=["edge", "no-steps"])
    a = seq_attrs(6)
    inputs, p = search("seq2seq-001", seq2seq([5, 3], 5, 1, 16, 12, "post"), a, varied)
    yield value("greedy_decode/seq2seq-001", "greedy_decode",
                "transformer, N=1 post-norm, ReLU, D=16, H=4, src_ids (2, 5) with row 1 padded "
                "after 3; the target starts with BOS and grows to max_len=6 (prompt unused).",
                inputs=inputs, attributes=a, params=p, flags=["basic", "encoder-decoder"])
    a = seq_attrs(7, n=2, heads=2)
    inputs, p = search("seq2seq-eos-001", seq2seq([4, 6], 6, 2, 8, 12, "post", eos_bias=1.5),
                       a, lambda x: varied(x) and (EOS in x[0]) != (EOS in x[1]))
    yield value("greedy_decode/seq2seq-eos-001", "greedy_decode",
                "transformer, N=2, D=8, H=2: a row that emits EOS is padded after it.",
                inputs=inputs, attributes=a, params=p, flags=["eos", "encoder-decoder"])
    a = seq_attrs(5, n=1, heads=2, norm="pre", activation="gelu", tied=True)
    inputs, p = search("seq2seq-tied-001", seq2seq([3, 4], 4, 1, 8, 12, "pre", tied=True), a,
                       lambda x: True)
    yield value("greedy_decode/seq2seq-tied-001", "greedy_decode",
                "transformer with tie_embeddings (logits = h tgt_embed.table^T), pre-norm, GELU, "
                "max_len=5 (a tied head tends to repeat the last token).",
                inputs=inputs, attributes=a, params=p, flags=["tied-embeddings", "pre-norm"])
    p = lm_params(rng, 1, 8, 16, 12, 8, "pre", None)
    a = gpt_attrs(6, heads=2)
    yield error("greedy_decode/oov-001", "greedy_decode", "prompt holds 12 with vocabulary 12.",
                inputs={"prompt": np.array([[1, 12]], dtype=np.int64)}, attributes=a, params=p,
                error="DomainError", mentions=["prompt", "12"])
    yield error("greedy_decode/pad-prompt-001", "greedy_decode",
                "The prompt contains pad_id (prompts are not padded).",
                inputs={"prompt": np.array([[1, 5, 0]], dtype=np.int64)}, attributes=a,
                params=p, error="DomainError", mentions=["prompt", "pad_id"])
    yield error("greedy_decode/max-len-001", "greedy_decode",
                "max_len=2 is shorter than the prompt (3).",
                inputs={"prompt": np.array([[1, 5, 6]], dtype=np.int64)},
                attributes={**a, "max_len": 2}, params=p,
                error="ConfigError", mentions=["max_len"])
    yield error("greedy_decode/max-len-002", "greedy_decode",
                "max_len=10 needs positions up to 8 from an 8-row pos.table.",
                inputs={"prompt": np.array([[1, 5, 6]], dtype=np.int64)},
                attributes={**a, "max_len": 10}, params=p,
                error="ConfigError", mentions=["max_len"])
    yield error("greedy_decode/model-001", "greedy_decode", "model='gpt' is not a model name.",
                inputs={"prompt": np.array([[1, 5]], dtype=np.int64)},
                attributes={**a, "model": "gpt"}, params=p,
                error="ConfigError", mentions=["model"])
    yield error("greedy_decode/no-src-001", "greedy_decode",
                "model='transformer' without src_ids.",
                inputs={"prompt": np.array([[1, 5]], dtype=np.int64)},
                attributes={**a, "model": "transformer"}, params=p,
                error="ConfigError", mentions=["src_ids"])
    yield from defaults_cases()
    yield from missed_cases()
    yield from llama_cases()
    yield from study_cases()
    yield from gpt2_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    a = seq_attrs(6)
    inputs, p = search("defaults-001", seq2seq([5, 4], 5, 1, 16, 12, "post"), a, varied)
    yield value("greedy_decode/defaults-001", "greedy_decode",
                "eps and tie_embeddings left out (1e-5, False): transformer as seq2seq-001; "
                "a tied default reads the logits off tgt_embed.table and picks other ids.",
                inputs=inputs, attributes={k: v for k, v in a.items()
                                           if k not in ("eps", "tie_embeddings")},
                params=p, flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    a = gpt_attrs(9)
    inputs, p = search("max-len-003", gpt(2, 2, 1, 16, 16, "pre"), a, no_eos(2))
    yield value("greedy_decode/max-len-003", "greedy_decode",
                "max_len = 9 with an 8-row pos.table: the last step reads position 7, so this "
                "is the largest valid max_len (an off-by-one bound refuses it).",
                inputs=inputs, attributes=a, params=p, flags=["edge", "decoder-only"])

    def eos_prompt(r):
        inputs, p = gpt(3, 2, 1, 16, 16, "pre")(r)
        inputs["prompt"][:, 1] = EOS
        return inputs, p
    a = gpt_attrs(5)
    inputs, p = search("prompt-eos-001", eos_prompt, a, lambda x: True)
    yield value("greedy_decode/prompt-eos-001", "greedy_decode",
                "The prompt [BOS, EOS, x] holds eos_id: only a generated EOS ends a row, so "
                "both rows generate (a row taken as ended would be all pad_id after x).",
                inputs=inputs, attributes=a, params=p, flags=["eos", "decoder-only"])

    rd = Rng("greedy_decode/missed")
    p = lm_params(rd, 1, 8, 16, 12, 8, "pre", None)
    w, b = p["lm_head.w"], p["lm_head.b"]
    w[:, 9] = w[:, 5]  # tokens 5 and 9 get identical logits, above every other token
    b[5] = b[9] = 8.0
    yield value("greedy_decode/tie-001", "greedy_decode",
                "lm_head columns 5 and 9 identical (and their biases, 8 above the rest): the "
                "logits tie exactly at every dtype and the lowest id, 5, is chosen.",
                inputs={"prompt": np.array([[BOS, 7], [BOS, 3]])},
                attributes=gpt_attrs(5, heads=2), params=p, flags=["ties", "decoder-only"])

    def bos0(r):
        src = ids(r, 12, [5, 3], 5, pad_id=1)
        return {"src_ids": src}, seq2seq([5, 3], 5, 1, 16, 12, "post")(r)[1]
    a = {**seq_attrs(5), "bos_id": 0, "pad_id": 1}
    inputs, p = search("bos-zero-001", bos0, a,
                       lambda x: varied(x) and 1 not in np.asarray(x)[:, 1:])
    yield value("greedy_decode/bos-zero-001", "greedy_decode",
                "transformer with bos_id = 0 and pad_id = 1: a falsy bos_id is still the first "
                "target token (a `bos_id or ...` default, or pad_id as BOS, fails).",
                inputs=inputs, attributes=a, params=p, flags=["edge", "encoder-decoder"])


# -- llama_decoder_only (issue 12): greedy decoding through llama_init_cache / llama_step ------

LLAMA_TOL = {"rtol": 0.1, "atol": 0.1}  # looser than the models': the Llama stack's bf16 error


def llama_margin(top1, top2, token) -> bool:
    need = max(0.4, LLAMA_TOL["atol"] + LLAMA_TOL["rtol"] * max(abs(float(top1)),
                                                                abs(float(top2))))
    return float(top1 - top2) > need and token != PAD


def llama_attrs(max_len, n=1, heads=4, kv_heads=2, window=None):
    a = {**gpt_attrs(max_len, n, heads, "pre", "silu"), "model": "llama_decoder_only",
         "eps": 1e-6, "num_kv_heads": kv_heads, "rope_base": 10000.0, "window": window}
    del a["tie_embeddings"]
    return a


def llama(prompt_len, b, n, d, heads, kv_heads, vocab, sharp=1):
    """A prompt and Llama parameters; ``sharp`` scales w_q and w_k (sharper attention, so
    positions, i.e. RoPE, weigh more in the output)."""
    from .llama import model_params

    def build(r):
        prompt = ids(r, vocab, [prompt_len] * b, prompt_len, bos_id=BOS)
        p = model_params(r, n, d, heads, kv_heads, 2 * d, vocab, 1.0)
        for i in range(n):
            for w in ("w_q", "w_k"):
                p[f"layers.{i}.attn.{w}"] = p[f"layers.{i}.attn.{w}"] * sharp
        return {"prompt": prompt}, p
    return build


def llama_search(case, build, attrs, want, attempts=80, unlike=None):
    """search() with the Llama margin; with ``unlike`` (attributes), also the decoding
    under those attributes must give other ids (a wrong default shows)."""
    def differs(inputs, params, ids_):
        if unlike is None:
            return True
        other = run(prompt=inputs["prompt"], **{**attrs, **unlike}, params=params)
        return not np.array_equal(other[0], ids_)

    for attempt in range(attempts):
        inputs, params = build(Rng(f"greedy_decode/{case}/{attempt}"))
        kwargs = dict(prompt=inputs.get("prompt"), src_ids=inputs.get("src_ids"), **attrs,
                      params=params)
        result = run(**kwargs, accept=llama_margin)
        if result is not None and want(result[0]) and differs(inputs, params, result[0]):
            remember(result, **kwargs)
            return inputs, params
    raise GenerationError(f"greedy_decode/{case}: no candidate in {attempts} attempts keeps "
                          f"the logit margin")


def llama_cases():
    a = llama_attrs(8)
    inputs, p = llama_search("llama-001", llama(3, 2, 1, 16, 4, 2, 16), a, no_eos(3))
    yield value("greedy_decode/llama-001", "greedy_decode",
                "llama_decoder_only, N = 1, D = 16, H = 4, H_kv = 2 (a GQA cache of 2 heads), "
                "vocabulary 16, prompt (2, 3): prefill, then 5 cached steps to max_len = 8.",
                inputs=inputs, attributes=a, params=p, flags=["basic", "gqa", "decoder-step"])
    a = llama_attrs(9, n=2, kv_heads=1, window=2)
    inputs, p = llama_search("llama-window-001", llama(3, 2, 2, 16, 4, 1, 16), a, no_eos(3))
    yield value("greedy_decode/llama-window-001", "greedy_decode",
                "llama_decoder_only with window = 2 < max_len = 9, N = 2, MQA (H_kv = 1): each "
                "cached step sees its own and the previous position only (bottom-right "
                "aligned over the cache), RoPE at the step's own position.",
                inputs=inputs, attributes=a, params=p,
                flags=["sliding-window", "mqa", "decoder-step", "offset"])
    a = {k: v for k, v in llama_attrs(9, heads=1, kv_heads=1).items()
         if k not in ("num_kv_heads", "rope_base", "window", "eps")}
    inputs, p = llama_search("llama-defaults-001", llama(3, 2, 1, 16, 1, 1, 16, sharp=2),
                             {**a, "eps": 1e-5}, no_eos(2),
                             unlike={"rope_base": 500000.0})
    yield value("greedy_decode/llama-defaults-001", "greedy_decode",
                "llama_decoder_only with num_kv_heads, rope_base, window and eps left out (H, "
                "10000, None, 1e-5): one head of K = 16 (w_q, w_k doubled: sharp attention), "
                "prompt (2, 3), max_len = 9; chosen so that rope_base = 500000 (Llama 3's) "
                "decodes other ids.",
                inputs=inputs, attributes=a, params=p, flags=["defaults"],
                omit_defaults=True)
    prompt = {"prompt": np.array([[1, 5, 9]], dtype=np.int64)}
    yield error("greedy_decode/llama-norm-001", "greedy_decode",
                "model='llama_decoder_only' with norm='post' (a Llama is pre-norm).",
                inputs=prompt, attributes={**llama_attrs(5), "norm": "post"}, params=p,
                error="ConfigError", mentions=["norm", "post"])
    yield error("greedy_decode/llama-window-002", "greedy_decode",
                "window = 2 given to model='decoder_only' (a Llama attribute).",
                inputs=prompt, attributes={**gpt_attrs(5, heads=2), "window": 2}, params=p,
                error="ConfigError", mentions=["window"])


# -- asked for by the mutation study (issue 19) --------------------------------------------

def study_cases():
    p = lm_params(Rng(f"{COMPONENT.id}/study"), 1, 8, 16, 12, 8, "pre", None)
    a = gpt_attrs(6, heads=2)
    yield error("greedy_decode/eos-range-001", "greedy_decode",
                "decoder_only with eos_id = 12 = L (vocabulary 12): an id no step can emit, so "
                "every row would run to max_len unnoticed; refused.",
                inputs={"prompt": np.array([[1, 5]], dtype=np.int64)},
                attributes={**a, "eos_id": 12}, params=p,
                error="DomainError", mentions=["eos_id", "12"])
    yield error("greedy_decode/src-with-prompt-001", "greedy_decode",
                "decoder_only given src_ids besides its prompt: a decoder-only model has no "
                "source; refused, not ignored.",
                inputs={"prompt": np.array([[1, 5]], dtype=np.int64),
                        "src_ids": np.array([[4, 6, 3]], dtype=np.int64)},
                attributes=a, params=p, error="ConfigError", mentions=["src_ids"])


# -- GPT-2's tied head (issue 25): decoder_only(tie_embeddings) through decoder_only_step ------

def gpt2_attrs(max_len, n=1, heads=2, activation="gelu_tanh"):
    return {**gpt_attrs(max_len, n, heads, "pre", activation), "tie_embeddings": True}


def gpt2(prompt_len, b, n, d, vocab, eos_scale=None, stack_scale=2.0, gamma_scale=1.0):
    """GPT2LMHeadModel-like parameters: no lm_head.* (logits = h embed.table^T); the layers'
    weights scaled by ``stack_scale`` (a tied head otherwise tends to repeat the last token),
    embed.table[EOS] by ``eos_scale`` (no bias to make EOS likely) and final_norm.gamma by
    ``gamma_scale`` (spread logits: beam search's margins)."""
    def build(r):
        prompt = ids(r, vocab, [prompt_len] * b, prompt_len, bos_id=BOS)
        p = lm_params(r, n, d, 2 * d, vocab, 8, "pre", None)
        p = {k: (v * stack_scale if k.startswith("layers.") and k.endswith(("w_q", "w_k", "w1",
                                                                             "w2", "w_v", "w_o"))
                 else v) for k, v in p.items() if not k.startswith("lm_head.")}
        if eos_scale is not None:  # multiples of 2**-6 below 2: exact in bfloat16
            p["embed.table"][EOS] = np.round(p["embed.table"][EOS] * eos_scale * 64) / 64
        if gamma_scale != 1.0:  # multiples of 2**-5 below 8: exact in bfloat16
            p["final_norm.gamma"] = np.round(p["final_norm.gamma"] * gamma_scale * 32) / 32
        return {"prompt": prompt}, p
    return build


def gpt2_cases():
    a = gpt2_attrs(8, n=2, heads=4)
    inputs, p = search("gpt2-001", gpt2(2, 2, 2, 16, 20), a, no_eos(2))
    yield value("greedy_decode/gpt2-001", "greedy_decode",
                "GPT-2 (GPT2LMHeadModel): decoder_only with tie_embeddings (logits = h "
                "embed.table^T, no bias, no lm_head.*), GELU tanh, N = 2, D = 16, H = 4, "
                "vocabulary 20, prompt (2, 2); 6 cached steps to max_len = 8.",
                inputs=inputs, attributes=a, params=p,
                flags=["tied-embeddings", "gelu_tanh", "decoder-step"])
    a = gpt2_attrs(8)
    inputs, p = search("gpt2-eos-001", gpt2(3, 2, 1, 16, 16, eos_scale=1.5), a, one_ends(3))
    yield value("greedy_decode/gpt2-eos-001", "greedy_decode",
                "GPT-2's tied head, N = 1, D = 16, H = 2, vocabulary 16 (embed.table[EOS] x 1.5): "
                "one row emits EOS and is padded after it, the other runs to max_len = 8.",
                inputs=inputs, attributes=a, params=p, flags=["tied-embeddings", "eos"])
    a = gpt2_attrs(7, activation="gelu")
    inputs, p = search("gpt2-square-001", gpt2(2, 2, 1, 8, 8), a, no_eos(2))
    yield value("greedy_decode/gpt2-square-001", "greedy_decode",
                "Tied head with a square table (vocabulary = D = 8): h embed.table (not "
                "transposed) also runs and picks other ids; exact GELU, N = 1, H = 2, "
                "max_len = 7.",
                inputs=inputs, attributes=a, params=p, flags=["tied-embeddings", "transpose"])
    p = gpt2(2, 1, 1, 8, 12)(Rng(f"{COMPONENT.id}/gpt2-errors"))[1]
    prompt = {"prompt": np.array([[BOS, 5]], dtype=np.int64)}
    yield error("greedy_decode/gpt2-bias-001", "greedy_decode",
                "decoder_only with tie_embeddings given an lm_head.b (12,): GPT-2's tied head has "
                "no bias; adding it silently is wrong, so it is refused.",
                inputs=prompt, attributes=gpt2_attrs(5),
                params={**p, "lm_head.b": np.full(12, 0.5)},
                error="ParameterError", mentions=["lm_head.b", "(12,)", "tie_embeddings"])
    yield error("greedy_decode/gpt2-untied-001", "greedy_decode",
                "decoder_only with tie_embeddings given an lm_head.w (8, 12): the tied head reads "
                "embed.table, a W that would be ignored is refused.",
                inputs=prompt, attributes=gpt2_attrs(5),
                params={**p, "lm_head.w": np.full((8, 12), 0.5)},
                error="ParameterError", mentions=["lm_head.w", "(8, 12)"])
    yield error("greedy_decode/llama-tie-001", "greedy_decode",
                "tie_embeddings = True for model='llama_decoder_only' (its head is lm_head.w).",
                inputs=prompt, attributes={**llama_attrs(5), "tie_embeddings": True},
                params=p, error="ConfigError", mentions=["tie_embeddings", "llama_decoder_only"])
