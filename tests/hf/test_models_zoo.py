"""The zoo's whole models (MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM ->
llama_decoder_only, GPTNeoXForCausalLM, FalconForCausalLM -> parallel_decoder_only:
backends/torch/hf_models.py; Gemma2ForCausalLM, Gemma3ForCausalLM -> gemma_decoder_only:
hf_gemma.py, whose own tests are tests/hf/test_gemma_hf.py), built from tiny local configs
with random weights (issue 25 item 6).

(a) the golden vectors through to_hf: every expressible value vector, judged at the vector's
    float32 tolerance (what transformers computes in float32, spec/components/huggingface.md);
(b) from_hf: a random float64 model's logits equal the NumPy backend's spec function on the
    converted parameters within float32 rounding, and not within float64's;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) a config the spec cannot express raises ConfigError naming the field;
(e) planted converter bugs (Qwen2's biases dropped, Phi-3's and GPT-NeoX's partial rotary
    ignored, Falcon's final norm bias dropped) fail (a).
"""

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch
from attnspec.backends.numpy.models import (
    gemma_decoder_only,
    llama_decoder_only,
    parallel_decoder_only,
)
from attnspec.backends.torch import hf, hf_models
from attnspec.spec.errors import ConfigError, ParameterError
from attnspec.spec.vectors import default_spec
from transformers import (
    FalconConfig,
    Gemma2Config,
    Gemma3TextConfig,
    GPTNeoXConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
)
from transformers.models.falcon.modeling_falcon import FalconForCausalLM
from transformers.models.gemma2.modeling_gemma2 import Gemma2ForCausalLM
from transformers.models.gemma3.modeling_gemma3 import Gemma3ForCausalLM
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXForCausalLM
from transformers.models.mistral.modeling_mistral import MistralForCausalLM
from transformers.models.phi3.modeling_phi3 import Phi3ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

from .small import randomized

ROPE = {"rope_type": "default", "rope_theta": 100.0}
LLAMA_LIKE = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, attn_implementation="eager",
                  num_hidden_layers=2, vocab_size=11, rope_parameters=ROPE, pad_token_id=None,
                  eos_token_id=None, bos_token_id=None)
GEMMA = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4, num_key_value_heads=2,
             head_dim=4, rms_norm_eps=1e-5, attn_implementation="eager", num_hidden_layers=3,
             vocab_size=11, pad_token_id=None, eos_token_id=None, bos_token_id=None,
             sliding_window=3, query_pre_attn_scalar=4)
ALTERNATING = ["sliding_attention", "full_attention", "sliding_attention"]


def mistral(**c):
    return randomized(MistralForCausalLM(MistralConfig(**{**LLAMA_LIKE, "sliding_window": 3, **c})))


def qwen2(**c):
    base = {**LLAMA_LIKE, "tie_word_embeddings": True, "use_sliding_window": True,
            "sliding_window": 3, "max_window_layers": 0}
    return randomized(Qwen2ForCausalLM(Qwen2Config(**{**base, **c})))


def phi3(**c):
    base = {**LLAMA_LIKE, "rope_parameters": {**ROPE, "partial_rotary_factor": 0.5}}
    return randomized(Phi3ForCausalLM(Phi3Config(**{**base, **c})))


def gemma2(**c):
    base = {**GEMMA, "final_logit_softcapping": 5.0, "attn_logit_softcapping": 20.0}
    return randomized(Gemma2ForCausalLM(Gemma2Config(**{**base, **c})))


def gemma3(**c):
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
            "full_attention": {"rope_type": "default", "rope_theta": 100.0}}
    base = {**GEMMA, "layer_types": ALTERNATING, "rope_parameters": rope}
    return randomized(Gemma3ForCausalLM(Gemma3TextConfig(**{**base, **c})))


def neox(**c):
    base = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4, hidden_act="gelu",
                attn_implementation="eager", num_hidden_layers=2, vocab_size=11,
                rope_parameters={**ROPE, "partial_rotary_factor": 0.5}, pad_token_id=None,
                bos_token_id=None, eos_token_id=None)
    return randomized(GPTNeoXForCausalLM(GPTNeoXConfig(**{**base, **c})))


