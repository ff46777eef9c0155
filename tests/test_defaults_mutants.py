"""Wrong defaults are caught: every function with defaulted attributes has a vector that
leaves them out (flag ``defaults``), and a NumPy backend whose function has one wrong
default fails it.

Each mutant is the NumPy function with one keyword default replaced, exactly what a
backend with a wrong default looks like; the vectors that state every attribute cannot
see it. A mutant must fail at every dtype's tolerance (``tests/mutants.py``), except where
the vector's description says the difference is below a dtype's resolution.
"""

import functools

import numpy as np
import pytest
from attnspec.backends.numpy import NumpyBackend
from attnspec.spec.vectors import default_spec

from .mutants import mutant, rejections

NUMPY = NumpyBackend()

# (function, the wrong default), one per defaulted attribute that a backend could get wrong
WRONG = [
    ("softmax", {"axis": 0}),
    ("attention_entropy", {"axis": 0}),
    ("combined_mask", {"causal": False}),
    ("combined_mask", {"num_heads": 2}),
    ("sdpa", {"scale": 1.0}),
    ("sdpa", {"num_kv_heads": 1}),  # every query head on one kv head: a plain sdpa fails
    ("sdpa", {"softcap": 50.0}),  # Gemma 2's attention cap where none is asked
    ("sdpa_lse", {"scale": 1.0}),
    ("sdpa_lse", {"num_kv_heads": 1}),
    ("sdpa_lse", {"softcap": 50.0}),
    ("sdpa_sinks", {"scale": 1.0}),
    ("sdpa_sinks", {"num_kv_heads": 1}),
    ("sdpa_sinks", {"softcap": 50.0}),
    ("paged_attention", {"scale": 1.0}),
    ("paged_attention", {"causal": True}),
    ("sdpa_varlen", {"scale": 1.0}),
    ("sdpa_varlen", {"causal": True}),
    ("sdpa_varlen", {"window": 1}),
    ("sdpa_varlen", {"window_left": 0}),  # flash-attn's (0, -1) where (-1, -1) is meant
    ("sdpa_varlen", {"window_right": 0}),  # a causal band where none is asked
    ("sdpa_fp8", {"fp8_format": "e5m2"}),  # e4m3fn values with three fraction bits: refused
    ("sdpa_fp8", {"scale": 1.0}),
    ("sdpa_fp8", {"causal": True}),
    ("sdpa_fp8", {"num_kv_heads": 1}),
    ("sdpa_fp8", {"softcap": 50.0}),
    ("moe_router", {"scoring": "sigmoid"}),  # DeepSeek-V3's scores where Mixtral's are meant
    ("moe_router", {"renormalize": True}),  # norm_topk_prob on by default
    ("moe_router", {"routed_scaling_factor": 2.5}),
    ("moe_router", {"n_group": 3}),  # groups of two: top-2 from the best group only
    ("moe_router", {"topk_group": 2}),  # more groups kept than there are: refused
    ("moe", {"scoring": "sigmoid"}),  # moe passes its router attributes on unchanged
    ("moe", {"renormalize": True}),
    ("moe", {"routed_scaling_factor": 2.5}),
    ("moe", {"n_group": 3}),
    ("moe", {"topk_group": 2}),
    ("chunked_mask", {"causal": False}),
    ("mha", {"num_kv_heads": 1}),  # multi-query by default: w_k, w_v read as the wrong shapes
    ("topk_attention", {"scale": 1.0}),
    ("topk_attention", {"ties": "keep_all"}),
    ("self_attention", {"scale": 1.0}),
    ("relative_attention", {"scale": 1.0}),
    ("sinusoidal_pe", {"offset": 1}),
    ("rope", {"offset": 1}),
    ("rope", {"base": 500000.0}),
    ("rope", {"convention": "half"}),
    ("layer_norm", {"eps": 1e-6}),
    ("layer_norm", {"eps": 1e-3}),
    ("layer_norm", {"variant": "annotated"}),
    ("rms_norm", {"eps": 1e-5}),
    ("rms_norm", {"eps": float(np.finfo(np.float32).eps)}),
    ("feedforward", {"activation": "gelu"}),
    ("gated_feedforward", {"activation": "gelu"}),
    ("residual", {"position": "pre"}),
    ("residual", {"eps": 1e-6}),
    ("residual", {"activation": "gelu"}),
    ("embedding", {"scale": False}),
    ("lm_head", {"tied": True}),
    ("luong_attention", {"score": "general"}),
    *[(f, {"norm": "pre"}) for f in ("encoder_layer", "decoder_layer", "encoder", "decoder",
                                     "transformer", "encoder_only")],
    *[(f, {"eps": 1e-6}) for f in ("encoder_layer", "decoder_layer", "encoder", "decoder",
                                   "encoder_only", "decoder_only")],
    *[(f, {"activation": "gelu"}) for f in ("encoder_layer", "decoder_layer", "encoder",
                                            "decoder", "transformer")],
    ("encoder_only", {"activation": "relu"}),
    ("decoder_only", {"norm": "post"}),
    ("decoder_only", {"activation": "relu"}),
    ("decoder_only", {"tie_embeddings": True}),  # GPT-2's tie where lm_head.* is given: refused
    ("decoder_only_loss", {"norm": "post"}),
    ("decoder_only_loss", {"eps": 1e-6}),
    ("decoder_only_loss", {"activation": "relu"}),
    ("decoder_only_loss", {"ignore_index": 0}),
    ("transformer", {"tie_embeddings": True}),
    ("beam_search", {"length_penalty": 0.0}),  # the canonical sum (transformers' is 1.0)
    ("beam_search", {"length_penalty": 2.0}),
    ("beam_search", {"early_stopping": True}),
    ("beam_search", {"num_return_sequences": 2}),
    ("beam_search", {"tie_embeddings": True}),  # a tie with lm_head.* given: refused
    ("greedy_decode", {"tie_embeddings": True}),
    *[(f, {"eps": 1e-5}) for f in ("llama_layer", "llama_decoder_only")],
    *[(f, {"rope_base": 500000.0}) for f in ("llama_layer", "llama_decoder_only")],
    *[(f, {"window": 2}) for f in ("llama_layer", "llama_decoder_only")],
    *[(f, {"num_kv_heads": 1}) for f in ("llama_layer", "llama_decoder_only")],
    ("llama_layer", {"attention_bias": True}),  # reads attn.b_q, which no defaults vector has
    ("llama_decoder_only", {"attention_bias": True}),  # reads layers.0.attn.b_q: none given
    ("llama_decoder_only", {"tie_embeddings": True}),  # Qwen2's tie where lm_head.w is given
    # the defaults vectors have K = 8: half of each head rotated, or every frequency halved
    *[(f, {"rotary_dim": 4}) for f in ("llama_layer", "llama_decoder_only")],
    *[(f, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
      for f in ("llama_layer", "llama_decoder_only")],
    ("parallel_layer", {"num_kv_heads": 1}),
    ("parallel_layer", {"num_norms": 1}),
    ("parallel_layer", {"eps": 1e-6}),
    ("parallel_layer", {"activation": "relu"}),
    ("parallel_layer", {"rope_base": 500000.0}),
    ("parallel_layer", {"rotary_dim": 2}),  # GPT-NeoX's rotary_pct 0.25 where None (K) is meant
    *[("parallel_decoder_only", d) for d in (
        {"num_kv_heads": 1}, {"num_norms": 1}, {"eps": 1e-6}, {"activation": "relu"},
        {"rope_base": 500000.0}, {"rotary_dim": 4}, {"tie_embeddings": True})],
    ("greedy_decode", {"rope_base": 500000.0}),
    ("greedy_decode", {"window": 2}),
    ("greedy_decode", {"num_kv_heads": 1}),
    ("greedy_decode", {"rotary_dim": 4}),  # refused by the other models, wrong for Llama's
    ("greedy_decode", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ("mla", {"eps": 1e-5}),
    ("mla", {"rope_base": 500000.0}),
    ("mla", {"rope_convention": "half"}),
    # rope_scaling None where a scaling is meant: every frequency halved at positions up to 7
    *[(f, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
      for f in ("mla", "deepseek_layer", "deepseek_decoder_only")],
    ("t5_bias", {"bidirectional": False}),
    ("t5_bias", {"num_buckets": 16}),
    ("t5_bias", {"max_distance": 64}),
    ("t5_bias", {"offset": 1}),
    *[(f, d) for f in ("t5_encoder", "t5_decoder") for d in (
        {"num_buckets": 16}, {"max_distance": 8}, {"feed_forward": "gated-gelu"})],
    *[("t5_model", d) for d in ({"num_buckets": 16}, {"max_distance": 8},
                                {"feed_forward": "gated-gelu"}, {"tie_embeddings": False})],
    ("rope", {"rotary_dim": 4}),  # rope/defaults-001 has K = 8: half the features rotated
    ("rope", {"scaling": {"rope_type": "linear", "factor": 2.0}}),
    ("rms_norm", {"unit_offset": True}),  # Gemma's (1 + w) where a plain gain is meant
    ("gemma_layer", {"num_kv_heads": 1}),
    ("gemma_layer", {"eps": 1e-5}),
    ("gemma_layer", {"rope_base": 1000000.0}),  # Gemma 3's global base
    ("gemma_layer", {"window": 2}),
    ("gemma_layer", {"query_pre_attn_scalar": 256.0}),  # Gemma 2's config default
    ("gemma_layer", {"softcap": 50.0}),  # Gemma 2's attn_logit_softcapping
    ("gemma_layer", {"qk_norm": True}),
    *[("gemma_decoder_only", d) for d in (
        {"num_kv_heads": 1}, {"window": 2}, {"query_pre_attn_scalar": 256.0},
        {"final_softcap": 3.0}, {"qk_norm": True})],
    ("mixtral_layer", {"num_kv_heads": 1}),
    ("mixtral_layer", {"eps": 1e-5}),
    ("mixtral_layer", {"rope_base": 500000.0}),
    ("mixtral_layer", {"window": 2}),
    ("mixtral_layer", {"attention_bias": True}),
    ("mixtral_layer", {"renormalize": False}),  # Qwen2-MoE's norm_topk_prob where Mixtral's is meant
    ("deepseek_layer", {"eps": 1e-5}),
    *[(f, d) for f in ("deepseek_layer", "deepseek_decoder_only") for d in (
        {"rope_base": 500000.0}, {"rope_convention": "half"},
        {"scoring": "softmax"}, {"renormalize": False}, {"n_group": 2}, {"topk_group": 2},
        {"routed_scaling_factor": 2.5})],
    # a local base of 100 where rope_base (10000) is meant, on layer 0 of the defaults vector
    ("gemma_decoder_only", {"rope_local_base": 100.0}),
    # Gemma 3's linear factor 8 taken as the default (a backend scaling every Gemma layer)
    *[(f, {"rope_scaling": {"rope_type": "linear", "factor": 8.0}})
      for f in ("gemma_layer", "gemma_decoder_only")],
    # caught at every dtype since gemma/model-scaling-defaults-001 (T = 7, rope_base left out
    # on both layers; gemma/model-defaults-001 alone missed it at bfloat16)
    ("gemma_decoder_only", {"rope_base": 1000000.0}),
    # Gemma 3's 6 where Gemma 2's alternation (2) is the default: model-scaling-defaults-001's
    # layer 1 turns local (unscaled, base unchanged)
    ("gemma_decoder_only", {"sliding_window_pattern": 6}),
    ("cross_entropy", {"ignore_index": 0}),
    ("cross_entropy", {"label_smoothing": 0.1}),
    ("cross_entropy", {"reduction": "sum"}),
    # generation-config defaults taken for the filters' (off) defaults
    ("sampling_filter", {"temperature": 0.7}),
    ("sampling_filter", {"top_k": 50}),
    ("sampling_filter", {"top_p": 0.9}),
    ("sampling_filter", {"min_p": 0.05}),
]

# Wrong defaults whose effect is below some dtypes' resolution by construction: sinusoidal
# positions keep the transformer's LayerNorm inputs O(1), so eps 1e-6 moves the logits by
# ~1e-5 (caught at float64 only); likewise greedy ids, an arg-max with a wide margin.
COARSE = [
    ("transformer", {"eps": 1e-6}, ("float64",)),
    # the loss of O(1) logits moves by ~0.02 with smoothing 0.1: inside bfloat16's tolerance
    # of a training step; cross_entropy's own defaults vector catches it at every dtype
    ("decoder_only_loss", {"label_smoothing": 0.1}, ("float64", "float32")),
    ("parallel_layer", {"activation": "gelu_tanh"}, ("float64", "float32")),
    ("parallel_decoder_only", {"activation": "gelu_tanh"}, ("float64", "float32")),
    # sample's defaults vector is float32/float64 only (64 CDF steps 0.016 apart)
    ("sample", {"temperature": 0.7}, ("float64", "float32")),
    ("sample", {"top_k": 50}, ("float64", "float32")),
    ("sample", {"top_p": 0.9}, ("float64", "float32")),
    ("sample", {"min_p": 0.05}, ("float64", "float32")),
    # beam_search's eps moves its scores by ~1e-4 (the bigram's LayerNorm of one-hot rows,
    # variance 0.06) and no id: below float16's and bfloat16's tolerance
    ("beam_search", {"eps": 1e-6}, ("float64", "float32")),
    # gemma_decoder_only's one defaults vector (N = 2, T = 6, scores of a few units) sees these
    # only at the finer dtypes; gemma_layer's defaults vectors (layer-defaults-002, -003,
    # built for them) catch the same wrong defaults at every dtype
    ("gemma_decoder_only", {"softcap": 50.0}, ("float64", "float32")),
    ("gemma_decoder_only", {"eps": 1e-5}, ("float64", "float32")),
    # the T5 stacks' defaults vectors (inputs of unit scale) move by ~1e-6 relative under
    # eps 1e-5 for 1e-6: below the half dtypes' tolerances (the encoder's, 1.33 times
    # float32's: short of the 1.67 a catch needs, tests/derive.py)
    ("t5_encoder", {"eps": 1e-5}, ("float64",)),
    # t5_model's defaults vector: its derived float32 atol (2e-7) sees eps; the half dtypes not
    ("t5_model", {"eps": 1e-5}, ("float64", "float32")),
    # deepseek_decoder_only's embeddings are of unit scale (model-defaults-002): eps 1e-5 moves
    # its norms below the half dtypes' resolution; deepseek_layer's tiny-x vector
    # (deepseek-defaults-002) catches the same wrong eps at every dtype
    ("deepseek_decoder_only", {"eps": 1e-5}, ("float64", "float32")),
    ("t5_decoder", {"eps": 1e-5}, ("float64", "float32")),
    # rope_frequencies' vectors are float64/float32 only (configuration numbers)
    ("rope_frequencies", {"base": 500000.0}, ("float64", "float32")),
    ("rope_frequencies", {"rope_type": "linear", "factor": 2.0}, ("float64", "float32")),
]
# Not observable through any vector: a keep mask is given whenever values are compared.
# llama_layer's (and parallel_layer's) offset: RoPE scores depend on i - j only, so shifting
# every query and key
# of the layer by the same offset leaves y unchanged (it matters in llama_step, whose cached
# keys sit at other positions: the incremental-decoding property and greedy_decode catch it).
# moe_router's eps divides only when renormalize is True, which its defaults vector leaves
# False (mixtral-001 states eps with renormalisation on); moe's eps, passed on to its router,
# likewise.
# min_tokens_to_keep acts only through a filter, and the defaults vectors have none on
# (sampling/min-tokens-001 states it with every filter on).
# mla's offset likewise; its yarn_factor and mscale_all_dim change the softmax scale only
# together (m = 1 unless factor > 1 and mscale_all_dim != 0), so one wrong default alone
# leaves y unchanged (mla/mscale-001 states both).
# mixtral_layer's and deepseek_layer's offset as llama_layer's; deepseek_*'s yarn_factor and
# mscale_all_dim as mla's; their top_k (None) is read only by an MoE layer, which must state it
# (a dense layer's defaults vector leaves it out and ignores it).
# group_score (moe_router, moe, deepseek_*) acts only with n_group > 1, which the defaults
# vectors leave at 1; the released grouped vectors (moe_router/groups-001, ties-002,
# deepseek-001, moe/deepseek-001, ...) predate the attribute and leave it out, so they pin
# its default "sum_top2" (tests/test_moe_router.py's group_max bug fails them).
# rope_frequencies' rule parameters act only under the rope_type that reads them, and its
# defaults vector is rope_type "default" (which reads none); the same rules' own defaults
# (yarn's beta_fast 32, beta_slow 1, truncate) are pinned through rope/scaling-defaults-001.
RULE_PARAMETERS = {("rope_frequencies", a) for a in (
    "seq_len", "factor", "original_max_position_embeddings", "max_position_embeddings",
    "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
    "low_freq_factor", "high_freq_factor", "short_factor", "long_factor", "truncate")}
UNOBSERVABLE = {("dropout", "seed"), ("greedy_decode", "eps"), ("llama_layer", "offset"),
                ("moe_router", "eps"), ("moe", "eps"), ("parallel_layer", "offset"),
                ("sampling_filter", "min_tokens_to_keep"), ("sample", "min_tokens_to_keep"),
                ("mla", "offset"), ("mla", "yarn_factor"), ("mla", "mscale_all_dim"),
                ("gemma_layer", "offset"), ("mixtral_layer", "offset"), ("deepseek_layer", "offset"),
                *[(f, a) for f in ("deepseek_layer", "deepseek_decoder_only")
                  for a in ("yarn_factor", "mscale_all_dim", "top_k")], *RULE_PARAMETERS,
                *[(f, "group_score") for f in ("moe_router", "moe", "deepseek_layer",
                                                "deepseek_decoder_only")]}


def wrong_default(name: str, defaults: dict):
    spec = default_spec()
    fn = spec.functions[name]
    right = NUMPY.function(name, fn.module)

    @functools.wraps(right)
    def broken(*args, **kwargs):
        return right(*args, **{**defaults, **kwargs})
    return mutant(**{name: broken}), fn.component


def _id(case):
    name, defaults = case[:2]
    return f"{name}-" + "-".join(f"{k}={v}" for k, v in defaults.items())


@pytest.mark.parametrize("case", WRONG, ids=_id)
def test_wrong_default_is_caught_at_every_dtype(case):
    backend, component = wrong_default(*case)
    with np.errstate(all="ignore"):
        fails = rejections(backend, component, flag="defaults")
    passed = [d for d, n in fails.items() if n == 0]
    assert not passed, f"a wrong default {case[1]} of {case[0]} passes at {passed}"


@pytest.mark.parametrize("case", COARSE, ids=_id)
def test_wrong_default_is_caught_where_resolvable(case):
    name, defaults, dtypes = case
    backend, component = wrong_default(name, defaults)
    fails = rejections(backend, component, flag="defaults")
    assert all(fails[d] > 0 for d in dtypes), fails


def test_every_defaulted_attribute_has_a_wrong_default_mutant():
    spec = default_spec()
    covered = {(name, a) for name, d, *_ in WRONG + COARSE for a in d} | UNOBSERVABLE
    want = {(name, a) for name, fn in spec.functions.items() for a in fn.attributes
            if a not in fn.required_attributes}
    assert want <= covered, sorted(want - covered)


def test_every_function_with_defaults_has_a_vector_that_leaves_them_out():
    spec = default_spec()
    for name, fn in spec.functions.items():
        defaulted = set(fn.attributes) - set(fn.required_attributes)
        if not defaulted:
            continue
        leaving_all_out = [v.id for v in spec.vectors if v.function == name
                           and v.expect == "value" and "defaults" in v.flags
                           and not defaulted & set(v.attributes)]
        assert leaving_all_out, f"{name}: no value vector leaves out {sorted(defaulted)}"


@pytest.mark.parametrize("component", sorted({default_spec().functions[n].component
                                               for n, _ in WRONG}))
def test_correct_backend_passes_the_defaults_vectors(component):
    fails = rejections(mutant(), component, flag="defaults")
    assert not any(fails.values()), fails
