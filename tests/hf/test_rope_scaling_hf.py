"""RoPE scaling through the Llama-family converters (issue 25 items 1 and 2): every rope_type
of transformers 5 that the spec states (linear, dynamic, yarn, llama3, longrope) and Phi-3's
partial rotary go from rope_parameters to llama_layer's rope_scaling / rotary_dim and back,
and the converted modules agree with the spec's llama_layer past the original context; what
the spec does not state is refused naming the field. The statements of
spec/components/huggingface.md (RoPE scaling) are asserted against the installed release."""

import numpy as np
import pytest
from attnspec.backends.numpy.layers import llama_layer
from attnspec.backends.numpy.models import llama_decoder_only
from attnspec.backends.torch import hf
from attnspec.spec.errors import ConfigError
from transformers import LlamaConfig, MistralConfig, Phi3Config
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer

from .small import DT, llama, llama_lm, randomized, torch, x_of

L0 = 8
RULES = {  # rope_parameters (less rope_theta), config fields
    "linear": ({"factor": 4.0}, {}),
    "dynamic": ({"factor": 4.0}, {"max_position_embeddings": L0}),
    "yarn": ({"factor": 8.0, "original_max_position_embeddings": L0, "beta_fast": 16.0},
             {"max_position_embeddings": 8 * L0}),
    "llama3": ({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 4 * L0}, {}),
    "longrope": ({"original_max_position_embeddings": L0, "short_factor": [1.0, 1.5, 2.0],
                  "long_factor": [1.0, 4.0, 16.0]}, {"max_position_embeddings": 4 * L0}),
}


def scaled_llama(rule, **config):
    rope, extra = RULES[rule]
    return llama(rope_parameters={"rope_type": rule, "rope_theta": 100.0, **rope},
                 **{**extra, **config})


def _np(params):
    return {k: v.detach().numpy() for k, v in params.items()}


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("offset", [0, 13])
def test_scaled_llama_layer_from_hf_agrees_with_the_spec_layer(rule, offset):
    """Past the original context (offset 13 + T = 5 > L0 = 8) the rules differ, and dynamic
    and longrope pick their frequencies from seq_len = offset + T, as transformers' rotary
    embedding does from max(position_ids) + 1. At float64 transformers still computes
    inv_freq and the angles in float32, so the agreement is to float32 rounding."""
    layer = scaled_llama(rule)
    a, p = hf.from_hf(layer)
    assert a["rope_scaling"]["rope_type"] == rule
    x = x_of(2, 5, 16)
    got = hf.forward(layer, x, offset=offset).numpy()
    want = llama_layer(x.numpy(), offset=offset, params=_np(p), **a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    unscaled = llama_layer(x.numpy(), offset=offset, params=_np(p),
                           **{k: v for k, v in a.items() if k != "rope_scaling"})
    if offset or rule != "dynamic":  # dynamic acts only past L0
        assert np.abs(unscaled - want).max() > 1e-3  # the scaling shows at these positions


@pytest.mark.parametrize("rule", sorted(RULES))
def test_scaled_llama_layer_round_trips(rule):
    a, p = hf.from_hf(scaled_llama(rule))
    back, p2 = hf.from_hf(hf.to_hf(p, a))
    assert back == a
    assert all(torch.equal(p[k], p2[k]) for k in p)


@pytest.mark.parametrize("rule", ["yarn", "dynamic"])
def test_scaled_llama_for_causal_lm_agrees_with_the_spec_model(rule):
    rope, extra = RULES[rule]
    model = llama_lm(rope_parameters={"rope_type": rule, "rope_theta": 100.0, **rope}, **extra,
                     head_dim=4)
    a, p = hf.from_hf(model)
    ids = torch.tensor([[1, 4, 6, 4, 3, 2, 7, 9, 5, 1, 2]])  # T = 11 > L0
    got = hf.forward(model, ids, pad_id=0).numpy()
    want = llama_decoder_only(ids.numpy(), params=_np(p), **{"pad_id": 0, **a})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_phi3_longrope_with_partial_rotary_round_trips_and_agrees():
    """Phi3Config takes rope_type longrope (and default) only; partial_rotary_factor 0.5 of
    K = 4 is rotary_dim 2, long/short factors of R/2 = 1 entry."""
    c = Phi3Config(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                   num_key_value_heads=2, rms_norm_eps=1e-5, attn_implementation="eager",
                   num_hidden_layers=1, max_position_embeddings=4 * L0,
                   original_max_position_embeddings=L0,
                   rope_parameters={"rope_type": "longrope", "rope_theta": 100.0,
                                    "partial_rotary_factor": 0.5, "short_factor": [1.5],
                                    "long_factor": [8.0], "original_max_position_embeddings": L0})
    layer = randomized(Phi3DecoderLayer(c, 0))
    a, p = hf.from_hf(layer)
    assert a["rotary_dim"] == 2 and a["rope_scaling"]["rope_type"] == "longrope"
    x = x_of(1, 4, 16)
    for offset in (0, 10):  # short, then long factors
        np.testing.assert_allclose(hf.forward(layer, x, offset=offset).numpy(),
                                   llama_layer(x.numpy(), offset=offset, params=_np(p), **a),
                                   rtol=1e-5, atol=1e-5)
    back, _ = hf.from_hf(hf.to_hf(p, a, model="Phi3DecoderLayer"))
    assert back == a


def test_mistral_takes_every_stated_rule():
    for rule, (rope, extra) in RULES.items():
        c = MistralConfig(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                          num_key_value_heads=2, attn_implementation="eager",
                          num_hidden_layers=1, **extra,
                          rope_parameters={"rope_type": rule, "rope_theta": 100.0, **rope})
        a, p = hf.from_hf(randomized(MistralDecoderLayer(c, 0)))
        back, _ = hf.from_hf(hf.to_hf(p, a, model="MistralDecoderLayer"))
        assert back == a, rule


# -- what the spec does not state -------------------------------------------------------------

@pytest.mark.parametrize("make, field", [
    (lambda: llama(rope_parameters={"rope_type": "proportional", "rope_theta": 100.0}),
     "rope_parameters.rope_type"),
    (lambda: llama(rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                                    "partial_rotary_factor": 0.5}),
     "rope_parameters.partial_rotary_factor"),
    (lambda: llama(rope_parameters={"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0,
                                    "beta_fast": 8.0}), "rope_parameters.beta_fast"),
])
def test_from_hf_refuses_what_the_spec_does_not_state(make, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        hf.from_hf(make())


@pytest.mark.parametrize("attributes, model, mention", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "Phi3DecoderLayer", "rope_type"),
    ({"rotary_dim": 2}, "MistralDecoderLayer", "rotary_dim"),
    ({"rotary_dim": 2}, None, "rotary_dim"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "seq_len": 9}}, None, "seq_len"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, None,
     "max_position_embeddings"),
])
def test_to_hf_refuses_what_the_module_cannot_hold(attributes, model, mention):
    a, p = hf.from_hf(llama(head_dim=4))
    with pytest.raises(ConfigError, match=mention):
        hf.to_hf(p, {**a, **attributes}, model=model)


