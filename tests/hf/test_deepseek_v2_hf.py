"""backends/torch/hf_deepseek_v2.py: transformers' DeepseekV2Moe, DeepseekV2Attention and
DeepseekV2DecoderLayer to and from the spec's moe, mla and deepseek_layer, from tiny local
configs with random weights.

(a) from_hf: each module's forward equals the NumPy backend's function on the converted
    parameters at float32 accuracy (transformers computes the router, RMSNorm and the RoPE
    angles in float32 even for float64 modules: asserted below);
(b) to_hf: the vectors each module can hold through it (extras.agree_hf_deepseek_v2, the
    suite's extras), and a planted mapping bug that they reject;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) what the spec functions cannot hold raises ConfigError naming the field.
"""

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.numpy.layers import deepseek_layer, mla
from attnspec.backends.numpy.moe import moe
from attnspec.backends.torch import extras, hf, hf_deepseek_v2
from attnspec.spec.errors import ConfigError
from attnspec.spec.vectors import default_spec
from transformers import DeepseekV2Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
    DeepseekV2Attention,
    DeepseekV2DecoderLayer,
    DeepseekV2Moe,
)

from .small import randomized, torch, x_of

RTOL, ATOL = 2e-6, 2e-6  # float32 accuracy (see (a))
V2_YARN = {"rope_type": "yarn", "rope_theta": 10.0, "factor": 40.0,
           "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
           "mscale": 0.707, "mscale_all_dim": 0.707}


def config(**over):
    """H = 2, Dn = 4, Dr = 4, Dv = 6, R = 6, D = 12; 8 experts (F = 4) in 4 groups, the best
    2, top 3, times 2.5, 2 shared experts; DeepSeek-V2's YaRN at rope_base 10."""
    base = dict(hidden_size=12, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=5,
                kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=4,
                n_shared_experts=2, n_group=4, topk_group=2, topk_method="group_limited_greedy",
                routed_scaling_factor=2.5, intermediate_size=10, first_k_dense_replace=0,
                rope_parameters=dict(V2_YARN), max_position_embeddings=2560,
                attn_implementation="eager")
    return DeepseekV2Config(**{**base, **over})


def _np(params):
    return {k: v.detach().numpy() for k, v in params.items()}


def tokens(n=10, d=12, seed=3):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3


# -- (a) from_hf ---------------------------------------------------------------------------------


@pytest.mark.parametrize("over", [{}, {"topk_method": "greedy", "n_group": None,
                                       "topk_group": None}, {"norm_topk_prob": True}],
                         ids=["group-limited", "greedy", "norm-topk-prob-ignored"])
def test_deepseek_v2_moe_from_hf_agrees(over):
    block = randomized(DeepseekV2Moe(config(**over)))
    attributes, params = hf.from_hf(block)
    assert attributes["renormalize"] is False and attributes["scoring"] == "softmax"
    assert attributes.get("group_score", "max") == "max"
    x = tokens()
    want, _ = moe(x.numpy(), params=_np(params), **attributes)
    got = hf.forward(block, x).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_group_limited_greedy_is_group_score_max_not_sum_top2():
    """The best group of 4, top 2: on some tokens the two group scorings choose differently,
    and the module agrees with 'max' there."""
    block = randomized(DeepseekV2Moe(config(topk_group=1, num_experts_per_tok=2)))
    attributes, params = hf.from_hf(block)
    x = tokens(n=64)
    got = hf.forward(block, x).numpy()
    want, _ = moe(x.numpy(), params=_np(params), **attributes)
    other, _ = moe(x.numpy(), params=_np(params), **{**attributes, "group_score": "sum_top2"})
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert not np.allclose(got, other, rtol=1e-3, atol=1e-3)


def test_the_router_computes_in_float32_for_a_float64_block():
    """transformers 5.24: F.linear(hidden.float(), weight.float()) and a float32 softmax."""
    block = randomized(DeepseekV2Moe(config()))
    logits, weights, _ = block.gate(tokens())
    assert logits.dtype == torch.float32 and weights.dtype == torch.float32


