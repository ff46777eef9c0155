"""backends/torch/hf.py: transformers' BertLayer, GPT2Block and LlamaDecoderLayer to and from
spec parameters.

(a) from_hf: a random float64 layer's forward equals the NumPy backend's spec function on
    the converted parameters (rtol 1e-12);
(b) to_hf: the golden vectors through the layer are the suite's extras
    (``attnspec verify --backend torch -k transformers``); here, that those checks reject
    a planted mapping bug;
(c) to_hf(from_hf(m)) is bit identical to m;
(d) a config the spec cannot express raises ConfigError naming the config field.
Runs in the ``hf`` tox environment (tests/hf is left out of the numpy one).
"""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.numpy import attention, feedforward, norm, positional
from attnspec.backends.numpy.layers import encoder_layer
from attnspec.backends.torch import extras, hf
from attnspec.spec.errors import ConfigError, ParameterError
from attnspec.spec.vectors import default_spec
from transformers.models.llama import modeling_llama

from .small import DT, bert, gpt2, llama, llama_lm, torch, x_of

RTOL, ATOL = 1e-12, 1e-13


def _np(params):
    return {k: v.numpy() for k, v in params.items()}


def _padding(lengths, t):
    return torch.arange(t)[None, None, None, :] < torch.tensor(lengths)[:, None, None, None]


def _causal(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


# -- (a) from_hf: the layer's forward equals the spec function -----------------------------------


@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_new", "gelu_pytorch_tanh"])
def test_bert_layer_from_hf_agrees(act):
    m = bert(act)
    attributes, params = hf.from_hf(m)
    assert attributes == {"num_heads": 3, "norm": "post", "eps": 1e-12,
                          "activation": hf.ACTIVATIONS[act]}
    x, mask = x_of(2, 6, 12), _padding([6, 4], 6)
    want = encoder_layer(x.numpy(), mask.numpy(), params=_np(params), **attributes)
    np.testing.assert_allclose(hf.forward(m, x, mask).numpy(), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("act", ["gelu_new", "gelu_pytorch_tanh", "gelu", "relu"])
def test_gpt2_block_from_hf_agrees_with_a_causal_encoder_layer(act):
    m = gpt2(act)
    attributes, params = hf.from_hf(m)
    assert attributes == {"num_heads": 3, "norm": "pre", "eps": 1e-5,
                          "activation": hf.ACTIVATIONS[act]}
    x = x_of(2, 5, 12)
    mask = _causal(5) & _padding([5, 3], 5)  # (B, 1, T, T): GPT2Model's causal and padding
    want = encoder_layer(x.numpy(), mask.numpy(), params=_np(params), **attributes)
    np.testing.assert_allclose(hf.forward(m, x, mask).numpy(), want, rtol=RTOL, atol=ATOL)


def llama_from_kernels(x, mask=None, *, num_heads, num_kv_heads=None, eps=1e-6,
                       rope_base=10000.0, offset=0, params):
    """LLAMA_API.md's llama_layer composed from the NumPy backend's kernels (rms_norm, rope
    "half", sdpa with num_kv_heads, gated_feedforward): the reference until llama_layer
    itself is in the backend."""
    b, t, d = x.shape
    h, h_kv = num_heads, num_kv_heads or num_heads
    k = params["attn.w_q"].shape[1] // h

    def scope(prefix):
        return {n[len(prefix):]: a for n, a in params.items() if n.startswith(prefix)}

    def heads(z, n):  # (B, T, n*K) -> (B, n, T, K)
        return z.reshape(b, t, n, k).transpose(0, 2, 1, 3)

    def rope(z):
        return positional.rope(z, offset=offset, base=rope_base, convention="half")

    n1 = norm.rms_norm(x, eps=eps, params=scope("attn_norm."))
    q, kk = rope(heads(n1 @ params["attn.w_q"], h)), rope(heads(n1 @ params["attn.w_k"], h_kv))
    keep = np.tril(np.ones((t, t), dtype=bool)) & (True if mask is None else mask)
    o, _ = attention.sdpa(q, kk, heads(n1 @ params["attn.w_v"], h_kv), keep, num_kv_heads=h_kv)
    r = x + o.transpose(0, 2, 1, 3).reshape(b, t, h * k) @ params["attn.w_o"]  # (B, T, D)
    n2 = norm.rms_norm(r, eps=eps, params=scope("ffn_norm."))
    return r + feedforward.gated_feedforward(n2, params=scope("ffn."))


@pytest.fixture
def llama_in_float64(monkeypatch):
    """transformers computes RMSNorm, the RoPE angles and the eager softmax in float32 even
    for float64 tensors (test_documented_differences.py): replace exactly those three steps
    by float64 ones, so that what remains (the mapping) is judged at 1e-12."""

    def rms_forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        c = self.config
        k = c.head_dim
        theta = c.rope_parameters["rope_theta"] ** (-torch.arange(0, k, 2, dtype=DT) / k)
        angle = position_ids[..., None].to(DT) * theta  # (B, T, K/2)
        emb = torch.cat([angle, angle], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def eager(module, q, k, v, attention_mask, scaling, dropout=0.0, **kwargs):
        k = modeling_llama.repeat_kv(k, module.num_key_value_groups)
        v = modeling_llama.repeat_kv(v, module.num_key_value_groups)
        w = torch.softmax(q @ k.transpose(2, 3) * scaling + attention_mask, dim=-1)
        return (w @ v).transpose(1, 2).contiguous(), w

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_forward)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary_forward)
    monkeypatch.setattr(modeling_llama, "eager_attention_forward", eager)


@pytest.mark.parametrize("offset", [0, 3])
def test_llama_layer_from_hf_agrees_in_float64(llama_in_float64, offset):
    m = llama()
    attributes, params = hf.from_hf(m)
    assert attributes == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5, "rope_base": 100.0}
    x, mask = x_of(2, 7, 16), _padding([7, 5], 7)
    want = llama_from_kernels(x.numpy(), mask.numpy(), params=_np(params), offset=offset,
                              **attributes)
    got = hf.forward(m, x, mask, offset=offset).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_llama_layer_from_hf_agrees_as_shipped_within_float32_rounding():
    """The unpatched layer: its float32 steps leave ~1e-7 relative error, nothing more."""
    m = llama()
    attributes, params = hf.from_hf(m)
    x = x_of(2, 7, 16)
    want = llama_from_kernels(x.numpy(), params=_np(params), offset=2, **attributes)
    np.testing.assert_allclose(hf.forward(m, x, offset=2).numpy(), want, rtol=2e-5, atol=4e-6)