# -- what transformers computes (spec/components/huggingface.md, RoPE scaling) ---------------

def test_transformers_rope_inv_freq_is_float32_and_its_attention_factor_scales_cos_and_sin():
    """LlamaRotaryEmbedding keeps inv_freq in float32 whatever the module's dtype, and returns
    cos and sin multiplied by attention_scaling (yarn: 0.1 ln(factor) + 1), so q.k carries
    its square."""
    rope, extra = RULES["yarn"]
    c = LlamaConfig(hidden_size=16, num_attention_heads=4, head_dim=4, **extra,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 100.0, **rope})
    rotary = LlamaRotaryEmbedding(c)
    assert rotary.inv_freq.dtype == torch.float32
    m = 0.1 * np.log(8.0) + 1
    assert rotary.attention_scaling == pytest.approx(m)
    cos, sin = rotary(torch.zeros(1, 1, 4, dtype=DT), torch.tensor([[0, 3, 1000]]))
    assert cos.dtype == DT and float(cos[0, 0, 0]) == pytest.approx(m)  # position 0: m, not 1
    np.testing.assert_allclose((cos ** 2 + sin ** 2).numpy(), m * m, rtol=1e-6)
    # the angles are float32 products even for a float64 x: at position 1000 the float64 cos
    # differs from transformers' by more than float64 rounding
    angle = 1000 * rotary.inv_freq.to(DT)
    assert not torch.allclose(cos[0, 2, :2], m * torch.cos(angle), rtol=1e-12, atol=0)


def test_transformers_dynamic_and_longrope_follow_the_largest_position():
    """dynamic and longrope read seq_len = max(position_ids) + 1 at each call (the spec's
    offset + T); below the original context both use their unscaled (short) frequencies."""
    for rule in ("dynamic", "longrope"):
        rope, extra = RULES[rule]
        c = LlamaConfig(hidden_size=16, num_attention_heads=4, head_dim=6, **extra,
                        rope_parameters={"rope_type": rule, "rope_theta": 100.0, **rope})
        rotary = LlamaRotaryEmbedding(c)
        first = rotary.inv_freq.clone()
        rotary(torch.zeros(1), torch.tensor([[L0 + 3]]))
        assert not torch.equal(rotary.inv_freq, first), rule  # re-picked past L0
        rotary(torch.zeros(1), torch.tensor([[2]]))
        assert torch.equal(rotary.inv_freq, first), rule  # back below L0
