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
    """The vectors above cover QK-norm, a window, a softcap, a scalar, an offset, a mask and
    rope_scaling (linear, yarn, dynamic)."""
    spec = default_spec()
    seen, rules = set(), set()
    for vid in VALUES:
        a = spec.vector(vid).attributes
        seen |= {k for k in ("qk_norm", "window", "softcap", "query_pre_attn_scalar", "offset",
                             "rope_scaling") if a.get(k)}
        seen |= {"mask"} if "mask" in spec.vector(vid).inputs else set()
        rules |= {a["rope_scaling"]["rope_type"]} if a.get("rope_scaling") else set()
    assert seen == {"qk_norm", "window", "softcap", "query_pre_attn_scalar", "offset", "mask",
                    "rope_scaling"}
    assert rules == {"linear", "yarn", "dynamic"}


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
        "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0,
                              "partial_rotary_factor": 0.5}}),
     "rope_parameters.partial_rotary_factor"),
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


# -- (f) RoPE scaling (issue 25 item 1): Gemma 3's rope_parameters per layer type -----------------

LINEAR8 = {"rope_type": "linear", "factor": 8.0}  # Gemma 3 4B/12B/27B's rope_scaling
SCALED = {  # rope_parameters fields of every rule the spec states (besides rope_theta)
    "linear": LINEAR8,
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                 "short_factor": [1.0, 1.5, 2.0], "long_factor": [1.0, 4.0, 16.0]},
}


def gemma3_scaled(rule, kind="full_attention", **config):
    """A Gemma 3 layer of type ``kind`` whose own type's rope_parameters carry ``rule``
    (head_dim 6: three frequency pairs), the other type unscaled; max_position_embeddings 8
    (dynamic's L0; longrope's numerator)."""
    plain = {"full_attention": 1000.0, "sliding_attention": 100.0}
    rope = {k: {"rope_type": "default", "rope_theta": b} for k, b in plain.items()}
    rope[kind] = {**SCALED[rule], "rope_theta": plain[kind]}
    return gemma3(kind, rope_parameters=rope, max_position_embeddings=8, **config)


@pytest.mark.parametrize("kind", ["full_attention", "sliding_attention"])
@pytest.mark.parametrize("rule", sorted(SCALED))
def test_from_hf_of_a_scaled_gemma3_layer_agrees_with_the_spec_layer(rule, kind):
    """Every rule on either layer type: the layer applies the scaling it is given (the spec's
    rule for one layer), at positions 20..26, past every rule's L0."""
    m = gemma3_scaled(rule, kind)
    attributes, params = hf.from_hf(m)
    assert attributes["rope_scaling"]["rope_type"] == rule
    x = x_of(2, 7, 16)
    got = hf.forward(m, x, offset=20).numpy()
    want = gemma_layer(x.numpy(), offset=20, params={k: v.numpy() for k, v in params.items()},
                       **attributes)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    unscaled = {k: v for k, v in attributes.items() if k != "rope_scaling"}
    off = gemma_layer(x.numpy(), offset=20, params={k: v.numpy() for k, v in params.items()},
                      **unscaled)
    assert np.abs(off - got).max() > 1e-3, "the scaling must matter at these positions"


def test_from_hf_reads_gemma3s_linear_factor_8():
    a, _ = hf.from_hf(gemma3_scaled("linear"))
    assert a["rope_scaling"] == LINEAR8 and a["rope_base"] == 1000.0 and a["window"] is None
    a, _ = hf.from_hf(gemma3("full_attention"))
    assert "rope_scaling" not in a  # unscaled: as before


@pytest.mark.parametrize("kind", ["full_attention", "sliding_attention"])
@pytest.mark.parametrize("rule", sorted(SCALED))
def test_round_trip_of_a_scaled_layer_is_bit_identical(rule, kind):
    m = gemma3_scaled(rule, kind)
    attributes, params = hf.from_hf(m)
    back = hf.to_hf(params, attributes)
    assert type(back) is type(m)
    assert back.self_attn.config.rope_parameters[kind]["rope_type"] == rule
    other = "sliding_attention" if kind == "full_attention" else "full_attention"
    assert back.self_attn.config.rope_parameters[other]["rope_type"] == "default"
    assert hf.from_hf(back)[0] == attributes
    x = x_of(1, 5, 16)
    assert torch.equal(hf.forward(m, x, offset=20), hf.forward(back, x, offset=20))