def test_llama_layer_from_hf_agrees_with_the_backend_llama_layer(llama_in_float64):
    if "llama_layer" not in default_spec().functions:
        pytest.skip("this checkout's spec has no llama_layer yet (branch llama): the "
                    "kernel-composed reference above stands in for it")
    from attnspec.backends.numpy.layers import llama_layer

    m = llama()
    attributes, params = hf.from_hf(m)
    x, mask = x_of(2, 7, 16), _padding([7, 5], 7)
    want = llama_layer(x.numpy(), mask.numpy(), params=_np(params), offset=3, **attributes)
    got = hf.forward(m, x, mask, offset=3).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- (b) the golden vectors through to_hf: the suite's checks catch a planted bug ------------------


def _check(name):
    return dict(extras.hf_checks("cpu"))[name]


@pytest.mark.parametrize("name", ["agree/transformers.BertLayer", "agree/transformers.GPT2Block"])
def test_golden_vectors_pass_through_to_hf(name):
    _check(name)(default_spec())


def test_a_swapped_query_key_mapping_fails_the_bert_check(monkeypatch):
    table = [(hf_name.replace(".query.", ".KEY.").replace(".key.", ".query.")
              .replace(".KEY.", ".key."), spec, t) for hf_name, spec, t in hf.BERT]
    monkeypatch.setattr(hf, "BERT", table)
    with pytest.raises(AssertionError, match="encoder_layer/"):
        _check("agree/transformers.BertLayer")(default_spec())


def test_gelu_written_as_gelu_tanh_fails_the_gpt2_check(monkeypatch):
    monkeypatch.setitem(hf._TO_HF_ACTIVATION, "gelu", "gelu_new")
    with pytest.raises(AssertionError, match="encoder_layer/pre-001"):
        _check("agree/transformers.GPT2Block")(default_spec())


def test_without_transformers_the_check_is_a_reported_skip(monkeypatch):
    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    [(name, check)] = extras.hf_checks("cpu")
    with pytest.raises(pytest.skip.Exception, match=r"attnspec\[hf\]"):
        check(default_spec())


# -- (c) round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [bert, gpt2, llama], ids=["BertLayer", "GPT2Block",
                                                          "LlamaDecoderLayer"])
