"""transformers' T5ForConditionalGeneration (tiny local configs, random weights, no download)
judged against the spec's t5_model through backends/torch/hf_t5.py, both ways, and the
differences of spec/components/huggingface.md ("T5ForConditionalGeneration") asserted
against the installed release."""

import numpy as np
import pytest
import torch
from attnspec.backends.numpy import models as spec_models
from attnspec.backends.torch import hf, hf_t5
from attnspec.spec.errors import ConfigError, ParameterError
from transformers import T5Config, T5ForConditionalGeneration
from transformers.models.t5.modeling_t5 import T5LayerNorm

# transformers computes T5LayerNorm's variance and the attention softmax in float32 even for a
# float64 module (asserted below): judged at the t5 vectors' float32 tolerance.
F32 = {"rtol": 2e-5, "atol": 1e-5}
SRC = torch.tensor([[4, 5, 6, 7, 1, 9], [3, 8, 9, 0, 0, 0]])
TGT = torch.tensor([[0, 5, 6, 2, 11], [0, 3, 3, 9, 0]])  # column 0: the start token = pad id


def _model(feed_forward="relu", tie=None, seed=0, layers=2) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    kw = {} if tie is None else {"tie_word_embeddings": tie}
    config = T5Config(vocab_size=13, d_model=8, d_kv=4, num_heads=2, d_ff=16, num_layers=layers,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16,
                      feed_forward_proj=feed_forward, dropout_rate=0.0, pad_token_id=0,
                      decoder_start_token_id=0, use_cache=False, attn_implementation="eager", **kw)
    model = T5ForConditionalGeneration(config).eval().double()
    with torch.no_grad():  # T5's init gives tiny q/k: widen everything so the scores matter
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def _spec(attrs, params, src=SRC, tgt=TGT):
    return spec_models.t5_model(src.numpy(), tgt.numpy(), **attrs,
                                params={k: v.numpy() for k, v in params.items()})


def _hf(model, src=SRC, tgt=TGT):
    with torch.no_grad():
        return model(input_ids=src, attention_mask=(src != 0).long(),
                     decoder_input_ids=tgt).logits.numpy()


@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
@pytest.mark.parametrize("tie", [None, False])
def test_t5_for_conditional_generation_matches_the_spec(feed_forward, tie):
    model = _model(feed_forward, tie)
    attrs, params = hf.from_hf(model)
    assert hf.SPEC_FUNCTION["T5ForConditionalGeneration"] == "t5_model"
    assert attrs["feed_forward"] == feed_forward and attrs["pad_id"] == 0
    assert attrs["tie_embeddings"] is (tie is None)
    assert ("lm_head.w" in params) is (tie is False)
    np.testing.assert_allclose(_spec(attrs, params), _hf(model), **F32)


@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
@pytest.mark.parametrize("tie", [True, False])
def test_to_hf_then_from_hf_gives_the_parameters_back(feed_forward, tie):
    attrs, params = hf.from_hf(_model(feed_forward, None if tie else False, seed=3))
    if not tie:  # an untied head of its own, not a copy of shared
        params["lm_head.w"] = torch.randn_like(params["lm_head.w"])
    model = hf.to_hf(params, attrs)
    assert type(model).__name__ == "T5ForConditionalGeneration"
    back_attrs, back = hf.from_hf(model)
    assert back_attrs == attrs and set(back) == set(params)
    for k in params:
        assert torch.equal(back[k], params[k]), k
    got = hf.forward(model, (SRC, TGT), pad_id=0).numpy()
    np.testing.assert_allclose(got, _spec(attrs, params), **F32)


def test_transformers_5_ties_lm_head_always_and_reads_tie_false_as_no_rescale():
    """huggingface.md: T5Config(tie_word_embeddings=False) sets scale_decoder_outputs=False
    and forces tie_word_embeddings=True: lm_head.weight is shared.weight after construction
    (a flan-t5 config builds a tied model). to_hf gives an untied model its own head."""
    model = _model(tie=False)
    assert model.config.scale_decoder_outputs is False
    assert model.config.tie_word_embeddings is True
    assert model.lm_head.weight is model.shared.weight
    attrs, params = hf.from_hf(model)
    params["lm_head.w"] = torch.randn_like(params["lm_head.w"])
    back = hf.to_hf(params, attrs)
    assert back.lm_head.weight.data_ptr() != back.shared.weight.data_ptr()
    assert torch.equal(back.lm_head.weight.T, params["lm_head.w"])


