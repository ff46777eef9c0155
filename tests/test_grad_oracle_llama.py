"""The oracle's llama VJPs (spec/oracle/llama.py) against 50-digit central differences of
the forward oracle, as tests/test_grad_oracle.py checks every other VJP: the gradient of x
and of every parameter path, through RMSNorm, RoPE "half", grouped-query sdpa and SwiGLU."""

import numpy as np
import pytest
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.llama import layer_params, model_params
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.llama import llama_decoder_only, llama_layer

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


def _padding(b, t, hidden):
    """(B, 1, 1, T), True = may attend, False at the (row, key) pairs in ``hidden``."""
    mask = np.ones((b, 1, 1, t), dtype=bool)
    for row, key in hidden:
        mask[row, 0, 0, key] = False
    return mask


LAYER = {
    # H = 2 query heads on H_kv = 1, window 2, RoPE offset 3; row 1 hides key 0, so its
    # query 0 sees no key at all (a zero attention output, no gradient through the scores)
    "gqa-window-masked-row": ({"num_heads": 2, "num_kv_heads": 1, "window": 2, "offset": 3,
                               "rope_base": 100.0, "eps": 0.01}, (2, 1, 2, 3),
                              _padding(2, 3, [(1, 0)])),
    "defaults": ({"num_heads": 2}, (2, 2, 2, 3), None),  # H_kv = H, unbounded causal, offset 0
}


@pytest.mark.parametrize("case", sorted(LAYER))
def test_llama_layer_vjp_matches_central_differences(case):
    attrs, (h, h_kv, k, f), mask = LAYER[case]
    r = Rng(f"test/grad/llama_layer/{case}")
    d = 4
    inputs = {"x": r.uniform((2, 3, d))}
    if mask is not None:
        inputs["mask"] = mask
    _check(llama_layer, VJP["llama_layer"], {"y": r.uniform((2, 3, d))}, inputs, attrs,
           layer_params(r, d, h, h_kv, k, f))


def test_llama_decoder_only_vjp_matches_central_differences():
    """Two layers, id 2 twice (its embedding row gets the sum), pad_id 0 in row 1."""
    r = Rng("test/grad/llama_decoder_only")
    _check(llama_decoder_only, VJP["llama_decoder_only"], {"logits": r.uniform((2, 3, 5))},
           {"ids": np.array([[1, 2, 2], [3, 0, 4]])},
           {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "window": 2},
           model_params(r, 2, 4, 2, 1, 3, 5))


def test_rope_rotated_forward_in_the_backward_is_caught(monkeypatch):
    """The check can fail: RoPE's backward rotating by +angle (R dy) instead of R^T dy."""
    from attnspec.spec.oracle import llama

    monkeypatch.setattr(llama, "rope_vjp",
                        lambda cot, x, **kw: ({"x": llama.rope(cot["y"], **kw)["y"]}, {}))
    attrs, (h, h_kv, k, f), mask = LAYER["gqa-window-masked-row"]
    r = Rng("test/grad/llama_layer/rope-forward")
    with pytest.raises(AssertionError):
        _check(llama_layer, VJP["llama_layer"], {"y": r.uniform((2, 3, 4))},
               {"x": r.uniform((2, 3, 4)), "mask": mask}, attrs, layer_params(r, 4, h, h_kv, k, f))