def test_round_trip_is_bit_identical(make):
    m = make()
    back = hf.to_hf(*reversed(hf.from_hf(m)))
    assert type(back) is type(m)
    a, b = m.state_dict(), back.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    x = x_of(2, 5, a[next(iter(a))].shape[-1])
    assert torch.equal(hf.forward(m, x, _causal(5)), hf.forward(back, x, _causal(5)))
    assert hf.from_hf(back)[0] == hf.from_hf(m)[0]


def test_spec_parameters_round_trip_through_the_layer():
    v = default_spec().vector("encoder_layer/no-bias-001")  # no attention biases
    params = {k: torch.from_numpy(np.array(a)) for k, a in v.params.items()}
    attributes, back = hf.from_hf(hf.to_hf(params, v.attributes))
    assert attributes == {"eps": 1e-5, **v.attributes}
    for k, a in params.items():
        assert torch.equal(back[k], a), k
    assert all(torch.equal(back[k], torch.zeros(8, dtype=DT)) for k in set(back) - set(params))


# -- (d) what the spec cannot express -----------------------------------------------------------


@pytest.mark.parametrize("make, field", [
    (lambda: bert("silu"), "hidden_act"),
    (lambda: bert(is_decoder=True, add_cross_attention=True), "is_decoder"),
    (lambda: gpt2("silu"), "activation_function"),
    (lambda: gpt2(scale_attn_weights=False), "scale_attn_weights"),
    (lambda: gpt2(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (lambda: gpt2(add_cross_attention=True), "add_cross_attention"),
    (lambda: llama(attention_bias=True), "attention_bias"),
    (lambda: llama(mlp_bias=True), "mlp_bias"),
    (lambda: llama(hidden_act="gelu"), "hidden_act"),
    (lambda: llama(rope_parameters={"rope_type": "proportional", "rope_theta": 100.0}),
     "rope_parameters.rope_type"),
])
def test_unsupported_config_raises_config_error_naming_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        hf.from_hf(make())


def test_from_hf_of_another_module_names_the_supported_ones():
    with pytest.raises(ConfigError, match="Linear.*BertLayer, GPT2Block, LlamaDecoderLayer"):
        hf.from_hf(torch.nn.Linear(2, 2))


def _spec_params(vid):
    v = default_spec().vector(vid)
    return {k: torch.from_numpy(np.array(a)) for k, a in v.params.items()}, dict(v.attributes)


@pytest.mark.parametrize("change, error, mention", [
    (lambda p, a: p.pop("norm2.gamma"), ParameterError, "norm2.gamma"),
    (lambda p, a: p.update({"self_attn.w_k": p["self_attn.w_k"][:, :4]}), ParameterError,
     "self_attn.w_k"),
    (lambda p, a: a.update(num_heads=3), ConfigError, "num_heads"),
    (lambda p, a: a.update(norm="sandwich"), ConfigError, "norm"),
    (lambda p, a: a.update(activation="silu"), ConfigError, "activation"),
    (lambda p, a: a.update(eps=0.0), ConfigError, "eps"),
    (lambda p, a: a.update(scale=0.5), ConfigError, "scale"),
])
def test_to_hf_rejects_what_the_layer_cannot_hold(change, error, mention):
    params, attributes = _spec_params("encoder_layer/post-001")
    change(params, attributes)
    with pytest.raises(error, match=mention):
        hf.to_hf(params, attributes)


@pytest.mark.parametrize("attributes, mention", [
    ({"window": 4}, "window"), ({"num_kv_heads": 3}, "num_kv_heads"), ({"num_heads": 3}, "num_heads"),
])
def test_llama_to_hf_rejects_what_llama_config_cannot_hold(attributes, mention):
    attrs, params = hf.from_hf(llama())
    with pytest.raises(ConfigError, match=mention):
        hf.to_hf(params, {**attrs, **attributes})


def test_llama_to_hf_names_a_missing_parameter():
    attrs, params = hf.from_hf(llama())
    del params["ffn.w_gate"]
    with pytest.raises(ParameterError, match="ffn.w_gate"):
        hf.to_hf(params, attrs)


# -- (b) for llama_layer, before its vectors exist: vectors whose expected y is the kernels' ------


def _llama_vector(vid, attributes, mask=None, seed=0):
    attrs, params = hf.from_hf(llama(rms_norm_eps=1e-6))
    x = x_of(2, 6, 16, seed=seed).numpy()
    inputs = {"x": x} if mask is None else {"x": x, "mask": mask}
    call = {**attrs, **attributes}
    call.pop("window", None)
    y = llama_from_kernels(x, mask, params=_np(params), **call)
    tol = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 2e-5, "atol": 4e-6}}
    return SimpleNamespace(id=vid, function="llama_layer", expect="value", deprecated=False,
                           attributes={**attrs, **attributes}, inputs=inputs,
                           params=_np(params), outputs={"y": y}, tolerances=tol)