def test_the_tied_head_rescales_by_rsqrt_d_model_and_the_untied_one_does_not():
    """The same weights with and without the rescale differ by D^-0.5 exactly at the head."""
    tied = _model(tie=None, seed=5)
    untied = _model(tie=False, seed=5)
    np.testing.assert_allclose(_hf(tied), _hf(untied) * 8 ** -0.5, rtol=1e-12, atol=1e-14)


def test_hf_attends_to_the_decoder_start_token_the_pad_id():
    """No decoder_attention_mask: the decoder's key 0 (the pad id as start token) is attended,
    as the spec's t5_model; masking it (decoder_attention_mask = tgt != pad) changes row 0."""
    model = _model(seed=7)
    attrs, params = hf.from_hf(model)
    with torch.no_grad():
        masked = model(input_ids=SRC, attention_mask=(SRC != 0).long(), decoder_input_ids=TGT,
                       decoder_attention_mask=(TGT != 0).long()).logits.numpy()
    spec = _spec(attrs, params)
    np.testing.assert_allclose(spec, _hf(model), **F32)
    assert np.abs(masked[:, 1] - spec[:, 1]).max() > 1e-3


def test_hf_computes_the_t5_layer_norm_variance_in_float32_and_nothing_else(monkeypatch):
    """Why F32, and all of it: a float64 T5LayerNorm differs from the float64 RMSNorm by
    float32 rounding (> 1e-12, < 1e-6); with the variance in float64 instead, the whole float64
    model equals the spec at float64's tolerance (the eager softmax is float64 in 5.24)."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.float64) * 3
    norm = T5LayerNorm(8, eps=1e-6).double()
    exact = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    with torch.no_grad():
        diff = (norm(x) - exact).abs().max().item()
    assert 1e-12 < diff < 1e-6, diff
    model = _model("gated-gelu", seed=4)
    attrs, params = hf.from_hf(model)
    spec = _spec(attrs, params)
    assert np.abs(_hf(model) - spec).max() > 1e-12  # float32 rounding shows at float64

    def float64_norm(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))
    monkeypatch.setattr(T5LayerNorm, "forward", float64_norm)
    np.testing.assert_allclose(_hf(model), spec, rtol=1e-10, atol=1e-12)


def test_a_source_row_of_pads_differs_from_the_spec_in_transformers():
    """A source row of pads only: the spec's encoder gives it zero attention outputs, transformers
    uniform weights (the extra check skips such vectors)."""
    model = _model(seed=9)
    attrs, params = hf.from_hf(model)
    src = SRC.clone()
    src[1] = 0
    assert np.abs(_spec(attrs, params, src=src)[1] - _hf(model, src=src)[1]).max() > 1e-3


def test_converter_refusals():
    attrs, params = hf.from_hf(_model(tie=False, seed=2))
    with pytest.raises(ParameterError, match="lm_head.w"):
        hf.to_hf(params, {**attrs, "tie_embeddings": True})  # a tied model with a head
    with pytest.raises(ParameterError, match="lm_head.w"):
        hf.to_hf({k: v for k, v in params.items() if k != "lm_head.w"}, attrs)
    with pytest.raises(ConfigError, match="activation"):
        hf.to_hf(params, {**attrs, "activation": "relu"})
    with pytest.raises(ConfigError, match="src_ids, tgt_ids"):
        hf.forward(hf.to_hf(params, attrs), SRC, pad_id=0)
    model = _model(layers=1)
    model.config.num_decoder_layers = 2
    with pytest.raises(ConfigError, match="num_decoder_layers"):
        hf_t5.t5_model_from_hf(model)