def falcon(**c):
    """Falcon's new decoder architecture (GQA, two norms), its default tied head."""
    base = dict(hidden_size=16, num_attention_heads=4, num_kv_heads=2, ffn_hidden_size=24,
                bias=True, alibi=False, parallel_attn=True, new_decoder_architecture=True,
                attn_implementation="eager", num_hidden_layers=2, vocab_size=11,
                rope_parameters=ROPE, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    return randomized(FalconForCausalLM(FalconConfig(**{**base, **c})))


MODELS = {"GPTNeoXForCausalLM": neox, "FalconForCausalLM": falcon,
          "MistralForCausalLM": mistral, "Qwen2ForCausalLM": qwen2, "Phi3ForCausalLM": phi3,
          "Gemma2ForCausalLM": gemma2, "Gemma3ForCausalLM": gemma3}
IDS = torch.tensor([[1, 5, 3, 7, 9, 2, 4], [1, 8, 6, 4, 3, 0, 0]])


def _spec_logits(model, ids, pad_id):
    a, p = hf.from_hf(model)
    name = type(model).__name__
    fn = gemma_decoder_only if "Gemma" in name else (
        parallel_decoder_only if name in ("GPTNeoXForCausalLM", "FalconForCausalLM")
        else llama_decoder_only)
    return fn(ids.numpy(), params={k: v.numpy() for k, v in p.items()},
              **{**a, "pad_id": pad_id})


# -- (b) from_hf: the model's logits equal the spec function ---------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_from_hf_agrees_within_float32_rounding_only(name):
    """transformers computes the RMSNorms, the RoPE angles and the eager softmax in float32
    even in a float64 model: the logits agree with the float64 spec function to float32
    rounding (~1e-7 relative), and differ from it by more than float64 rounding."""
    m = MODELS[name]()
    got = hf.forward(m, IDS, pad_id=0).numpy()
    want = _spec_logits(m, IDS, 0)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert np.abs(got - want).max() > 1e-9  # float32 inside, not float64


def test_from_hf_attributes_name_each_model_s_convention():
    assert hf.from_hf(mistral())[0] == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5,
                                        "rope_base": 100.0, "window": 3, "num_layers": 2}
    assert hf.from_hf(qwen2())[0] == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5,
                                      "rope_base": 100.0, "window": 3, "attention_bias": True,
                                      "num_layers": 2, "tie_embeddings": True}
    a, p = hf.from_hf(phi3())
    assert a["rotary_dim"] == 2 and "lm_head.w" in p and "tie_embeddings" not in a
    a, p = hf.from_hf(gemma2())
    assert (a["window"], a["final_softcap"], a["softcap"], a["qk_norm"]) == (3, 5.0, 20.0, False)
    assert a.get("rope_local_base", a["rope_base"]) == a["rope_base"] and "lm_head.w" not in p
    a, _ = hf.from_hf(gemma3())
    assert (a["rope_base"], a["rope_local_base"], a["qk_norm"], a["final_softcap"]) == \
        (100.0, 10.0, True, None)


# -- (c) round trip ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_to_hf_of_from_hf_is_bit_identical(name):
    m = MODELS[name]()
    a, p = hf.from_hf(m)
    back = hf.to_hf(p, a, model=name)
    assert type(back) is type(m)
    s1, s2 = m.state_dict(), back.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    assert torch.equal(hf.forward(back, IDS, pad_id=0), hf.forward(m, IDS, pad_id=0))


