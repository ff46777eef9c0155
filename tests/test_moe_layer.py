"""Planted bugs in moe and moe_aux_loss (forward and backward) that the vectors must catch at
every dtype; each sketch without its bug passes every vector (so a rejection is the bug's)."""

import functools

import numpy as np
import pytest
from attnspec.backends.numpy import moe as np_moe
from attnspec.backends.numpy.feedforward import gated_feedforward

from .mutants import assert_rejected, gradient_rejections, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails

GLU = ("w_gate", "w_up", "w_down")


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def _moe(x, *, params, bug, **router):
    """The layer token by token: y_n = sum_j w_nj FFN_{I_nj}(x_n) + gate_n FFN_shared(x_n)."""
    x = np.asarray(x, np.float64)                                         # (N, D)
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    z = x @ p["router.w"]                                                 # (N, E)
    w, idx = np_moe.moe_router(z, p.get("router.correction_bias"), **router)
    y = np.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(idx.shape[1]):
            expert = {g: p[f"experts.{g}"][idx[n, j]] for g in GLU}
            if bug == "weights_before_expert":
                y[n] += gated_feedforward(w[n, j] * x[n], params=expert)
            else:
                y[n] += w[n, j] * gated_feedforward(x[n], params=expert)
    if "shared.w_gate" in p:
        s = gated_feedforward(x, params={g: p[f"shared.{g}"] for g in GLU})
        if "shared_gate.w" in p and bug != "shared_gate_dropped":
            s = s * _sigmoid(x @ p["shared_gate.w"])
        y = y + s
    return y, z


def _aux(router_logits, mask=None, *, top_k, bug):
    z = np.asarray(router_logits, np.float64)                             # (L, N, E)
    layers, n, e = z.shape
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    m = np.ones(n) if mask is None else np.asarray(mask, np.float64)
    idx = np.argsort(-p, axis=-1, kind="stable")[..., :1 if bug == "top_1_count_only" else top_k]
    chosen = np.zeros_like(p)
    np.put_along_axis(chosen, idx, 1.0, axis=-1)
    if bug == "mask_ignored":
        m = np.ones(n)
    if bug == "per_layer_mean":
        f = (chosen * m[:, None]).sum(1) / m.sum()                        # (L, E)
        big_p = (p * m[:, None]).sum(1) / m.sum()
        return np.asarray(e * (f * big_p).sum(-1).mean())
    total = layers * m.sum()
    f = (chosen * m[:, None]).sum((0, 1)) / total
    big_p = (p * m[:, None]).sum((0, 1)) / total
    return np.asarray(e * (f * big_p).sum())


MOE_BUGS = ("shared_gate_dropped", "weights_before_expert")
AUX_BUGS = ("top_1_count_only", "per_layer_mean", "mask_ignored")


@pytest.mark.parametrize("bug", MOE_BUGS)
def test_moe_mutant_is_rejected(bug):
    assert_rejected(mutant(moe=functools.partial(_moe, bug=bug)), "moe")


@pytest.mark.parametrize("bug", AUX_BUGS)
def test_moe_aux_loss_mutant_is_rejected(bug):
    assert_rejected(mutant(moe_aux_loss=functools.partial(_aux, bug=bug)), "moe_aux_loss")


@pytest.mark.parametrize("component, fn", [("moe", _moe), ("moe_aux_loss", _aux)])
def test_moe_sketch_without_a_bug_passes(component, fn):
    fails = rejections(mutant(**{component: functools.partial(fn, bug=None)}), component)
    assert fails == dict.fromkeys(fails, 0)


# -- backward ---------------------------------------------------------------------------------

def vjp_router_logits_cotangent_dropped(cotangents, x, **call):
    """router_logits' own cotangent not added into dz (only the weights' path)."""
    return np_moe.moe_vjp({"y": cotangents["y"]}, x, **call)


def vjp_shared_gate_not_differentiated(cotangents, x, **call):
    """The shared expert's gate treated as a constant: no gradient for shared_gate.w or
    through it into x."""
    gi, gp = np_moe.moe_vjp(cotangents, x, **call)
    if "shared_gate.w" not in call["params"]:
        return gi, gp
    p = {k: np.asarray(v) for k, v in call["params"].items()}
    dy = np.asarray(cotangents["y"])
    s = gated_feedforward(np.asarray(x), params={g: p[f"shared.{g}"] for g in GLU})
    g = _sigmoid(np.asarray(x) @ p["shared_gate.w"])
    du = (dy * s).sum(-1, keepdims=True) * g * (1 - g)
    gi = {"x": gi["x"] - du @ p["shared_gate.w"].T}
    return gi, {**gp, "shared_gate.w": np.zeros_like(gp["shared_gate.w"])}


def vjp_aux_over_all_rows(cotangents, router_logits, mask=None, *, top_k):
    """The mask applied to f and P but not to the backward (padded rows get a gradient)."""
    gi, gp = np_moe.moe_aux_loss_vjp(cotangents, router_logits, None, top_k=top_k)
    if mask is None:
        return gi, gp
    m = np.asarray(mask)
    scale = m.size / m.sum()
    return {"router_logits": gi["router_logits"] * scale}, gp


GRAD_BUGS = {("moe", "router_logits_cotangent_dropped"): vjp_router_logits_cotangent_dropped,
             ("moe", "shared_gate_not_differentiated"): vjp_shared_gate_not_differentiated,
             ("moe_aux_loss", "mask_ignored_in_backward"): vjp_aux_over_all_rows}


@pytest.mark.parametrize("component, bug", sorted(GRAD_BUGS))
def test_moe_backward_bug_fails_at_every_dtype(component, bug):
    assert_gradient_bug_fails(mutant(**{f"{component}_vjp": GRAD_BUGS[component, bug]}),
                              component)


@pytest.mark.parametrize("component", ["moe", "moe_aux_loss"])
def test_moe_correct_backward_passes(component):
    fails = gradient_rejections(mutant(), component)
    assert fails == dict.fromkeys(fails, 0)
