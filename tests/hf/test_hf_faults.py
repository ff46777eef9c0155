"""backends/torch/hf.py on bad input (issue 20, item 5): the converters and ``forward``
raise the spec's errors naming the attribute, parameter path or argument, never a
traceback from inside transformers, and never accept a value silently."""

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.torch import hf
from attnspec.spec.errors import (
    ConfigError,
    DomainError,
    DTypeError,
    ParameterError,
    ShapeError,
)

from .small import bert, gpt2, llama, llama_lm, torch, x_of

MAKERS = {"bert": bert, "gpt2": gpt2, "llama": llama}


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize("eps", [float("nan"), float("inf"), True, "1e-5"])
def test_a_bad_eps_is_refused(kind, eps):
    attributes, params = hf.from_hf(MAKERS[kind]())
    with pytest.raises(ConfigError, match="eps"):
        hf.to_hf(params, {**attributes, "eps": eps})


@pytest.mark.parametrize("kind,path", [("bert", "self_attn.w_x"), ("gpt2", "ffn.w3"),
                                       ("llama", "attn.b_q")])
def test_an_unknown_parameter_path_is_refused_naming_it(kind, path):
    attributes, params = hf.from_hf(MAKERS[kind]())
    with pytest.raises(ParameterError, match=path.replace(".", r"\.")):
        hf.to_hf({**params, path: params[next(iter(params))]}, attributes)


def test_an_unknown_layer_of_a_causal_lm_is_refused():
    attributes, params = hf.from_hf(llama_lm(num_hidden_layers=2))
    extra = {k.replace("layers.1.", "layers.2."): v for k, v in params.items() if k.startswith("layers.1.")}
    with pytest.raises(ParameterError, match=r"layers\.2\."):
        hf.to_hf({**params, **extra}, attributes)


def test_a_parameter_that_is_not_a_tensor_is_refused_naming_it():
    attributes, params = hf.from_hf(bert())
    params["ffn.b1"] = params["ffn.b1"].numpy()
    with pytest.raises(ParameterError, match=r"ffn\.b1"):
        hf.to_hf(params, attributes)


@pytest.mark.parametrize("attribute,value", [("num_heads", True), ("rope_base", float("nan")),
                                             ("num_kv_heads", True)])
def test_a_bad_llama_attribute_is_refused(attribute, value):
    attributes, params = hf.from_hf(llama())
    with pytest.raises(ConfigError, match=attribute):
        hf.to_hf(params, {**attributes, attribute: value})


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize("bad,error,says", [
    (lambda x: x.numpy(), DTypeError, "torch.Tensor"),
    (lambda x: x[0], ShapeError, "(B, T, D"),
    (lambda x: x[..., :-1], ShapeError, "(B, T, D"),
    (lambda x: x.float(), DTypeError, "dtype"),
])
def test_forward_refuses_a_bad_x(kind, bad, error, says):
    with pytest.raises(error, match=says.replace("(", r"\(")):
        hf.forward(MAKERS[kind](), bad(x_of(2, 3, 16 if kind == "llama" else 12)))


@pytest.mark.parametrize("mask,error", [
    (torch.ones(2, 1, 3, 4, dtype=torch.bool), ShapeError),
    (torch.ones(1, 1, 1, 3, 3, dtype=torch.bool), ShapeError),
    (torch.ones(3, 3), DTypeError),
    (np.ones((3, 3), dtype=np.int64), DTypeError),
])
def test_forward_refuses_a_bad_mask(mask, error):
    with pytest.raises(error, match="mask"):
        hf.forward(bert(), x_of(2, 3, 12), mask)


@pytest.mark.parametrize("kwargs,error,says", [
    ({"offset": -1}, ConfigError, "offset"),
    ({"offset": 1.5}, ConfigError, "offset"),
    ({"pad_id": 0}, ConfigError, "pad_id"),
])
def test_forward_refuses_a_bad_argument(kwargs, error, says):
    with pytest.raises(error, match=says):
        hf.forward(llama(), x_of(2, 3, 16), **kwargs)


@pytest.mark.parametrize("ids,kwargs,error", [
    (torch.tensor([[1, 2, 11]]), {}, DomainError),
    (torch.tensor([[1, -1, 2]]), {}, DomainError),
    (torch.tensor([[1.0, 2.0]]), {}, DTypeError),
    (torch.tensor([1, 2]), {}, DTypeError),
    (torch.tensor([[1, 2]]), {"pad_id": 11}, ConfigError),
])
def test_forward_refuses_bad_ids(ids, kwargs, error):
    with pytest.raises(error):
        hf.forward(llama_lm(vocab_size=11), ids, **kwargs)


def test_forward_refuses_a_module_without_a_converter():
    with pytest.raises(ConfigError, match="Linear"):
        hf.forward(torch.nn.Linear(2, 2), torch.zeros(1, 1, 2))