def test_tied_models_are_tied_after_to_hf():
    for name in ("Qwen2ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        back = hf.to_hf(*reversed(hf.from_hf(MODELS[name]())), model=name)
        assert back.lm_head.weight.data_ptr() == back.model.embed_tokens.weight.data_ptr()


# -- (a) the golden vectors through to_hf ---------------------------------------------------


def _through(model, planted=None):
    """Every expressible value vector of the model's spec function through
    ``to_hf(model=...)``, judged at its float32 tolerance; ``planted(module, v)`` corrupts
    the converted module first."""
    from attnspec.backends.torch.extras import _close_at, _tensors

    function = hf_models.SPEC_FUNCTION[model]
    compared = []
    for v in default_spec().vectors:
        if v.function != function or v.expect != "value" or v.deprecated:
            continue
        a = hf_models.expressible(v, model)
        if a is None:
            continue
        x, p = _tensors(v.inputs, "cpu"), _tensors(v.params, "cpu")
        pad_id = a.pop("pad_id")
        module = hf.to_hf(p, a, model=model)
        if planted is not None:
            planted(module, v)
        _close_at(model, hf.forward(module, x["ids"], pad_id=pad_id), v, "logits", "float32")
        compared.append(v.id)
    return compared


@pytest.mark.parametrize("model, least", [
    ("MistralForCausalLM", 9), ("Qwen2ForCausalLM", 3), ("Phi3ForCausalLM", 8),
    ("GPTNeoXForCausalLM", 4),
    ("FalconForCausalLM", 5)])
def test_the_vectors_through_the_zoo_model(model, least):
    assert len(_through(model)) >= least


def test_qwen2_model_judges_the_bias_and_tied_vectors():
    assert {"llama/model-bias-001", "llama/model-qwen2-001", "llama/model-qwen2-002"} <= \
        set(_through("Qwen2ForCausalLM"))


# -- (e) planted converter bugs --------------------------------------------------------------


def _fails(model, planted):
    with pytest.raises(AssertionError):
        _through(model, planted)


def test_qwen2_biases_dropped_are_caught():
    def drop(module, v):
        with torch.no_grad():
            for layer in module.model.layers:
                for c in "qkv":
                    getattr(layer.self_attn, f"{c}_proj").bias.zero_()
    _fails("Qwen2ForCausalLM", drop)


def test_phi3_partial_rotary_ignored_is_caught(monkeypatch):
    real = hf_models.hf_zoo.to_hf

    def whole_heads(params, attributes, model):
        return real(params, {k: v for k, v in attributes.items() if k != "rotary_dim"}, model)
    monkeypatch.setattr(hf_models.hf_zoo, "to_hf", whole_heads)
    _fails("Phi3ForCausalLM", None)


def test_gpt_neox_model_partial_rotary_ignored_is_caught(monkeypatch):
    real = hf_models.hf_zoo.to_hf

    def whole_heads(params, attributes, model):
        return real(params, {k: v for k, v in attributes.items() if k != "rotary_dim"}, model)
    monkeypatch.setattr(hf_models.hf_zoo, "to_hf", whole_heads)
    _fails("GPTNeoXForCausalLM", None)


def test_falcon_final_norm_bias_dropped_is_caught():
    def drop(module, v):
        with torch.no_grad():
            module.transformer.ln_f.bias.zero_()
    _fails("FalconForCausalLM", drop)


def test_parallel_models_attributes():
    a, p = hf.from_hf(neox())
    assert a == {"num_heads": 4, "num_kv_heads": None, "num_norms": 2, "eps": 1e-5,
                 "activation": "gelu", "rope_base": 100.0, "rotary_dim": 2, "num_layers": 2}
    assert {"final_norm.gamma", "final_norm.beta", "lm_head.w"} <= set(p)
    a, p = hf.from_hf(falcon())  # FalconConfig ties the head by default
    assert a["tie_embeddings"] is True and "lm_head.w" not in p
    assert (a["num_kv_heads"], a["num_norms"]) == (2, 2)


def test_sequential_gpt_neox_model_is_refused():
    with pytest.raises(ConfigError, match="use_parallel_residual"):
        hf.from_hf(neox(use_parallel_residual=False))


# -- (d) what the spec cannot express ---------------------------------------------------------


def test_qwen2_window_on_some_layers_only_is_refused():
    """max_window_layers = 1: layer 0 full attention, layer 1 sliding; the spec's window is one
    for every layer."""
    with pytest.raises(ConfigError, match="window"):
        hf.from_hf(qwen2(max_window_layers=1))


def test_to_hf_refusals_name_the_attribute():
    a, p = hf.from_hf(gemma3())
    with pytest.raises(ConfigError, match="qk_norm"):
        hf.to_hf(p, a, model="Gemma2ForCausalLM")
    a, p = hf.from_hf(qwen2())
    with pytest.raises(ParameterError, match="lm_head.w"):
        hf.to_hf({**p, "lm_head.w": p["embed.table"].T.clone()}, a, model="Qwen2ForCausalLM")
    with pytest.raises(ConfigError, match="attention_bias"):
        hf.to_hf(p, {**a, "attention_bias": False}, model="Qwen2ForCausalLM")
    with pytest.raises(ConfigError, match="num_layers"):
        hf.to_hf(p, {**a, "num_layers": 0}, model="Qwen2ForCausalLM")
    with pytest.raises(ConfigError, match="has no converter"):
        hf.to_hf(p, a, model="Qwen3ForCausalLM")


def test_forward_takes_pad_id_not_mask():
    m = mistral()
    with pytest.raises(ConfigError, match="pad_id"):
        hf.forward(m, IDS, torch.ones(7, 7, dtype=torch.bool))
