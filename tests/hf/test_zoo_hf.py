"""backends/torch/hf_zoo.py: Mistral, Qwen2, Phi-3 (llama_layer) and GPT-NeoX, Falcon
(parallel_layer) layers of transformers, built from tiny local configs with random weights.

(a) the golden vectors through to_hf: every expressible llama_layer / parallel_layer value
    vector, judged at the vector's float32 tolerance (transformers computes the RoPE angles
    in float32 for every model, and the eager softmax in float32 for all but Falcon);
(b) from_hf: a random float64 layer's forward equals the NumPy backend's spec function on
    the converted parameters within float32 rounding;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) a config the spec cannot express raises ConfigError naming the field;
(e) planted converter bugs (GPT-NeoX's fused qkv read as [q|k|v] blocks, Phi-3's
    gate_up_proj halves swapped) fail (a) or (b).
"""

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch
from attnspec.backends.numpy.layers import llama_layer, parallel_layer
from attnspec.backends.torch import hf, hf_zoo
from attnspec.spec.errors import ConfigError
from attnspec.spec.vectors import default_spec
from transformers import (
    FalconConfig,
    GPTNeoXConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
)
from transformers.models.falcon.modeling_falcon import FalconDecoderLayer
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from .small import randomized, x_of

ROPE = {"rope_type": "default", "rope_theta": 100.0}
LLAMA_LIKE = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, attn_implementation="eager",
                  num_hidden_layers=1, rope_parameters=ROPE)


def mistral(**c):
    return randomized(MistralDecoderLayer(MistralConfig(**{**LLAMA_LIKE, "sliding_window": 3,
                                                           **c}), 0))


def qwen2(**c):
    base = {**LLAMA_LIKE, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 0,
            "layer_types": ["sliding_attention"]}
    return randomized(Qwen2DecoderLayer(Qwen2Config(**{**base, **c}), 0))


def phi3(**c):
    return randomized(Phi3DecoderLayer(Phi3Config(**{**LLAMA_LIKE, **c}), 0))


def neox(**c):
    base = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4, hidden_act="gelu",
                attn_implementation="eager", num_hidden_layers=1,
                rope_parameters={**ROPE, "partial_rotary_factor": 1.0})
    return randomized(GPTNeoXLayer(GPTNeoXConfig(**{**base, **c}), 0))


def falcon(**c):
    base = dict(hidden_size=16, num_attention_heads=4, ffn_hidden_size=24, bias=True, alibi=False,
                parallel_attn=True, attn_implementation="eager", num_hidden_layers=1,
                rope_parameters=ROPE)
    return randomized(FalconDecoderLayer(FalconConfig(**{**base, **c}), 0))


FALCONS = {
    "new-architecture": dict(new_decoder_architecture=True, num_kv_heads=2),
    "new-architecture-one-norm": dict(new_decoder_architecture=True, num_kv_heads=2,
                                      num_ln_in_parallel_attn=1),
    "multi-query": dict(new_decoder_architecture=False, multi_query=True, bias=False),
    "multi-head": dict(new_decoder_architecture=False, multi_query=False),
}
MODULES = {"Mistral": mistral, "Qwen2": qwen2, "Phi3": phi3, "GPTNeoX": neox,
           # a partial rotary (transformers' GPTNeoXConfig defaults to 0.25): 2 of K = 4
           "GPTNeoX-partial": lambda: neox(rope_parameters={**ROPE, "partial_rotary_factor": 0.5}),
           **{f"Falcon-{k}": (lambda c=c: falcon(**c)) for k, c in FALCONS.items()}}
SPEC_FN = {llama_layer: "llama_layer", parallel_layer: "parallel_layer"}


def _np(params):
    return {k: v.numpy() for k, v in params.items()}


def _spec_y(module, x, mask, offset=0):
    attributes, params = hf.from_hf(module)
    fn = llama_layer if hf_zoo.SPEC_FUNCTION[type(module).__name__] == "llama_layer" \
        else parallel_layer
    return fn(x.numpy(), None if mask is None else mask.numpy(), params=_np(params),
              offset=offset, **attributes)


def _padding(lengths, t):
    return torch.arange(t)[None, None, None, :] < torch.tensor(lengths)[:, None, None, None]


