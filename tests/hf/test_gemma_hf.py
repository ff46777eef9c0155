"""Gemma2DecoderLayer and Gemma3DecoderLayer (text) against gemma_layer through
backends/torch/hf_gemma.py: tiny local configs with random weights (no download), judged by
the golden vectors, and the convention differences of spec/components/huggingface.md (Gemma 2
and 3) asserted against the installed transformers.

transformers computes Gemma's RMSNorm in float32 (``x.float()``, ``1.0 + weight.float()``) and
its RoPE cos/sin from a float32 inv_freq even in a float64 module, so a float64 layer agrees
with the spec at float32's tolerance (the vector's), not float64's."""

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.numpy.layers import gemma_layer
from attnspec.backends.torch import hf, hf_gemma
from attnspec.spec.errors import ConfigError, ParameterError
from attnspec.spec.vectors import default_spec
from transformers import Gemma2Config, Gemma3TextConfig
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer

from .small import DT, torch, x_of

VALUES = sorted(v.id for v in default_spec().vectors
                if v.function == "gemma_layer" and v.expect == "value" and not v.deprecated)


def _tensors(params):
    return {k: torch.from_numpy(np.array(a)) for k, a in params.items()}


def _through_hf(v):
    a = dict(v.attributes)
    module = hf.to_hf(_tensors(v.params), a)
    mask = v.inputs.get("mask")
    y = hf.forward(module, torch.from_numpy(np.array(v.inputs["x"])),
                   None if mask is None else torch.from_numpy(np.array(mask)),
                   offset=a.get("offset", 0))
    return module, y.numpy()


def _close(got, v):
    tol = v.tolerances["float32"]
    np.testing.assert_allclose(got, v.outputs["y"], rtol=tol["rtol"], atol=tol["atol"],
                               err_msg=v.id)


# -- (a) the golden vectors through to_hf and transformers' forward --------------------------------

@pytest.mark.parametrize("vid", VALUES)
def test_gemma_vector_passes_through_transformers(vid):
    v = default_spec().vector(vid)
    module, y = _through_hf(v)
    want = hf_gemma.Gemma3DecoderLayer if v.attributes.get("qk_norm") else \
        hf_gemma.Gemma2DecoderLayer
    assert type(module) is want
    _close(y, v)


def test_every_gemma_attribute_is_exercised_through_transformers():
    """The vectors above cover QK-norm, a window, a softcap, a scalar, an offset and a mask."""
    spec = default_spec()
    seen = set()
    for vid in VALUES:
        a = spec.vector(vid).attributes
        seen |= {k for k in ("qk_norm", "window", "softcap", "query_pre_attn_scalar", "offset")
                 if a.get(k)}
        seen |= {"mask"} if "mask" in spec.vector(vid).inputs else set()
    assert seen == {"qk_norm", "window", "softcap", "query_pre_attn_scalar", "offset", "mask"}


# -- (b) random transformers layers -> from_hf -> the spec's gemma_layer -----------------------------

def _randomized(module, seed=0):
    """float64, eval, every weight N(0, 0.3^2), every norm w N(0, 0.3^2) (Gemma's 1 + w)."""
    torch.manual_seed(seed)
    module = module.to(DT).eval()
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return module


def _base(**config):
    """GQA (H = 4, H_kv = 2), head_dim 6 != D / H = 4, a scalar 12 != head_dim."""
    return dict(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                num_key_value_heads=2, head_dim=6, rms_norm_eps=1e-5, num_hidden_layers=1,
                query_pre_attn_scalar=12, sliding_window=3, attn_implementation="eager",
                **config)


def gemma2(kind="full_attention", **config):
    c = Gemma2Config(**_base(layer_types=[kind], attn_logit_softcapping=2.0,
                             rope_parameters={"rope_type": "default", "rope_theta": 100.0},
                             **config))
    return _randomized(modeling_gemma2.Gemma2DecoderLayer(c, layer_idx=0))


def gemma3(kind="sliding_attention", **config):
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
    c = Gemma3TextConfig(**_base(layer_types=[kind], **{"rope_parameters": rope, **config}))
    return _randomized(Gemma3DecoderLayer(c, layer_idx=0))


LAYERS = {"gemma2-full": lambda: gemma2(), "gemma2-sliding": lambda: gemma2("sliding_attention"),
          "gemma3-sliding": lambda: gemma3(), "gemma3-full": lambda: gemma3("full_attention")}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_from_hf_agrees_with_the_spec_layer(name):
    m = LAYERS[name]()
    attributes, params = hf.from_hf(m)
    x = x_of(2, 7, 16)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    got = hf.forward(m, x, mask, offset=2).numpy()
    want = gemma_layer(x.numpy(), mask.numpy(), offset=2,
                       params={k: v.numpy() for k, v in params.items()}, **attributes)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


