"""backends/torch/hf_mla.py: transformers' DeepseekV3Attention (multi-head latent attention)
to and from the spec's mla parameters, from tiny local configs with random weights.

(a) from_hf: the module's forward equals the NumPy backend's mla on the converted parameters,
    at float32 accuracy (transformers computes RMSNorm and the RoPE angles in float32 even for
    float64 tensors);
(b) to_hf: the mla vectors through the module (extras.agree_hf_mla, the suite's extra), and a planted
    mapping bug that they reject;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) a config mla cannot express raises ConfigError naming the field.
"""

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.numpy.layers import mla
from attnspec.backends.torch import extras, hf, hf_mla
from attnspec.spec.errors import ConfigError
from attnspec.spec.vectors import default_spec
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

from .small import randomized, torch, x_of

RTOL, ATOL = 2e-6, 2e-6  # float32 accuracy (see (a))


def deepseek(**config):
    """H = 2, Dn = 4, Dr = 4, Dv = 6, R = 6, R_q = 5, D = 12: every width different."""
    base = dict(hidden_size=12, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=5,
                kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                rope_parameters={"rope_type": "default", "rope_theta": 100.0},
                attn_implementation="eager")
    return randomized(DeepseekV3Attention(DeepseekV3Config(**{**base, **config}), layer_idx=0))


def _np(params):
    return {k: v.numpy() for k, v in params.items()}


# -- (a) from_hf ---------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"q_lora_rank": None}, {"rope_interleave": False}],
                         ids=["q-latent", "q-direct", "rotate-half"])
def test_deepseek_v3_attention_from_hf_agrees(config):
    m = deepseek(**config)
    attributes, params = hf.from_hf(m)
    assert attributes["rope_convention"] == ("half" if config.get("rope_interleave") is False
                                             else "interleaved")
    assert ("w_q" in params) == (config.get("q_lora_rank", 5) is None)
    x = x_of(2, 5, 12)
    mask = torch.tensor([True, True, False, True, True])[None, None, None, :]
    for offset in (0, 3):
        want = mla(x.numpy(), mask.numpy(), params=_np(params), offset=offset, **attributes)
        got = hf_mla.forward(m, x, mask, offset=offset).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- (b) to_hf: the vectors ------------------------------------------------------------------------


def test_mla_vectors_agree_through_to_hf():
    extras.agree_hf_mla("cpu")(default_spec())


def test_a_mapping_bug_is_rejected_by_the_vectors(monkeypatch):
    """rope_interleave written inverted (the layout bug): the vectors reject it."""
    real = hf_mla.mla_to_hf

    def inverted(params, attributes):
        flip = {"interleaved": "half", "half": "interleaved"}
        a = {**attributes, "rope_convention": flip[attributes.get("rope_convention", "interleaved")]}
        return real(params, a)

    monkeypatch.setattr(hf_mla, "mla_to_hf", inverted)
    with pytest.raises(AssertionError):
        extras.agree_hf_mla("cpu")(default_spec())


# -- (c) round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"q_lora_rank": None, "rope_interleave": False}])
def test_to_hf_of_from_hf_is_bit_identical(config):
    m = deepseek(**config)
    attributes, params = hf.from_hf(m)
    back = hf.to_hf(params, attributes)
    assert isinstance(back, DeepseekV3Attention)
    for (name, a), (_, b) in zip(m.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name
    x = x_of(1, 4, 12)
    assert torch.equal(hf_mla.forward(m, x), hf_mla.forward(back, x))


# -- (d) what mla cannot express ---------------------------------------------------------------


@pytest.mark.parametrize(("config", "field"), [
    ({"attention_bias": True}, "attention_bias"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
                          "original_max_position_embeddings": 64, "mscale_all_dim": 1.0}},
     "rope_parameters"),
])
def test_inexpressible_config_raises_config_error(config, field):
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(deepseek(**config))


def test_to_hf_refuses_yarn_mscale():
    _, params = hf.from_hf(deepseek())
    with pytest.raises(ConfigError, match="mscale_all_dim"):
        hf.to_hf(params, {"num_heads": 2, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
                          "v_head_dim": 6, "yarn_factor": 40.0, "mscale_all_dim": 1.0})