# -- (b) from_hf: the layer's forward equals the spec function -------------------------------


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("offset", [0, 3])
def test_zoo_layer_from_hf_agrees_within_float32_rounding(name, offset):
    """transformers computes the RoPE angles in float32 (and, but for Falcon, the softmax):
    ~1e-7 relative error on float64 tensors, nothing more."""
    m = MODULES[name]()
    x, mask = x_of(2, 6, 16), _padding([6, 4], 6)
    got = hf.forward(m, x, mask, offset=offset).numpy()
    np.testing.assert_allclose(got, _spec_y(m, x, mask, offset), rtol=2e-5, atol=4e-6)


def test_from_hf_attributes_name_each_model_s_convention():
    assert hf.from_hf(qwen2())[0] == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5,
                                      "rope_base": 100.0, "window": 3, "attention_bias": True}
    assert hf.from_hf(mistral())[0]["window"] == 3
    assert "window" not in hf.from_hf(phi3())[0]
    assert hf.from_hf(neox())[0] == {"num_heads": 4, "num_kv_heads": None, "num_norms": 2,
                                     "eps": 1e-5, "activation": "gelu", "rope_base": 100.0}
    layouts = {k: hf.from_hf(falcon(**c))[0] for k, c in FALCONS.items()}
    assert [(a["num_kv_heads"], a["num_norms"]) for a in layouts.values()] == \
        [(2, 2), (2, 1), (1, 1), (4, 1)]
    _, p = hf.from_hf(falcon(**FALCONS["multi-query"]))  # bias=False: zero biases
    assert all(not p[f"attn.b_{c}"].any() for c in "qkvo") and not p["ffn.b1"].any()


# -- (a) the golden vectors through to_hf ---------------------------------------------------


def _through(model, function, planted=None):
    """Every expressible value vector of ``function`` through ``to_hf(model=...)``."""
    from attnspec.backends.torch.extras import _close_at, _tensors

    compared = 0
    for v in default_spec().vectors:
        if v.function != function or v.expect != "value" or v.deprecated:
            continue
        a = hf_zoo.expressible(v, model)
        if a is None:
            continue
        x, p = _tensors(v.inputs, "cpu"), _tensors(v.params, "cpu")
        offset = a.pop("offset", 0)
        module = hf.to_hf(p, a, model=model)
        y = hf.forward(module, x["x"], x.get("mask"), offset=offset)
        _close_at(model, y, v, "y", "float32")
        compared += 1
    return compared


@pytest.mark.parametrize("model, function, least", [
    ("MistralDecoderLayer", "llama_layer", 9), ("Qwen2DecoderLayer", "llama_layer", 5),
    ("Phi3DecoderLayer", "llama_layer", 4), ("GPTNeoXLayer", "parallel_layer", 3),
    ("FalconDecoderLayer", "parallel_layer", 7)])
def test_the_vectors_through_the_zoo_layer(model, function, least):
    assert _through(model, function) >= least


def test_gpt_neox_partial_rotary_is_rotary_dim():
    """GPT-NeoX's partial_rotary_factor (rotary_pct) f is parallel_layer's rotary_dim K f, both
    ways; the parallel_layer/rotary-dim-* vectors pass through GPTNeoXLayer, and a converter
    that drops the factor (the whole head rotated) fails them."""
    a, _ = hf.from_hf(neox(rope_parameters={**ROPE, "partial_rotary_factor": 0.5}))
    assert a["rotary_dim"] == 2  # K = 16 / 4
    assert "rotary_dim" not in hf.from_hf(neox())[0]  # factor 1: every feature, the default
    before = _through("GPTNeoXLayer", "parallel_layer")
    assert before >= 5  # the three rotary-dim vectors among them


def test_gpt_neox_partial_rotary_dropped_is_caught(monkeypatch):
    real = hf_zoo.hf_rope.to_hf

    def dropped(who, attributes, head_dim, partial, rules=hf_zoo.hf_rope.ROPE_TYPES):
        rope, config = real(who, attributes, head_dim, partial, rules)
        rope.pop("partial_rotary_factor", None)
        return rope, config
    monkeypatch.setattr(hf_zoo.hf_rope, "to_hf", dropped)
    with pytest.raises(AssertionError):
        _through("GPTNeoXLayer", "parallel_layer")


