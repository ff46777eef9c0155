"""The oracle's VJPs of the zoo's whole models against 50-digit central differences of the
forward oracle (as tests/test_grad_oracle.py): llama_decoder_only with attention_bias and
tie_embeddings (Qwen2), parallel_decoder_only (GPT-NeoX, Falcon), untied and tied."""

import numpy as np
import pytest
from attnspec.spec.cases import parallel_layer as parallel_cases
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.llama import qwen2_model_params
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.llama import llama_decoder_only
from attnspec.spec.oracle.parallel_layer import parallel_decoder_only

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


@pytest.mark.parametrize("tie", [False, True])
def test_llama_decoder_only_bias_and_tie_vjp_matches_central_differences(tie):
    """Two layers with q, k, v biases; id 2 twice (its embedding row sums the scatter-add and,
    tied, the head's share); pad_id 0 in row 1."""
    r = Rng(f"test/grad/llama_decoder_only/qwen2/{tie}")
    _check(llama_decoder_only, VJP["llama_decoder_only"], {"logits": r.uniform((2, 3, 5))},
           {"ids": np.array([[1, 2, 2], [3, 0, 4]])},
           {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
            "attention_bias": True, "tie_embeddings": tie},
           qwen2_model_params(r, 2, 4, 2, 1, 3, 5, tie=tie))


@pytest.mark.parametrize("num_norms, tie", [(2, False), (1, True)])
def test_parallel_decoder_only_vjp_matches_central_differences(num_norms, tie):
    r = Rng(f"test/grad/parallel_decoder_only/{num_norms}/{tie}")
    _check(parallel_decoder_only, VJP["parallel_decoder_only"], {"logits": r.uniform((2, 3, 5))},
           {"ids": np.array([[1, 2, 2], [3, 0, 4]])},
           {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
            "num_norms": num_norms, "eps": 0.01, "rope_base": 100.0, "tie_embeddings": tie},
           parallel_cases.model_params(r, 2, 4, 2, 1, 2, 3, 5, num_norms=num_norms, tie=tie))


def test_a_tied_head_without_its_table_gradient_is_caught(monkeypatch):
    """The check can fail: the tied head's dE dropped from the oracle's VJP (the decoder
    stack's, shared by llama_decoder_only and parallel_decoder_only)."""
    from attnspec.spec.oracle import llama

    real = llama.lm_head_vjp
    monkeypatch.setattr(llama, "lm_head_vjp",
                        lambda *a, **kw: (real(*a, **kw)[0], {"table": 0 * real(*a, **kw)[1]["table"]}))
    r = Rng("test/grad/parallel_decoder_only/caught")
    with pytest.raises(AssertionError):
        _check(parallel_decoder_only, VJP["parallel_decoder_only"],
               {"logits": r.uniform((1, 3, 5))}, {"ids": np.array([[1, 2, 3]])},
               {"pad_id": 0, "num_layers": 1, "num_heads": 2, "tie_embeddings": True},
               parallel_cases.model_params(r, 1, 4, 2, 2, 2, 3, 5, tie=True))
