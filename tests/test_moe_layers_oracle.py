"""The moe_layers oracle's VJPs (mixtral_layer, deepseek_layer dense and MoE,
deepseek_decoder_only) against 50-digit central differences of the forward oracle
(tests/test_grad_oracle.py's check). The routers are drawn robust (spec/cases/moe_layers.py),
so a step of 1e-20 never moves a token to another expert."""

import numpy as np
import pytest
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.llama import shifted
from attnspec.spec.cases.mla import dims
from attnspec.spec.cases.moe_layers import deepseek_case, mixtral_case, model_case
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.moe_layers import deepseek_decoder_only, deepseek_layer, mixtral_layer

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


def test_mixtral_layer_vjp_matches_central_differences():
    """Qwen2-MoE's path: biases, a window, a padding mask, a gated shared expert, top 2 of 4
    not renormalised; D = 4, H = 2 on H_kv = 1, K = 2, T = 3."""
    r = Rng("test/grad/mixtral_layer")
    mask = np.ones((1, 1, 1, 3), dtype=bool)
    mask[0, 0, 0, 1] = False
    a = {"num_heads": 2, "num_kv_heads": 1, "top_k": 2, "eps": 0.01, "window": 2, "offset": 1,
         "attention_bias": True, "renormalize": False}
    x = shifted(r, (1, 3, 4))
    p = mixtral_case(r, x, a, 2, 1, 2, mask=mask, shared_f=3, bias=True)
    _check(mixtral_layer, VJP["mixtral_layer"], {"y": r.uniform((1, 3, 4))},
           {"x": x, "mask": mask}, a, p)


@pytest.mark.parametrize("moe", [True, False], ids=["moe", "dense"])
def test_deepseek_layer_vjp_matches_central_differences(moe):
    r = Rng(f"test/grad/deepseek_layer/{moe}")
    a = {**dims(1, 2, 2, 2), "eps": 0.01, "n_group": 2, "topk_group": 1,
         "routed_scaling_factor": 2.0}
    if moe:
        a["top_k"] = 2
    x = r.uniform((1, 3, 4))
    p = deepseek_case(r, x, a, moe=moe, bias=np.array([0.25, 0.0, -0.25, 0.0]), r_kv=3)
    _check(deepseek_layer, VJP["deepseek_layer"], {"y": r.uniform((1, 3, 4))}, {"x": x}, a, p)


def test_deepseek_decoder_only_vjp_matches_central_differences():
    r = Rng("test/grad/deepseek_decoder_only")
    a = {"pad_id": 0, "num_layers": 2, "first_k_dense_replace": 1, **dims(1, 2, 2, 2),
         "top_k": 2, "eps": 0.01}
    ids = np.array([[1, 3, 0]])
    p = model_case(r, ids, a, 2, 1, vocab=5, d=4)
    _check(deepseek_decoder_only, VJP["deepseek_decoder_only"], {"logits": r.uniform((1, 3, 5))},
           {"ids": ids}, a, p)
