"""backends/torch/hf_gpt2.py: transformers' GPT2LMHeadModel (tiny local configs, random
weights, no download) to and from the spec's ``decoder_only`` with ``tie_embeddings``.

(a) from_hf: the float64 model's logits equal the NumPy backend's decoder_only on the
    converted parameters (tied and untied heads, padding);
(b) to_hf: the golden vectors through the model are the suite's extra check
    ``agree/transformers.GPT2LMHeadModel``; here, that it compares vectors and rejects planted
    bugs (an untied head, a head with a bias, exact GELU for gelu_new, post-norm);
(c) to_hf(from_hf(m)) reproduces m bit for bit, the tie included;
(d) what the spec cannot express raises the spec's errors, naming the field.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnspec.backends.numpy.models import decoder_only  # noqa: E402
from attnspec.backends.torch import extras, hf, hf_gpt2  # noqa: E402
from attnspec.spec.errors import ConfigError, DomainError, ParameterError  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from .small import randomized  # noqa: E402

DT = torch.float64


def lm(tied=True, activation="gelu_new", layers=2, **config):
    c = GPT2Config(vocab_size=11, n_positions=9, n_embd=12, n_head=3, n_layer=layers,
                   n_inner=20, activation_function=activation, tie_word_embeddings=tied,
                   bos_token_id=None, eos_token_id=None, attn_implementation="eager", **config)
    model = GPT2LMHeadModel(c)
    randomized(model.transformer)
    if not tied:
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 0.3)
    return model.to(DT).eval()


IDS = torch.tensor([[1, 5, 7, 2, 9, 3, 4], [1, 8, 8, 6, 0, 0, 0]])


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("activation", ["gelu_new", "gelu", "relu"])
def test_gpt2_lm_from_hf_agrees_with_decoder_only(tied, activation):
    model = lm(tied, activation)
    attributes, params = hf.from_hf(model)
    assert hf.SPEC_FUNCTION["GPT2LMHeadModel"] == "decoder_only"
    assert attributes == {"num_heads": 3, "norm": "pre", "eps": 1e-5,
                          "activation": hf.ACTIVATIONS[activation], "num_layers": 2,
                          "tie_embeddings": tied}
    assert ("lm_head.w" in params) is not tied and "lm_head.b" not in params
    want = decoder_only(IDS.numpy(), pad_id=0, params={k: v.numpy() for k, v in params.items()},
                        **attributes)
    got = hf.forward(model, IDS, pad_id=0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_gpt2_lm_round_trip_is_exact_and_keeps_the_tie():
    model = lm()
    back = hf.to_hf(*reversed(hf.from_hf(model)))
    assert isinstance(back, GPT2LMHeadModel) and back.config.tie_word_embeddings
    assert back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr()
    for (k, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    assert torch.equal(hf.forward(back, IDS, pad_id=0), hf.forward(model, IDS, pad_id=0))


def test_untied_round_trip():
    model = lm(tied=False)
    back = hf.to_hf(*reversed(hf.from_hf(model)))
    assert not back.config.tie_word_embeddings
    assert torch.equal(back.lm_head.weight, model.lm_head.weight)


# -- (b) the suite's extra check compares vectors and can fail -------------------------------------


def _check():
    return dict(extras.hf_checks("cpu"))["agree/transformers.GPT2LMHeadModel"]


def test_the_extra_check_passes_on_the_golden_vectors():
    _check()(default_spec())


def _planted(monkeypatch, change):
    real = hf_gpt2.gpt2_lm_to_hf

    def broken(params, attributes):
        model = real(params, attributes)
        with torch.no_grad():
            change(model)
        return model
    monkeypatch.setattr(hf_gpt2, "gpt2_lm_to_hf", broken)


def _untie(model):  # an untied head: lm_head a copy of wte, then trained apart
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.transformer.wte.weight.detach() * 1.5)


def _bias(model):  # a head with a bias
    model.lm_head.bias = torch.nn.Parameter(torch.full((model.config.vocab_size,), 0.25,
                                                       dtype=DT))


def _exact_gelu(model):  # gelu_new read as the erf GELU
    for block in model.transformer.h:
        block.mlp.act = torch.nn.GELU()


@pytest.mark.parametrize("change", [_untie, _bias, _exact_gelu], ids=["untied", "bias", "gelu"])
def test_the_extra_check_rejects_a_planted_bug(monkeypatch, change):
    _planted(monkeypatch, change)
    with pytest.raises(AssertionError, match="GPT2LMHeadModel"):
        _check()(default_spec())


def test_post_norm_is_refused_not_mistranslated():
    _, params = hf.from_hf(lm())
    with pytest.raises(ConfigError, match="norm"):
        hf.to_hf(params, {"num_layers": 2, "num_heads": 3, "norm": "post",
                          "tie_embeddings": True})


# -- (d) what GPT2LMHeadModel cannot hold ----------------------------------------------------------


def test_a_head_bias_is_refused_naming_it():
    attributes, params = hf.from_hf(lm())
    params["lm_head.b"] = torch.zeros(11, dtype=DT)
    with pytest.raises(ParameterError, match=r"lm_head\.b.*\(11,\)"):
        hf.to_hf(params, attributes)


def test_a_tied_model_with_an_lm_head_w_is_refused():
    attributes, params = hf.from_hf(lm())
    params["lm_head.w"] = torch.zeros(12, 11, dtype=DT)
    with pytest.raises(ParameterError, match=r"lm_head\.w"):
        hf.to_hf(params, attributes)


def test_too_many_positions_and_bad_ids_raise_the_spec_errors():
    model = lm()
    with pytest.raises(DomainError, match="wpe"):
        hf.forward(model, torch.ones(1, 10, dtype=torch.long), pad_id=0)
    with pytest.raises(DomainError, match="token ids"):
        hf.forward(model, torch.tensor([[1, 11]]), pad_id=0)
    with pytest.raises(ConfigError, match="pad_id"):
        hf.forward(model, IDS, torch.ones(7, 7, dtype=torch.bool))


def test_hf_unties_nothing_gpt2_head_is_wte_and_has_no_bias():
    """The documented facts on the installed release: GPT2LMHeadModel's lm_head is
    nn.Linear(D, L, bias=False), tied to wte by default; gelu_new is the tanh GELU."""
    model = GPT2LMHeadModel(GPT2Config(vocab_size=11, n_positions=9, n_embd=12, n_head=3,
                                       n_layer=1, bos_token_id=None, eos_token_id=None))
    assert model.config.tie_word_embeddings and model.config.activation_function == "gelu_new"
    assert model.lm_head.bias is None and model.lm_head.weight is model.transformer.wte.weight
    act = model.transformer.h[0].mlp.act
    u = torch.linspace(-4, 4, 33, dtype=DT)
    tanh = 0.5 * u * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (u + 0.044715 * u ** 3)))
    torch.testing.assert_close(act(u), tanh, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(act(u), torch.nn.functional.gelu(u), rtol=1e-6, atol=1e-7)


def test_gpt2_positions_are_an_arange_whatever_the_attention_mask():
    """GPT2Model's position_ids are arange(T) (not shifted by padding): the spec's pos.table."""
    model = lm(layers=1)
    keep = (IDS != 0).long()
    with torch.no_grad():
        implicit = model(input_ids=IDS, attention_mask=keep).logits
        explicit = model(input_ids=IDS, attention_mask=keep,
                         position_ids=torch.arange(IDS.shape[1])[None]).logits
    assert torch.equal(implicit, explicit)