def test_to_hf_from_hf_is_bit_identical():
    for name, make in MODULES.items():
        m = make()
        attributes, params = hf.from_hf(m)
        back = hf.to_hf(params, attributes, model=type(m).__name__)
        want = m.state_dict()
        got = back.state_dict()
        if name == "Falcon-multi-query":  # bias=False comes back as zero biases
            assert all(not got[k].any() for k in got if k.endswith(".bias") and "ln" not in k
                       and "layernorm" not in k)
            got = {k: v for k, v in got.items() if k in want}
        assert set(got) == set(want), name
        for k in want:
            assert torch.equal(got[k], want[k]), (name, k)


# -- (d) what the spec cannot express -------------------------------------------------------


@pytest.mark.parametrize("make, field", [
    (lambda: falcon(rope_parameters={**ROPE, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor"),
    (lambda: neox(use_parallel_residual=False), "use_parallel_residual"),
    (lambda: falcon(alibi=True), "alibi"),
    (lambda: qwen2(hidden_act="gelu"), "hidden_act"),
    (lambda: mistral(rope_parameters={**ROPE, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor"),
    (lambda: neox(rope_parameters={"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0,
                                   "partial_rotary_factor": 1.0}), "rope_parameters"),
])
def test_inexpressible_config_is_refused_naming_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(make())


def test_to_hf_refuses_what_the_model_cannot_hold():
    _, p = hf.from_hf(falcon(**FALCONS["new-architecture"]))
    with pytest.raises(ConfigError, match="num_kv_heads"):
        hf.to_hf(p, {"num_heads": 4, "num_kv_heads": 2, "num_norms": 2}, model="GPTNeoXLayer")
    a, p = hf.from_hf(mistral())
    with pytest.raises(ConfigError, match="attention_bias"):
        hf.to_hf(p, a, model="Qwen2DecoderLayer")


# -- (e) planted converter bugs ---------------------------------------------------------------


def _neox_blocks(weight, bias, h, h_kv, k, layout):
    return _REAL_SPLIT(weight, bias, h, h_kv, k, "blocks")


def _fuse_blocks(p, h, h_kv, k, layout):
    return (torch.cat([p.require(f"attn.w_{c}").T for c in "qkv"]),
            torch.cat([p.require(f"attn.b_{c}") for c in "qkv"]))


_REAL_SPLIT = hf_zoo._split_qkv


def test_neox_qkv_read_as_blocks_is_caught(monkeypatch):
    """GPT-NeoX's query_key_value is interleaved per head; reading it as [q | k | v] blocks
    (GPT-2's c_attn layout) is caught by (b) and, written that way, by the vectors (a)."""
    m = neox()
    x = x_of(2, 5, 16)
    monkeypatch.setattr(hf_zoo, "_split_qkv", _neox_blocks)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(hf.forward(m, x).numpy(), _spec_y(m, x, None),
                                   rtol=2e-5, atol=4e-6)
    monkeypatch.setattr(hf_zoo, "_fuse_qkv", _fuse_blocks)
    with pytest.raises(AssertionError):
        _through("GPTNeoXLayer", "parallel_layer")


def test_phi3_gate_up_halves_swapped_is_caught(monkeypatch):
    real = hf_zoo._llama_like_to_hf

    def swapped(params, attributes, who):
        layer = real(params, attributes, who)
        with torch.no_grad():
            w = layer.mlp.gate_up_proj.weight
            w.copy_(torch.cat(w.chunk(2)[::-1]))
        return layer
    monkeypatch.setattr(hf_zoo, "_llama_like_to_hf", swapped)
    with pytest.raises(AssertionError):
        _through("Phi3DecoderLayer", "llama_layer")


# -- what spec/components/huggingface.md says of these models, on the installed release ---------


def test_documented_zoo_conventions_hold_on_the_installed_release():
    from transformers.masking_utils import sliding_window_overlay

    assert GPTNeoXConfig().rope_parameters["partial_rotary_factor"] == 0.25  # rotary_pct
    assert GPTNeoXConfig().use_parallel_residual and GPTNeoXConfig().attention_bias
    c = FalconConfig()
    assert (c.bias, c.multi_query, c.parallel_attn, c.new_decoder_architecture) == \
        (False, True, True, False)
    q = qwen2().self_attn
    assert q.o_proj.bias is None and all(getattr(q, f"{n}_proj").bias is not None for n in "qkv")
    inside = sliding_window_overlay(3)  # Mistral/Qwen2: kv_idx > q_idx - sliding_window
    assert [inside(0, 0, 5, j) for j in (2, 3, 5)] == [False, True, True]
