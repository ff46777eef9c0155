"""The oracle of moe and moe_aux_loss: their VJPs against 50-digit central differences of
the forward (the routing is locally constant on the cases' well-separated logits), and the
aux loss's normalisation against transformers' formula written out by hand."""

import numpy as np
import pytest
from attnspec.spec.cases import moe as cases
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.moe_aux_loss import levels
from attnspec.spec.oracle.core import precision, tofloat
from attnspec.spec.oracle.moe_layer import moe, moe_aux_loss, moe_aux_loss_vjp, moe_vjp

from .test_grad_oracle import _check


@pytest.mark.parametrize("variant", ["mixtral", "qwen", "deepseek"])
def test_moe_oracle_vjp_matches_central_differences(variant):
    r = Rng(f"test/grad/moe/{variant}")
    attrs = {"mixtral": {"top_k": 2, "renormalize": True}, "qwen": {"top_k": 2},
             "deepseek": {"top_k": 2, "scoring": "sigmoid", "renormalize": True, "n_group": 2,
                          "topk_group": 1, "routed_scaling_factor": 2.0}}[variant]
    x, p = cases.routed(r, 2, 3, 4, 2, attrs)
    if variant != "mixtral":
        p.update(cases.shared(r, 3, 2, gate=variant == "qwen"))
    cot = {"y": r.uniform((2, 3)), "router_logits": r.uniform((2, 4))}
    with precision():
        _check(moe, moe_vjp, cot, {"x": x}, attrs, p)


@pytest.mark.parametrize("mask", [None, [True, False, True]])
def test_moe_aux_loss_oracle_vjp_matches_central_differences(mask):
    r = Rng("test/grad/moe_aux_loss")
    inputs = {"router_logits": levels(r, (2, 3, 4))}
    if mask is not None:
        inputs["mask"] = np.array(mask)
    with precision():
        _check(moe_aux_loss, moe_aux_loss_vjp, {"loss": np.array(0.75)}, inputs, {"top_k": 2})


def _transformers_formula(z, mask, top_k):
    """load_balancing_loss_func (transformers 5) transcribed in NumPy: layers concatenated,
    one-hot of the top-k (N, k, E), masked means over rows, sum, times E."""
    layers, n, e = z.shape
    flat = z.reshape(-1, e)
    p = np.exp(flat - flat.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
    one_hot = np.eye(e)[top]                                             # (L N, k, E)
    m = np.tile(np.ones(n) if mask is None else np.asarray(mask, float), layers)  # (L N,)
    tokens_per_expert = (one_hot * m[:, None, None]).sum(0) / m.sum()    # (k, E)
    prob_per_expert = (p * m[:, None]).sum(0) / m.sum()                  # (E,)
    return e * (tokens_per_expert * prob_per_expert[None]).sum()


@pytest.mark.parametrize("mask", [None, [True, True, False, True]])
def test_moe_aux_loss_oracle_is_transformers_normalisation(mask):
    z = levels(Rng("test/moe_aux_loss/hf"), (3, 4, 6))
    got = float(tofloat(moe_aux_loss(z, None if mask is None else np.array(mask),
                                     top_k=2)["loss"]))
    assert got == pytest.approx(_transformers_formula(z, mask, 2), rel=1e-12)