def test_to_hf_of_gemma2_layer_with_scaling():
    """Gemma 2's single rope_parameters dict takes the scaling too (no qk_norm)."""
    a, p = hf.from_hf(gemma2())
    a["rope_scaling"] = dict(LINEAR8)
    m = hf.to_hf(p, a)
    assert isinstance(m, modeling_gemma2.Gemma2DecoderLayer)
    assert m.self_attn.config.rope_parameters["rope_type"] == "linear"
    x = x_of(2, 6, 16)
    want = gemma_layer(x.numpy(), offset=9, params={k: v.numpy() for k, v in p.items()}, **a)
    np.testing.assert_allclose(hf.forward(m, x, offset=9).numpy(), want, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("scaling, mention", [
    ({"rope_type": "proportional", "factor": 2.0}, "proportional"),
    ({"rope_type": "linear", "factor": 8.0, "beta_fast": 32.0}, "beta_fast"),
])
def test_to_hf_refuses_a_scaling_the_config_cannot_hold(scaling, mention):
    a, p = hf.from_hf(gemma3())
    with pytest.raises(ConfigError, match=mention):
        hf.to_hf(p, {**a, "rope_scaling": scaling})


def test_gemma3_config_puts_legacy_rope_scaling_on_the_global_layers_only():
    """transformers 5: Gemma3TextConfig(rope_scaling=...) updates rope_parameters
    ["full_attention"] only; the sliding layers keep rope_local_base_freq unscaled: the rule
    gemma_decoder_only states (scaling on the global layers only)."""
    c = Gemma3TextConfig(rope_scaling=dict(LINEAR8))
    assert c.rope_parameters["full_attention"]["rope_type"] == "linear"
    assert c.rope_parameters["full_attention"]["factor"] == 8.0
    assert c.rope_parameters["sliding_attention"] == {"rope_type": "default",
                                                      "rope_theta": 10_000.0}


def _gemma3_model(rule, seed=0):
    """A tiny Gemma3ForCausalLM, N = 2 in Gemma 2's alternation (layer 0 sliding, layer 1
    full), rope_scaling ``rule`` on the full-attention layer, float64, random weights."""
    from transformers import Gemma3ForCausalLM

    rope = {"full_attention": {**SCALED[rule], "rope_theta": 1000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
    c = Gemma3TextConfig(**{**_base(layer_types=["sliding_attention", "full_attention"],
                                    rope_parameters=rope, max_position_embeddings=8,
                                    vocab_size=13),
                            "num_hidden_layers": 2})
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(c).to(DT).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("rule", ["linear", "yarn", "dynamic"])
def test_gemma3_model_scales_only_its_global_layers_as_the_spec_model(rule):
    """transformers' Gemma3ForCausalLM against gemma_decoder_only(rope_scaling) with the
    layers' parameters read by from_hf: equal logits, so the spec's rule (scaling on the odd,
    global layers only; rope_local_base unscaled on the even ones) is transformers'."""
    from attnspec.backends.numpy.models import gemma_decoder_only

    model = _gemma3_model(rule)
    layers = [hf.from_hf(layer) for layer in model.model.layers]
    a0, a1 = layers[0][0], layers[1][0]
    assert "rope_scaling" not in a0 and a1["rope_scaling"]["rope_type"] == rule
    params = {"embed.table": model.model.embed_tokens.weight.detach().numpy(),
              "norm.gamma": model.model.norm.weight.detach().numpy()}
    for i, (_, p) in enumerate(layers):
        params.update({f"layers.{i}.{k}": v.numpy() for k, v in p.items()})
    ids = np.array([[1, 5, 7, 2, 9, 11, 3, 4, 6, 12], [2, 2, 8, 10, 1, 3, 5, 7, 9, 11]])
    with torch.no_grad():
        got = model(torch.from_numpy(ids)).logits.numpy()
    kw = {k: a1[k] for k in ("num_heads", "num_kv_heads", "eps", "query_pre_attn_scalar",
                             "softcap", "qk_norm", "rope_scaling")}
    want = gemma_decoder_only(ids, pad_id=0, num_layers=2, window=a0["window"],
                              rope_base=a1["rope_base"], rope_local_base=a0["rope_base"],
                              params=params, **kw)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    unscaled = gemma_decoder_only(ids, pad_id=0, num_layers=2, window=a0["window"],
                                  rope_base=a1["rope_base"], rope_local_base=a0["rope_base"],
                                  params=params, **{**kw, "rope_scaling": None})
    assert np.abs(unscaled - got).max() > 1e-3, "the scaling must matter in this model"


# -- (g) gemma_decoder_only <-> Gemma2ForCausalLM / Gemma3ForCausalLM ---------------------------

MODEL_VALUES = sorted(v.id for v in default_spec().vectors
                      if v.function == "gemma_decoder_only" and v.expect == "value"
                      and not v.deprecated)
# Those a transformers Gemma model can hold (no empty query row; per-type RoPE needs Gemma 3).
EXPRESSIBLE = [vid for vid in MODEL_VALUES if hf_gemma.expressible(default_spec().vector(vid))]


def _model_through_hf(v, params=None):
    cls, a = hf_gemma.expressible(v)
    a = dict(a)
    pad_id = a.pop("pad_id")
    module = hf.to_hf(_tensors(params or v.params), a)
    assert type(module).__name__ == cls
    return module, hf.forward(module, torch.from_numpy(np.array(v.inputs["ids"])),
                              pad_id=pad_id).numpy()


def _close_logits(got, v):
    tol = v.tolerances["float32"]
    np.testing.assert_allclose(got, v.outputs["logits"], rtol=tol["rtol"], atol=tol["atol"],
                               err_msg=v.id)


def test_most_model_vectors_are_expressible():
    assert len(EXPRESSIBLE) >= len(MODEL_VALUES) - 4, sorted(set(MODEL_VALUES) - set(EXPRESSIBLE))


@pytest.mark.parametrize("vid", EXPRESSIBLE)
def test_gemma_model_vector_passes_through_transformers(vid):
    _close_logits(_model_through_hf(default_spec().vector(vid))[1], default_spec().vector(vid))


def test_the_scaled_model_vectors_are_judged_by_gemma3_for_causal_lm():
    spec = default_spec()
    for vid in ("gemma/model-linear-001", "gemma/model-dynamic-001",
                "gemma/model-local-base-002"):
        assert hf_gemma.expressible(spec.vector(vid))[0] == "Gemma3ForCausalLM", vid
    # Gemma 2's one rope_parameters cannot scale the global layers only
    assert hf_gemma.expressible(spec.vector("gemma/model-scaling-defaults-001")) is None


def test_scaling_put_on_every_layer_type_fails_the_model_vector(monkeypatch):
    """A converter that writes Gemma 3's rope_scaling into both layer types' rope_parameters
    (transformers' legacy rope_scaling goes to full_attention only)."""
    v = default_spec().vector("gemma/model-linear-001")
    real = hf_gemma.Gemma3TextConfig

    def both(**kw):
        rope = kw["rope_parameters"]
        scaled = {k: v for k, v in rope["full_attention"].items() if k != "rope_theta"}
        rope["sliding_attention"] = {**rope["sliding_attention"], **scaled}
        return real(**kw)
    monkeypatch.setattr(hf_gemma, "Gemma3TextConfig", both)
    with pytest.raises(AssertionError):
        _close_logits(_model_through_hf(v)[1], v)


@pytest.mark.parametrize("rule", ["linear", "yarn", "dynamic"])
def test_model_round_trip_is_bit_identical(rule):
    m = _gemma3_model(rule)
    attributes, params = hf.from_hf(m)
    assert attributes["rope_scaling"]["rope_type"] == rule
    assert (attributes["rope_local_base"], attributes["rope_base"]) == (100.0, 1000.0)
    back = hf.to_hf(params, attributes)
    assert type(back) is type(m)
    for k, w in m.state_dict().items():
        assert torch.equal(w, back.state_dict()[k]), k
    ids = torch.tensor([[1, 5, 7, 2, 9, 11, 3, 0], [2, 2, 8, 10, 1, 3, 5, 7]])
    assert torch.equal(hf.forward(m, ids, pad_id=0), hf.forward(back, ids, pad_id=0))


def test_model_from_hf_refuses_what_gemma_decoder_only_cannot_hold():
    from transformers import Gemma3ForCausalLM

    base = {**_base(vocab_size=13), "num_hidden_layers": 2}
    c = Gemma3TextConfig(**{**base, "layer_types": ["full_attention", "sliding_attention"]})
    with pytest.raises(ConfigError, match="layer_types"):  # no (i + 1) % p rule gives it
        hf.from_hf(Gemma3ForCausalLM(c))
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "sliding_attention": {**LINEAR8, "rope_theta": 100.0}}
    c = Gemma3TextConfig(**{**base, "layer_types": ["sliding_attention", "full_attention"],
                            "rope_parameters": rope})
    with pytest.raises(ConfigError, match="sliding_attention"):
        hf.from_hf(Gemma3ForCausalLM(c))


def test_gemma3_five_to_one_pattern_with_factor_8_is_the_spec_model():
    """Gemma 3 4B/12B/27B's structure in miniature: the default layer_types (five sliding
    layers, then a full one: sliding_window_pattern 6), rope_scaling linear 8 on the full
    layer, N = 6; from_hf reads sliding_window_pattern = 6, and gemma_decoder_only gives
    transformers' logits; to_hf rebuilds the same model."""
    from attnspec.backends.numpy.models import gemma_decoder_only
    from transformers import Gemma3ForCausalLM

    c = Gemma3TextConfig(**{**_base(vocab_size=13), "num_hidden_layers": 6,
                            "rope_scaling": dict(LINEAR8)})
    assert c.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    torch.manual_seed(1)
    model = Gemma3ForCausalLM(c).to(DT).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(0.3 * torch.randn_like(p))
    a, params = hf.from_hf(model)
    assert a["sliding_window_pattern"] == 6 and a["rope_scaling"] == LINEAR8
    assert (a["rope_base"], a["rope_local_base"], a["window"]) == (1_000_000.0, 10_000.0, 3)
    ids = torch.tensor([[1, 5, 7, 2, 9, 11, 3, 4], [2, 2, 8, 10, 1, 3, 5, 7]])
    got = hf.forward(model, ids, pad_id=0).numpy()
    pad_id = a.pop("pad_id")
    want = gemma_decoder_only(ids.numpy(), pad_id=pad_id,
                              params={k: v.numpy() for k, v in params.items()}, **a)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    back = hf.to_hf(params, a)
    assert back.config.layer_types == c.layer_types
    assert torch.equal(hf.forward(back, ids, pad_id=0), hf.forward(model, ids, pad_id=0))


def test_gemma2_model_refuses_scaling_on_the_global_layers_only():
    v = default_spec().vector("gemma/model-scaling-defaults-001")
    a = {k: x for k, x in v.attributes.items() if k != "pad_id"}
    with pytest.raises(ConfigError, match="Gemma2Config has one rope_parameters"):
        hf.to_hf(_tensors(v.params), a)


def test_the_suite_extras_judge_gemma3_for_causal_lm(monkeypatch):
    from attnspec.backends.torch import extras

    extras.agree_hf_gemma("cpu", "Gemma3ForCausalLM")(default_spec())
    monkeypatch.setattr(hf_gemma.hf_rope, "to_hf",
                        lambda who, a, *args, **kw: ({"rope_type": "default",
                                                      "rope_theta": float(a["rope_base"])}, {}))
    with pytest.raises(AssertionError):  # a converter that drops rope_scaling
        extras.agree_hf_gemma("cpu", "Gemma3ForCausalLM")(default_spec())