@pytest.mark.parametrize("over", [{}, {"q_lora_rank": None},
                                  {"rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 100.0}}],
                         ids=["q-latent-yarn", "q-direct-yarn", "plain-rope"])
def test_deepseek_v2_attention_from_hf_agrees(over):
    m = randomized(DeepseekV2Attention(config(**over), layer_idx=0))
    attributes, params = hf.from_hf(m)
    assert attributes["rope_convention"] == "interleaved"
    assert ("w_q" in params) == ("q_lora_rank" in over)
    x = x_of(2, 5, 12)
    mask = torch.tensor([True, True, False, True, True])[None, None, None, :]
    for offset in (0, 3):
        want = mla(x.numpy(), mask.numpy(), params=_np(params), offset=offset, **attributes)
        got = hf.forward(m, x, mask, offset=offset).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dense", [False, True], ids=["moe", "dense"])
def test_deepseek_v2_decoder_layer_from_hf_agrees(dense):
    c = config(q_lora_rank=None, first_k_dense_replace=1 if dense else 0)
    layer = randomized(DeepseekV2DecoderLayer(c, layer_idx=0))
    assert isinstance(layer.mlp, DeepseekV2Moe) != dense
    attributes, params = hf.from_hf(layer)
    x = x_of(2, 4, 12) * 3
    want = deepseek_layer(x.numpy(), params=_np(params), **attributes)
    got = hf.forward(layer, x).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- (b) to_hf: the vectors ------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["DeepseekV2Moe", "DeepseekV2Attention",
                                   "DeepseekV2DecoderLayer"])
def test_vectors_agree_through_to_hf(model):
    extras.agree_hf_deepseek_v2("cpu", model)(default_spec())


def test_a_mapping_bug_is_rejected_by_the_vectors(monkeypatch):
    """groups dropped (topk_method 'greedy' written for group_limited_greedy): moe/v2-001
    rejects it."""
    real = hf_deepseek_v2.moe_to_hf

    def greedy(params, attributes):
        return real(params, {**attributes, "n_group": 1, "topk_group": 1})

    monkeypatch.setattr(hf_deepseek_v2, "moe_to_hf", greedy)
    with pytest.raises(AssertionError):
        extras.agree_hf_deepseek_v2("cpu", "DeepseekV2Moe")(default_spec())


# -- (c) round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [DeepseekV2Moe, DeepseekV2Attention, DeepseekV2DecoderLayer])
def test_to_hf_of_from_hf_is_bit_identical(cls):
    m = randomized(cls(config()) if cls is DeepseekV2Moe else cls(config(), layer_idx=0))
    attributes, params = hf.from_hf(m)
    back = hf.to_hf(params, attributes, model=cls.__name__)
    assert type(back) is cls
    for (name, a), (_, b) in zip(m.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name
    x = tokens() if cls is DeepseekV2Moe else x_of(1, 4, 12)
    assert torch.equal(hf.forward(m, x), hf.forward(back, x))


# -- (d) what the spec cannot hold -----------------------------------------------------------------


@pytest.mark.parametrize(("cls", "over", "field"), [
    (DeepseekV2Attention, {"attention_bias": True}, "attention_bias"),
    (DeepseekV2Attention, {"num_key_value_heads": 1}, "num_key_value_heads"),
    (DeepseekV2Moe, {"hidden_act": "gelu"}, "activation"),
])
def test_inexpressible_config_raises_config_error(cls, over, field):
    m = cls(config(**over)) if cls is DeepseekV2Moe else cls(config(**over), layer_idx=0)
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(m)


@pytest.mark.parametrize(("model", "attributes", "field"), [
    ("DeepseekV2Moe", {"top_k": 2, "renormalize": True}, "renormalize"),
    ("DeepseekV2Moe", {"top_k": 2, "scoring": "sigmoid"}, "scoring"),
    ("DeepseekV2Moe", {"top_k": 2, "n_group": 4, "topk_group": 2}, "group_score"),
    ("DeepseekV2Attention", {"rope_convention": "half"}, "rope_convention"),
])
def test_to_hf_refuses_what_the_module_cannot_hold(model, attributes, field):
    block = randomized(DeepseekV2Moe(config()))
    attn = randomized(DeepseekV2Attention(config(), layer_idx=0))
    a, params = hf.from_hf(block if model == "DeepseekV2Moe" else attn)
    a = {k: v for k, v in a.items() if k not in ("n_group", "topk_group", "group_score")}
    with pytest.raises(ConfigError, match=field):
        hf.to_hf(params, {**a, **attributes}, model=model)


@pytest.mark.parametrize("cls", [DeepseekV2Attention, DeepseekV2DecoderLayer])
def test_a_float64_module_agrees_to_float32_rounding_only(cls):
    """transformers 5.24 computes RMSNorm (hidden_states.to(float32)) and the RoPE
    (freqs_cis complex64, q_pe/k_pe .float()) in float32 even for a float64 module: off the
    float64 spec by float32's rounding, not float64's (so the suite judges at float32)."""
    m = randomized(cls(config(q_lora_rank=None), layer_idx=0))
    attributes, params = hf.from_hf(m)
    x = x_of(2, 5, 12) * 3
    fn = mla if cls is DeepseekV2Attention else deepseek_layer
    want = fn(x.numpy(), params=_np(params), **attributes)
    err = np.abs(hf.forward(m, x).numpy() - want).max()
    assert 1e-12 < err < 1e-4, err
