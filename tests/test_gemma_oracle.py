"""The Gemma oracle's VJPs (rms_norm with unit_offset, gemma_layer) against 50-digit central
differences of the forward oracle (tests/test_grad_oracle.py's check)."""

import numpy as np
import pytest
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.gemma import layer_params
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.gemma import gemma_layer
from attnspec.spec.oracle.rms_norm import rms_norm

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


def test_rms_norm_unit_offset_vjp_matches_central_differences():
    r = Rng("test/grad/rms_norm-unit-offset")
    _check(rms_norm, VJP["rms_norm"], {"y": r.uniform((3, 4))}, {"x": r.uniform((3, 4))},
           {"eps": 0.01, "unit_offset": True}, {"gamma": r.uniform((4,), -0.5, 0.5)})


def test_gemma_layer_vjp_matches_central_differences():
    """D = 4, H = 2 on H_kv = 1, K = 2, F = 3, T = 3: every path at once (QK-norm, scalar,
    softcap, window, a padding mask)."""
    r = Rng("test/grad/gemma_layer")
    mask = np.ones((1, 1, 1, 3), dtype=bool)
    mask[0, 0, 0, 1] = False
    attrs = {"num_heads": 2, "num_kv_heads": 1, "eps": 0.01, "window": 2, "offset": 1,
             "query_pre_attn_scalar": 3.0, "softcap": 1.5, "qk_norm": True}
    _check(gemma_layer, VJP["gemma_layer"], {"y": r.uniform((1, 3, 4))},
           {"x": r.uniform((1, 3, 4)), "mask": mask}, attrs,
           layer_params(r, 4, 2, 1, 2, 3, qk_norm=True))


def test_gemma_decoder_only_vjp_matches_central_differences():
    """N = 2 (window on layer 0 only), D = 4, vocabulary 5, T = 3, final and attention caps:
    the tied table's gradient sums the head's and the embedding's."""
    from attnspec.spec.cases.gemma import model_params
    from attnspec.spec.oracle.gemma import gemma_decoder_only

    r = Rng("test/grad/gemma_decoder_only")
    attrs = {"pad_id": 0, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "eps": 0.01,
             "window": 2, "softcap": 1.5, "final_softcap": 2.0}
    _check(gemma_decoder_only, VJP["gemma_decoder_only"], {"logits": r.uniform((1, 3, 5))},
           {"ids": np.array([[1, 3, 0]])}, attrs, model_params(r, 2, 4, 2, 1, 2, 3, 5))
