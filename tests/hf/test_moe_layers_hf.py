"""backends/torch/hf_moe_layers.py: transformers' MixtralDecoderLayer, Qwen2MoeDecoderLayer and
DeepseekV3DecoderLayer to and from the spec's mixtral_layer and deepseek_layer (tiny local
configs, random weights, no download).

(a) from_hf: the layer's forward equals the NumPy backend's function on the converted
    parameters, in float64 within float32 rounding (transformers computes RMSNorm, the RoPE
    angles and the router's softmax in float32 even in float64: asserted);
(b) to_hf: every expressible vector through the layer (the suite's transformers extras), and a
    planted mapping bug (the two norms' gains swapped) fails that check;
(c) to_hf(from_hf(m)) holds m's weights bit for bit;
(d) what the layers cannot hold raises the spec's errors.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnspec.backends.numpy.layers import deepseek_layer, mixtral_layer  # noqa: E402
from attnspec.backends.numpy.models import deepseek_decoder_only  # noqa: E402
from attnspec.backends.torch import extras, hf, hf_moe_layers  # noqa: E402
from attnspec.spec.errors import ConfigError  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, MixtralConfig, Qwen2MoeConfig  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import MixtralDecoderLayer  # noqa: E402
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeDecoderLayer  # noqa: E402

from .small import randomized  # noqa: E402

EAGER = {"attn_implementation": "eager"}


def mixtral(**config):
    c = MixtralConfig(**{"hidden_size": 16, "intermediate_size": 8, "num_local_experts": 4,
                         "num_experts_per_tok": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "router_jitter_noise": 0.0, **EAGER,
                         **config})
    return randomized(MixtralDecoderLayer(c, 0))


def qwen(**config):
    c = Qwen2MoeConfig(**{"hidden_size": 16, "moe_intermediate_size": 8,
                          "shared_expert_intermediate_size": 12, "num_experts": 6,
                          "num_experts_per_tok": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, **EAGER, **config})
    return randomized(Qwen2MoeDecoderLayer(c, 0))


def deepseek(layer_idx=1, **config):
    c = DeepseekV3Config(**{"hidden_size": 16, "intermediate_size": 12, "moe_intermediate_size": 8,
                            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                            "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
                            "routed_scaling_factor": 2.5, "num_attention_heads": 2,
                            "num_key_value_heads": 2, "q_lora_rank": 8, "kv_lora_rank": 6,
                            "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4,
                            "first_k_dense_replace": 1, **EAGER, **config})
    m = randomized(DeepseekV3DecoderLayer(c, layer_idx))
    if layer_idx >= c.first_k_dense_replace:
        with torch.no_grad():
            m.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, 8)[torch.randperm(8)])
    return m


LAYERS = {"Mixtral": mixtral, "Mixtral-window": lambda: mixtral(sliding_window=3),
          "Qwen2-MoE": qwen, "Qwen2-MoE-normed": lambda: qwen(norm_topk_prob=True),
          "DeepSeek-V3-moe": deepseek, "DeepSeek-V3-dense": lambda: deepseek(layer_idx=0)}


def _x(dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 5, 16, generator=g, dtype=torch.float64).to(dtype)


def _spec_y(module, x, mask=None):
    a, p = hf.from_hf(module)
    fn = deepseek_layer if isinstance(module, DeepseekV3DecoderLayer) else mixtral_layer
    return a, fn(x.numpy(), mask, params={k: v.numpy() for k, v in p.items()}, **a)


# -- (a) from_hf -------------------------------------------------------------------------------


@pytest.mark.parametrize("make", LAYERS.values(), ids=LAYERS)
def test_moe_layer_from_hf_agrees_in_float64_within_float32_rounding(make):
    m = make()
    x = _x()
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[1, 0, 0, 3] = False
    _, want = _spec_y(m, x, mask)
    got = hf.forward(m, x, mask).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [mixtral, deepseek], ids=["Mixtral", "DeepSeek-V3"])
def test_transformers_layer_rounds_to_float32_even_in_float64(make):
    """The documented difference (spec/components/huggingface.md), asserted on the installed
    release: float64 in, an output off the float64 spec by float32's rounding, not float64's
    (RMSNorm, the RoPE angles and the router's softmax/sigmoid run in float32)."""
    m = make()
    x = _x()
    _, want = _spec_y(m, x)
    err = np.abs(hf.forward(m, x).numpy() - want).max()
    assert 1e-12 < err < 1e-5, err


@pytest.mark.parametrize("make", [mixtral, qwen, deepseek], ids=["Mixtral", "Qwen2-MoE", "DeepSeek-V3"])
def test_moe_layer_from_hf_agrees_in_float32(make):
    m = make().to(torch.float32)
    x = _x(torch.float32)
    _, want = _spec_y(m, x)
    np.testing.assert_allclose(hf.forward(m, x).numpy(), want, rtol=1e-4, atol=2e-5)


def test_attributes_from_hf():
    a, _ = hf.from_hf(qwen())
    assert a["attention_bias"] is True and a["renormalize"] is False and a["top_k"] == 2
    a, _ = hf.from_hf(mixtral(sliding_window=3))
    assert a["window"] == 3 and a["renormalize"] is True and "attention_bias" not in a
    a, p = hf.from_hf(deepseek())
    assert a["scoring"] == "sigmoid" and a["n_group"] == 4 and a["routed_scaling_factor"] == 2.5
    assert "moe.router.correction_bias" in p and "ffn.w_gate" not in p
    a, p = hf.from_hf(deepseek(layer_idx=0))
    assert "top_k" not in a and "ffn.w_gate" in p and "moe.router.w" not in p


# -- (b) the vectors through to_hf ---------------------------------------------------------------

NAMES = ["agree/transformers.MixtralDecoderLayer", "agree/transformers.Qwen2MoeDecoderLayer",
         "agree/transformers.DeepseekV3DecoderLayer", "agree/transformers.DeepseekV3ForCausalLM"]


def _check(name):
    return dict(extras.hf_checks("cpu"))[name]


@pytest.mark.parametrize("name", NAMES)
def test_moe_layer_vectors_pass_through_to_hf(name):
    _check(name)(default_spec())


@pytest.mark.parametrize("name", NAMES)
def test_norms_swapped_in_to_hf_fails_the_check(monkeypatch, name):
    swapped = [("input_layernorm.weight", "ffn_norm.gamma", False),
               ("post_attention_layernorm.weight", "attn_norm.gamma", False)]
    monkeypatch.setattr(hf_moe_layers, "NORMS", swapped)
    rows = [r for r in hf_moe_layers.ATTN if "layernorm" not in r[0]] + swapped
    monkeypatch.setattr(hf_moe_layers, "ATTN", rows)
    monkeypatch.setattr(hf_moe_layers, "QWEN_ATTN", rows + [
        (f"self_attn.{c}_proj.bias", f"attn.b_{c}", False) for c in "qkv"])
    with pytest.raises(AssertionError, match="moe_layers/"):
        _check(name)(default_spec())


# -- (c) round trip ------------------------------------------------------------------------------

@pytest.mark.parametrize("make", LAYERS.values(), ids=LAYERS)
def test_to_hf_of_from_hf_is_bit_identical(make):
    m = make()
    a, p = hf.from_hf(m)
    m2 = hf.to_hf(p, a)
    assert type(m2) is type(m)
    s, s2 = m.state_dict(), m2.state_dict()
    assert set(s) == set(s2)
    for k in s:
        assert torch.equal(s[k], s2[k]), k


# -- (d) refusals ----------------------------------------------------------------------------------

def test_a_dense_qwen2_moe_layer_is_refused():
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        hf.from_hf(qwen(mlp_only_layers=[0]))


def test_deepseek_softmax_scoring_is_refused():
    a, p = hf.from_hf(deepseek())
    with pytest.raises(ConfigError, match="scoring"):
        hf.to_hf(p, {**a, "scoring": "softmax"})


def test_deepseek_layer_with_two_eps_is_refused():
    with pytest.raises(ConfigError, match="rms_norm_eps"):
        hf.from_hf(deepseek(rms_norm_eps=1e-5))


def test_unknown_attribute_is_refused():
    a, p = hf.from_hf(mixtral())
    with pytest.raises(ConfigError, match="norm"):
        hf.to_hf(p, {**a, "norm": "pre"})


def test_spec_function_names_the_layers():
    assert {hf.SPEC_FUNCTION[n] for n in ("MixtralDecoderLayer", "Qwen2MoeDecoderLayer")} == \
        {"mixtral_layer"}
    assert hf.SPEC_FUNCTION["DeepseekV3DecoderLayer"] == "deepseek_layer"


# -- the DeepSeek-V3 model -------------------------------------------------------------------------

def deepseek_model():
    c = DeepseekV3Config(hidden_size=16, intermediate_size=12, moe_intermediate_size=8,
                         n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=2,
                         topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                         num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None,
                         kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                         first_k_dense_replace=1, num_hidden_layers=3, vocab_size=20,
                         tie_word_embeddings=False, **EAGER)
    return randomized(DeepseekV3ForCausalLM(c)).to(torch.float32)  # its grouped experts: no float64


def test_deepseek_model_from_hf_agrees_and_round_trips():
    m = deepseek_model()
    a, p = hf.from_hf(m)
    assert a["first_k_dense_replace"] == 1 and a["num_layers"] == 3
    assert "layers.0.ffn.w_gate" in p and "layers.1.moe.router.w" in p
    ids = torch.tensor([[1, 5, 7, 0, 3], [2, 9, 0, 0, 0]])
    want = deepseek_decoder_only(ids.numpy(), pad_id=0, params={k: v.numpy() for k, v in p.items()},
                                 **a)
    np.testing.assert_allclose(hf.forward(m, ids, pad_id=0).numpy(), want, rtol=1e-4, atol=1e-4)
    m2 = hf.to_hf(p, a)
    assert type(m2) is DeepseekV3ForCausalLM
    s, s2 = m.state_dict(), m2.state_dict()
    assert set(s) == set(s2) and all(torch.equal(s[k], s2[k]) for k in s)


def test_deepseek_model_dtypes_float64_needs_eager_experts():
    """transformers 5.24 with torch's CPU grouped_mm: a DeepseekV3ForCausalLM built directly
    runs its experts through grouped_mm (experts_implementation's default), which refuses
    float64; set_experts_implementation("eager") lifts it, and the float64 model then agrees
    with the float64 spec to float32's rounding (RMSNorm, RoPE and the router in float32).
    to_hf's model holds standalone layers whose experts run eagerly (the suite's extra runs
    it in float64 at the float32 tolerance and in bfloat16 at the bfloat16 tolerance)."""
    m = deepseek_model().to(torch.float64)
    ids = torch.tensor([[1, 5, 7, 0, 3], [2, 9, 0, 0, 0]])
    if m.config._experts_implementation == "grouped_mm":
        with pytest.raises(RuntimeError, match="Double"):
            hf.forward(m, ids, pad_id=0)
    m.set_experts_implementation("eager")
    a, p = hf.from_hf(m)
    want = deepseek_decoder_only(ids.numpy(), pad_id=0, params={k: v.numpy() for k, v in p.items()},
                                 **a)
    got = hf.forward(m, ids, pad_id=0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - want).max() > 1e-12  # float32's rounding, not float64's