def test_from_hf_reads_each_field():
    a, p = hf.from_hf(gemma3())
    assert a == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5, "rope_base": 100.0,
                 "window": 3, "query_pre_attn_scalar": 12.0, "softcap": None, "qk_norm": True}
    assert p["attn.q_norm.gamma"].shape == (6,) and p["attn.w_q"].shape == (16, 24)
    a, _ = hf.from_hf(gemma2())
    assert (a["window"], a["softcap"], a["qk_norm"], a["rope_base"]) == (None, 2.0, False, 100.0)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_round_trip_is_bit_identical(name):
    m = LAYERS[name]()
    attributes, params = hf.from_hf(m)
    back = hf.to_hf(params, attributes)
    assert type(back) is type(m)
    for k, w in m.state_dict().items():
        assert torch.equal(w, back.state_dict()[k]), k
    x = x_of(1, 5, 16)
    assert torch.equal(hf.forward(m, x), hf.forward(back, x))


# -- (c) planted converter bugs fail the vectors -----------------------------------------------------

def _swap(a, b):
    return [(n.replace(a, "@").replace(b, a).replace("@", b), s, t) for n, s, t in hf_gemma.GEMMA]


@pytest.mark.parametrize("table", [
    _swap("pre_feedforward_layernorm", "post_feedforward_layernorm"),
    _swap("post_attention_layernorm", "pre_feedforward_layernorm"),  # Llama's meaning of the name
    _swap("gate_proj", "up_proj"),
], ids=["pre-post-ffn", "post-attention-as-pre-ffn", "gate-up"])
def test_a_swapped_mapping_fails_the_vectors(monkeypatch, table):
    monkeypatch.setattr(hf_gemma, "GEMMA", table)
    v = default_spec().vector("gemma/layer-gemma2-001")
    with pytest.raises(AssertionError):
        _close(_through_hf(v)[1], v)


def test_weights_loaded_as_one_plus_w_fail_the_vectors():
    """A converter that stores 1 + w (the gain a plain RMSNorm wants) into Gemma's norms."""
    v = default_spec().vector("gemma/layer-gemma3-001")
    params = {k: (1 + a if k.endswith("norm.gamma") else a) for k, a in v.params.items()}
    module = hf.to_hf(_tensors(params), dict(v.attributes))
    with pytest.raises(AssertionError):
        _close(hf.forward(module, torch.from_numpy(np.array(v.inputs["x"]))).numpy(), v)


# -- (d) what the spec cannot express ----------------------------------------------------------------

@pytest.mark.parametrize("make, field", [
    (lambda: gemma2(attention_bias=True), "attention_bias"),
    (lambda: gemma2(hidden_activation="gelu"), "hidden_activation"),
    (lambda: gemma3(rope_parameters={
        "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0},
        "sliding_attention": {"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}}),
     "rope_parameters"),
])
def test_unsupported_config_raises_config_error_naming_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(make())


@pytest.mark.parametrize("change, error, mention", [
    (lambda p, a: a.update(query_pre_attn_scalar=12.5), ConfigError, "query_pre_attn_scalar"),
    (lambda p, a: a.update(num_kv_heads=3), ConfigError, "num_kv_heads"),
    (lambda p, a: p.pop("post_ffn_norm.gamma"), ParameterError, "post_ffn_norm.gamma"),
    (lambda p, a: a.update(qk_norm=False), ParameterError, "attn.q_norm.gamma"),
])
def test_to_hf_rejects_what_the_config_cannot_hold(change, error, mention):
    a, p = hf.from_hf(gemma3())
    change(p, a)
    with pytest.raises(error, match=mention):
        hf.to_hf(p, a)


# -- (e) the conventions of spec/components/huggingface.md, against the installed release ------------

def test_gemma2_config_defaults():
    c = Gemma2Config()
    assert (c.query_pre_attn_scalar, c.head_dim) == (256, 256)
    assert (c.attn_logit_softcapping, c.final_logit_softcapping) == (50.0, 30.0)
    assert c.hidden_activation == "gelu_pytorch_tanh" and c.sliding_window == 4096
    assert c.rms_norm_eps == 1e-6


def test_gemma3_config_defaults():
    c = Gemma3TextConfig()
    assert c.attn_logit_softcapping is None and c.final_logit_softcapping is None
    assert c.rope_parameters["full_attention"]["rope_theta"] == 1_000_000.0
    assert c.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert c.query_pre_attn_scalar == 256 and c.hidden_activation == "gelu_pytorch_tanh"


def test_query_pre_attn_scalar_is_an_int_field():
    with pytest.raises(Exception, match="query_pre_attn_scalar"):
        Gemma2Config(query_pre_attn_scalar=12.5)


def test_gemma_rmsnorm_starts_at_zero_and_computes_in_float32():
    norm = modeling_gemma2.Gemma2RMSNorm(4, eps=1e-6)
    assert torch.equal(norm.weight, torch.zeros(4))
    x = torch.tensor([[1.0, 1e-8, 3.0, -2.0]], dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4]))
        got = norm.to(torch.float64)(x)
    exact = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * (1 + norm.weight)
    x32 = x.float()
    in_f32 = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
              * (1.0 + norm.weight.float())).double()
    assert got.dtype == torch.float64
    assert torch.equal(got, in_f32) and not torch.equal(got, exact)
