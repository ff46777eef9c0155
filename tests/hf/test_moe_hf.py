"""backends/torch/hf_moe.py: transformers' MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock to
and from the spec's moe (tiny local configs, random weights, no download).

(a) from_hf: the block's forward equals the NumPy backend's moe on the converted parameters,
    in float64 within float32 rounding (transformers' router softmax is float32) and at float32
    within the float32 tolerance;
(b) to_hf: every expressible moe vector through the block (the suite's transformers extras),
    and a planted mapping bug (gate and up halves swapped) fails that check;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) what the blocks cannot hold raises the spec's errors.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnspec.backends.numpy.moe import moe  # noqa: E402
from attnspec.backends.torch import extras, hf, hf_moe  # noqa: E402
from attnspec.spec.errors import ConfigError, ParameterError  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402
from transformers import DeepseekV3Config, MixtralConfig, Qwen2MoeConfig  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock  # noqa: E402
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock  # noqa: E402

from .small import randomized  # noqa: E402


def mixtral(**config):
    c = MixtralConfig(hidden_size=8, intermediate_size=6, num_local_experts=4,
                      num_experts_per_tok=2, **config)
    return randomized(MixtralSparseMoeBlock(c))


def qwen(norm_topk_prob=False, **config):
    c = Qwen2MoeConfig(hidden_size=8, moe_intermediate_size=4, shared_expert_intermediate_size=6,
                       num_experts=6, num_experts_per_tok=2, norm_topk_prob=norm_topk_prob,
                       **config)
    return randomized(Qwen2MoeSparseMoeBlock(c))


def deepseek(**config):
    c = DeepseekV3Config(**{"hidden_size": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
                            "moe_intermediate_size": 4, "n_shared_experts": 2, "n_group": 4,
                            "topk_group": 2, "norm_topk_prob": True,
                            "routed_scaling_factor": 2.5, **config})
    m = randomized(DeepseekV3MoE(c))
    with torch.no_grad():
        m.gate.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, 8)[torch.randperm(8)])
    return m


BLOCKS = {"Mixtral": mixtral, "Qwen2-MoE": qwen,
          "Qwen2-MoE-normed": lambda: qwen(norm_topk_prob=True), "DeepSeek-V3": deepseek,
          "DeepSeek-V3-unnormed": lambda: deepseek(norm_topk_prob=False, n_group=1,
                                                   topk_group=1, routed_scaling_factor=1.0)}


def _x(n, d, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)


def _spec_y(module, x):
    attributes, params = hf.from_hf(module)
    y, _ = moe(x.numpy(), params={k: v.numpy() for k, v in params.items()}, **attributes)
    return attributes, y


# -- (a) from_hf -------------------------------------------------------------------------------


@pytest.mark.parametrize("make", BLOCKS.values(), ids=BLOCKS)
def test_moe_block_from_hf_agrees_in_float64_within_float32_routing(make):
    """At float64 transformers still rounds the routing weights to float32 (its softmax runs
    in float32): the outputs agree to ~1e-7 relative, not to float64's 1e-15."""
    m = make()
    x = _x(7, 8)
    attributes, want = _spec_y(m, x)
    got = hf.forward(m, x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert attributes["renormalize"] == (True if make is mixtral else m.gate.norm_topk_prob)


def test_transformers_routes_in_float32_even_in_float64():
    """The documented difference (spec/components/huggingface.md), asserted against the
    installed release: float64 in, routing weights with float32's precision out."""
    m = mixtral()
    x = _x(16, 8)
    logits = x @ m.gate.weight.T
    _, scores, _ = m.gate(x)
    assert scores.dtype == torch.float32
    exact = torch.softmax(logits, -1).topk(2, -1).values
    exact = exact / exact.sum(-1, keepdim=True)
    err = (scores.double() - exact).abs().max().item()
    assert 1e-12 < err < 1e-6, err


@pytest.mark.parametrize("make", BLOCKS.values(), ids=BLOCKS)
def test_moe_block_from_hf_agrees_in_float32(make):
    m = make().to(torch.float32)
    x = _x(7, 8, torch.float32)
    _, want = _spec_y(m, x)
    np.testing.assert_allclose(hf.forward(m, x).numpy(), want, rtol=2e-5, atol=2e-6)


# -- (b) the vectors through to_hf ---------------------------------------------------------------


def _check(name):
    return dict(extras.hf_checks("cpu"))[name]


NAMES = ["agree/transformers.MixtralSparseMoeBlock", "agree/transformers.Qwen2MoeSparseMoeBlock",
         "agree/transformers.DeepseekV3MoE"]


@pytest.mark.parametrize("name", NAMES)
def test_moe_vectors_pass_through_to_hf(name):
    _check(name)(default_spec())


@pytest.mark.parametrize("name", NAMES)
def test_gate_and_up_swapped_in_to_hf_fails_the_moe_check(monkeypatch, name):
    real = hf_moe.moe_to_hf

    def swapped(params, attributes):
        p = dict(params)
        p["experts.w_gate"], p["experts.w_up"] = p["experts.w_up"], p["experts.w_gate"]
        return real(p, attributes)

    monkeypatch.setattr(hf, "moe_to_hf", swapped)
    with pytest.raises(AssertionError, match="moe/"):
        _check(name)(default_spec())


def test_a_qwen_block_without_its_shared_gate_fails_the_check(monkeypatch):
    """The shared expert's sigmoid gate forced to 1 (its weight +inf-like): the check fails."""
    real = hf_moe.moe_to_hf

    def ungated(params, attributes):
        block = real(params, attributes)
        block.shared_expert_gate.forward = lambda h: torch.full_like(h[..., :1], 50.0)
        return block

    monkeypatch.setattr(hf, "moe_to_hf", ungated)
    with pytest.raises(AssertionError, match="moe/"):
        _check("agree/transformers.Qwen2MoeSparseMoeBlock")(default_spec())


# -- (c) round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", BLOCKS.values(), ids=BLOCKS)
def test_moe_round_trip_is_bit_identical(make):
    m = make()
    back = hf.to_hf(*reversed(hf.from_hf(m)))
    assert type(back) is type(m)
    a, b = m.state_dict(), back.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    x = _x(5, 8)
    assert torch.equal(hf.forward(m, x), hf.forward(back, x))
    assert hf.from_hf(back)[0] == hf.from_hf(m)[0]


# -- (d) what the blocks cannot hold -------------------------------------------------------------


def test_moe_from_hf_refuses_a_non_silu_expert():
    with pytest.raises(ConfigError, match="hidden_act"):
        hf.from_hf(mixtral(hidden_act="gelu"))


def _params(**extra):
    _, p = hf.from_hf(mixtral())
    return {**p, **extra}


@pytest.mark.parametrize("attributes, error, mention", [
    ({"top_k": 2, "renormalize": False}, ConfigError, "renormalize"),
    # sigmoid scoring is DeepSeek-V3's router, whose block always has shared experts
    ({"top_k": 2, "renormalize": True, "scoring": "sigmoid"}, ParameterError,
     "DeepseekV3MoE always has shared experts"),
    ({"top_k": 2, "renormalize": True, "n_group": 2}, ConfigError, "n_group"),
    ({"top_k": 2, "renormalize": True, "routed_scaling_factor": 2.5}, ConfigError,
     "routed_scaling_factor"),
])
def test_moe_to_hf_refuses_what_mixtral_cannot_hold(attributes, error, mention):
    with pytest.raises(error, match=mention):
        hf.to_hf(_params(), attributes)


def test_moe_to_hf_refuses_what_deepseek_cannot_hold():
    """A correction bias or sigmoid scoring means DeepSeek-V3, which always has ungated shared
    experts n_shared_experts * F wide."""
    with pytest.raises(ParameterError, match="shared.w_gate"):
        hf.to_hf(_params(**{"router.correction_bias": torch.zeros(4, dtype=torch.float64)}),
                 {"top_k": 2, "renormalize": True})
    shared = {f"shared.{n}": torch.zeros(s, dtype=torch.float64)
              for n, s in (("w_gate", (8, 3)), ("w_up", (8, 3)), ("w_down", (3, 8)))}
    with pytest.raises(ParameterError, match="multiple"):
        hf.to_hf(_params(**shared), {"top_k": 2, "scoring": "sigmoid"})
    _, p = hf.from_hf(deepseek())
    with pytest.raises(ConfigError, match="eps"):
        hf.to_hf(p, {"top_k": 2, "scoring": "sigmoid", "renormalize": True, "eps": 1e-6})


def test_deepseek_v3_excludes_the_other_groups_with_minus_inf():
    """transformers 5.24's DeepseekV3TopkRouter masks the groups not kept with -inf (as vLLM
    and this spec), not with 0.0 as earlier releases and DeepSeek's reference code did: with
    every biased score negative, no expert of a dropped group is chosen."""
    m = deepseek(n_group=4, topk_group=1, num_experts_per_tok=2)
    with torch.no_grad():
        m.gate.e_score_correction_bias.fill_(-2.0)
    _, _, idx = m.gate(_x(16, 8))
    groups = idx // 2                                               # 4 groups of 2 experts
    assert torch.equal(groups[:, 0], groups[:, 1])


def test_moe_to_hf_names_a_missing_expert_parameter():
    p = _params()
    del p["experts.w_up"]
    with pytest.raises(ParameterError, match="experts.w_up"):
        hf.to_hf(p, {"top_k": 2, "renormalize": True})


# -- the load-balancing loss: transformers' load_balancing_loss_func ------------------------------


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "attention-mask"])
def test_moe_aux_loss_is_transformers_load_balancing_loss(masked):
    """The installed release's function on the same logits (a tuple of L (B T, E) layers, an
    attention mask (B, T)) equals moe_aux_loss on the stacked (L, N, E) logits and the mask
    flattened; transformers accumulates in float32 whatever the dtype (rtol 1e-6)."""
    from attnspec.backends.numpy.moe import moe_aux_loss
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    g = torch.Generator().manual_seed(3)
    layers = tuple(torch.randn(2 * 5, 6, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    attention_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]) if masked else None
    got = load_balancing_loss_func(layers, num_experts=6, top_k=2, attention_mask=attention_mask)
    assert got.dtype == torch.float32
    mask = None if attention_mask is None else attention_mask.reshape(-1).numpy().astype(bool)
    want = moe_aux_loss(torch.stack(layers).numpy(), mask, top_k=2)
    np.testing.assert_allclose(got.item(), want, rtol=1e-6)
    if masked:  # the mask matters on these logits
        assert abs(moe_aux_loss(torch.stack(layers).numpy(), None, top_k=2) - want) > 1e-3


def test_transformers_stores_the_experts_as_gate_up_and_down_tensors():
    m = mixtral()
    assert tuple(m.experts.gate_up_proj.shape) == (4, 12, 8)   # (E, 2F, D), gate rows first
    assert tuple(m.experts.down_proj.shape) == (4, 8, 6)       # (E, D, F)
    x = _x(3, 8)
    gate, up = (x @ m.experts.gate_up_proj[1].T).chunk(2, dim=-1)
    want = (torch.nn.functional.silu(gate) * up) @ m.experts.down_proj[1].T
    _, p = hf.from_hf(m)
    got = ((torch.nn.functional.silu(x @ p["experts.w_gate"][1]) * (x @ p["experts.w_up"][1]))
           @ p["experts.w_down"][1])
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