def _llama_spec(*vectors):
    return SimpleNamespace(version="test", vectors=list(vectors))


def test_the_llama_check_passes_vectors_computed_by_the_kernels():
    spec = _llama_spec(_llama_vector("llama/plain", {}),
                       _llama_vector("llama/offset-mask", {"offset": 3},
                                     mask=_padding([6, 4], 6).numpy(), seed=2))
    _check("agree/transformers.LlamaDecoderLayer")(spec)


def test_the_llama_check_catches_gate_and_up_swapped(monkeypatch):
    """w1/w3 confusion: SwiGLU's gate and up projections have the same shape."""
    spec = _llama_spec(_llama_vector("llama/plain", {}))
    table = [(n.replace("gate_proj", "G").replace("up_proj", "gate_proj").replace("G", "up_proj"),
              s, t) for n, s, t in hf.LLAMA]
    monkeypatch.setattr(hf, "LLAMA", table)
    with pytest.raises(AssertionError, match="llama/plain"):
        _check("agree/transformers.LlamaDecoderLayer")(spec)


def test_the_llama_check_leaves_out_windows_and_fails_when_nothing_is_left():
    spec = _llama_spec(_llama_vector("llama/window", {"window": 2}))
    with pytest.raises(AssertionError, match="no llama_layer vector could be expressed"):
        _check("agree/transformers.LlamaDecoderLayer")(spec)


# -- LlamaForCausalLM <-> llama_decoder_only ---------------------------------------------------------

IDS = torch.tensor([[1, 5, 3, 3, 9, 2, 10], [1, 4, 0, 7, 0, 0, 0]])  # pad_id 0 mid-row and after


def _backend_llama_decoder_only():
    if "llama_decoder_only" not in default_spec().functions:
        pytest.skip("this checkout's spec has no llama_decoder_only yet (branch llama)")
    from attnspec.backends.numpy.models import llama_decoder_only

    return llama_decoder_only


def test_llama_for_causal_lm_from_hf_agrees_in_float64(llama_in_float64):
    spec_fn = _backend_llama_decoder_only()
    m = llama_lm()
    attributes, params = hf.from_hf(m)
    assert attributes == {"num_heads": 4, "num_kv_heads": 2, "eps": 1e-5, "rope_base": 100.0,
                          "num_layers": 2}
    assert params["lm_head.w"].shape == (16, 11) and params["embed.table"].shape == (11, 16)
    want = spec_fn(IDS.numpy(), pad_id=0, params=_np(params), **attributes)
    got = hf.forward(m, IDS, pad_id=0).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_llama_for_causal_lm_round_trip_is_bit_identical():
    m = llama_lm()
    back = hf.to_hf(*reversed(hf.from_hf(m)))
    a, b = m.state_dict(), back.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(hf.forward(m, IDS, pad_id=0), hf.forward(back, IDS, pad_id=0))


def test_the_llama_for_causal_lm_check_catches_a_model_that_ignores_padding(monkeypatch):
    spec = default_spec()
    check = _check("agree/transformers.LlamaForCausalLM")
    check(spec)
    real = hf.LlamaForCausalLM.forward
    monkeypatch.setattr(hf.LlamaForCausalLM, "forward",
                        lambda self, *a, attention_mask=None, **kw: real(self, *a, **kw))
    with pytest.raises(AssertionError, match="llama/model-"):
        check(spec)


def test_llama_for_causal_lm_to_hf_names_what_it_misses():
    attributes, params = hf.from_hf(llama_lm())
    with pytest.raises(ConfigError, match="num_layers"):
        hf.to_hf(params, {k: v for k, v in attributes.items() if k != "num_layers"})
    del params["layers.1.ffn.w_up"]
    with pytest.raises(ParameterError, match="layers.1.ffn.w_up"):
        hf.to_hf(params, attributes)
