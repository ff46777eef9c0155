"""The mla oracle: its VJP against 50-digit central differences (tests/test_grad_oracle.py's
check), with and without a query latent, and its softmax scale against yarn_get_mscale."""

import math

import numpy as np
import pytest
from attnspec.spec.oracle.mla import mla, softmax_scale

from .test_grad_oracle import VJP, _check, _working_precision  # noqa: F401 (autouse)


def _params(r, d, h, dn, dr, dv, rank, r_q):
    w = lambda *s: r.uniform(-0.6, 0.6, s)  # noqa: E731
    p = {"w_kv_a": w(d, rank + dr), "kv_norm.gamma": 1 + w(rank), "w_kv_b": w(rank, h * (dn + dv)),
         "w_o": w(h * dv, d)}
    if r_q:
        return {**p, "w_q_a": w(d, r_q), "q_norm.gamma": 1 + w(r_q), "w_q_b": w(r_q, h * (dn + dr))}
    return {**p, "w_q": w(d, h * (dn + dr))}


@pytest.mark.parametrize("r_q, convention", [(None, "interleaved"), (2, "half")])
def test_mla_vjp_matches_central_differences(r_q, convention):
    r = np.random.default_rng(3)
    attrs = {"num_heads": 2, "qk_nope_head_dim": 1, "qk_rope_head_dim": 2, "v_head_dim": 2,
             "rope_convention": convention, "offset": 2, "yarn_factor": 4.0, "mscale_all_dim": 0.5,
             "eps": 0.1}
    mask = np.array([[[[True, False, True]]]])
    _check(mla, VJP["mla"], {"y": r.uniform(-1, 1, (1, 3, 3))},
           {"x": r.uniform(-1, 1, (1, 3, 3)), "mask": mask}, attrs,
           _params(r, 3, 2, 1, 2, 2, 2, r_q))


def test_softmax_scale_squares_yarn_mscale():
    m = 0.1 * 1.0 * math.log(40.0) + 1  # transformers' yarn_get_mscale(40, 1)
    assert float(softmax_scale(64, 128 - 64, 40.0, 1.0)) == pytest.approx(m * m / math.sqrt(128), rel=1e-15)
    assert float(softmax_scale(4, 4, 1.0, 1.0)) == pytest.approx(8 ** -0.5, rel=1e-15)
    assert float(softmax_scale(4, 4, 40.0, 0.0)) == pytest.approx(8 ** -0.5, rel=1e-15)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 16,
     "mscale": 1.0, "mscale_all_dim": 1.0, "attention_factor": 0.75},
    {"rope_type": "linear", "factor": 4.0},
], ids=["yarn", "linear"])
def test_mla_vjp_with_rope_scaling_matches_central_differences(scaling):
    """rope_scaling: the rope VJP carries the attention factor, the scale m^2 from it."""
    r = np.random.default_rng(5)
    attrs = {"num_heads": 2, "qk_nope_head_dim": 1, "qk_rope_head_dim": 4, "v_head_dim": 2,
             "rope_convention": "interleaved", "offset": 2, "rope_base": 10.0,
             "rope_scaling": scaling, "eps": 0.1}
    _check(mla, VJP["mla"], {"y": r.uniform(-1, 1, (1, 3, 3))},
           {"x": r.uniform(-1, 1, (1, 3, 3))}, attrs, _params(r, 3, 2, 1, 4, 2, 2, None))


def test_rope_scaling_takes_the_mscale_from_rope_parameters():
    """transformers' yarn_apply_mscale: m from rope_parameters' factor and mscale_all_dim
    when rope_type is not default and mscale_all_dim is set; otherwise m = 1."""
    from attnspec.spec.oracle.mla import scale_of
    m = 0.1 * 0.707 * math.log(40.0) + 1
    v3 = {"rope_type": "yarn", "factor": 40.0, "mscale_all_dim": 0.707}
    assert float(scale_of(4, 4, 1.0, 0.0, v3)) == pytest.approx(m * m / math.sqrt(8), rel=1e-15)
    for sc in ({"rope_type": "yarn", "factor": 40.0, "mscale": 1.0},
               {"rope_type": "default", "mscale_all_dim": 1.0, "factor": 40.0},
               {"rope_type": "linear", "factor": 4.0}):
        assert float(scale_of(4, 4, 1.0, 0.0, sc)) == pytest.approx(8 ** -0.5, rel=1e-15)
