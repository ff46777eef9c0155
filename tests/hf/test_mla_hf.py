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
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 100.0, "factor": 4.0}},
     "rope_parameters"),
    ({"num_key_value_heads": 1}, "num_key_value_heads"),
])
def test_inexpressible_config_raises_config_error(config, field):
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(deepseek(**config))


def test_to_hf_refuses_yarn_mscale_without_rope_scaling():
    _, params = hf.from_hf(deepseek())
    with pytest.raises(ConfigError, match="mscale_all_dim"):
        hf.to_hf(params, {"num_heads": 2, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
                          "v_head_dim": 6, "yarn_factor": 40.0, "mscale_all_dim": 1.0})


# -- YaRN (DeepSeek-V2/V3's real rope_parameters) as mla's rope_scaling ------------------------

V3_YARN = {"rope_type": "yarn", "rope_theta": 10.0, "factor": 40.0,
           "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
           "mscale": 1.0, "mscale_all_dim": 1.0}


@pytest.mark.parametrize("rope", [
    V3_YARN,
    {**V3_YARN, "mscale": 0.707, "mscale_all_dim": 0.707, "factor": 16.0},
    {k: v for k, v in V3_YARN.items() if k != "mscale_all_dim"},
    {**V3_YARN, "attention_factor": 0.75},
    {"rope_type": "linear", "rope_theta": 10.0, "factor": 4.0},
], ids=["v3", "v2", "mscale-only", "attention-factor", "linear"])
@pytest.mark.parametrize("config", [{}, {"q_lora_rank": None, "rope_interleave": False}],
                         ids=["q-latent", "q-direct-half"])
def test_yarn_deepseek_v3_attention_from_hf_agrees(rope, config):
    """rope_parameters -> rope_base + rope_scaling; the module's forward (YaRN frequencies,
    its attention factor on cos/sin, yarn_apply_mscale's m^2) equals the NumPy mla's at
    positions 0.. and 6.., and to_hf(from_hf(m)) is bit identical."""
    m = deepseek(rope_parameters=dict(rope), max_position_embeddings=2560, **config)
    attributes, params = hf.from_hf(m)
    want_scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    assert attributes["rope_scaling"] == want_scaling and attributes["rope_base"] == 10.0
    x = x_of(2, 5, 12)
    for offset in (0, 6):
        want = mla(x.numpy(), params=_np(params), offset=offset, **attributes)
        got = hf_mla.forward(m, x, offset=offset).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    back = hf.to_hf(params, attributes)
    assert back.scaling == m.scaling
    assert torch.equal(hf_mla.forward(back, x), hf_mla.forward(m, x))


def test_yarn_mscale_matters_in_the_comparison():
    """The comparison can fail: m^2 dropped from the spec's side (rope_scaling's
    mscale_all_dim removed, the frequencies kept) disagrees with the module."""
    m = deepseek(rope_parameters=dict(V3_YARN), max_position_embeddings=2560)
    attributes, params = hf.from_hf(m)
    attributes["rope_scaling"] = {k: v for k, v in attributes["rope_scaling"].items()
                                  if k not in ("mscale_all_dim", "mscale")}
    attributes["rope_scaling"]["attention_factor"] = 1.0
    x = x_of(2, 5, 12)
    want = mla(x.numpy(), params=_np(params), **attributes)
    assert not np.allclose(hf_mla.forward(m, x).numpy(), want, rtol=1e-3, atol=1e-3)
