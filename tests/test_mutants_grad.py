"""Planted bugs in backward passes (the NumPy backend's hand-written VJPs) that the
gradient vectors must catch at every dtype's tolerance."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention, embedding, feedforward, losses, norm, positional, rnn

from .mutants import gradient_rejections, mutant


def assert_gradient_bug_fails(backend, component):
    fails = gradient_rejections(backend, component)
    passed = [d for d, n in fails.items() if n == 0]
    assert not passed, (f"a planted backward bug in {component} passes every gradient vector "
                        f"at {passed} ({fails})")


# -- softmax ------------------------------------------------------------------------------

def softmax_no_subtraction(cot, x, mask=None, *, axis=-1):
    """dx = y * dy: the Jacobian's diagonal only, the - y y^T dy term left out."""
    y = attention.softmax(x, mask, axis=axis)
    return {"x": y * cot["y"]}, {}


def softmax_sum_last_axis(cot, x, mask=None, *, axis=-1):
    """The row sum taken over the last axis whatever the softmax axis."""
    y = attention.softmax(x, mask, axis=axis)
    return {"x": attention.softmax_backward(y, cot["y"], axis=-1)}, {}


# -- sdpa ---------------------------------------------------------------------------------

def _sdpa_parts(cot, q, k, v, mask, bias, scale):
    out, w = attention.sdpa(q, k, v, mask, bias, scale=scale)
    dW = cot["output"] @ np.swapaxes(v, -1, -2)
    if "weights" in cot:
        dW = dW + cot["weights"]
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    return w, attention.softmax_backward(w, dW), c


def sdpa_mutant(change):
    def broken(cot, q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None):
        w, dS, c = _sdpa_parts(cot, q, k, v, mask, bias, scale)
        g = {"q": c * (dS @ k), "k": c * (np.swapaxes(dS, -1, -2) @ q),
             "v": np.swapaxes(w, -1, -2) @ np.broadcast_to(cot["output"], dS.shape[:-1]
                                                            + (v.shape[-1],))}
        if bias is not None:
            g["bias"] = attention._unbroadcast(dS, np.shape(bias))
        g.update(change(w, dS, c, q, k, bias))
        g = {n: attention._unbroadcast(a, np.shape({"q": q, "k": k, "v": v, "bias": bias}[n]))
             for n, a in g.items()}
        return g, {}
    return broken


SDPA_BUGS = {
    # dq = c dS^T k: the transpose of dk's formula (a shape error unless T = S)
    "dq_transposed_dS": lambda w, dS, c, q, k, b: {"q": c * (np.swapaxes(dS, -1, -2) @ k)},
    # dk = c dS q: dS not transposed (a shape error unless T = S)
    "dk_untransposed_dS": lambda w, dS, c, q, k, b: {"k": c * (dS @ q)},
    "dq_dk_swapped": lambda w, dS, c, q, k, b: {"q": c * (dS @ q), "k": c * (
        np.swapaxes(dS, -1, -2) @ k)},
    "dq_without_scale": lambda w, dS, c, q, k, b: {"q": dS @ k},
    "dbias_dropped": lambda w, dS, c, q, k, b: {} if b is None else {"bias": np.zeros(np.shape(b))},
    "weights_cotangent_ignored": None,  # built below
}


def sdpa_weights_ignored(cot, *args, **kw):
    return attention.sdpa_vjp({"output": cot["output"]}, *args, **kw)


# -- layer_norm, rms_norm -------------------------------------------------------------------

def layer_norm_no_mean_terms(cot, x, *, eps=1e-5, variant="canonical", params):
    """dx = dz / r: the mean(dz) and z mean(dz z) terms left out (x treated as if the mean
    and the variance did not depend on it)."""
    gi, gp = norm.layer_norm_vjp(cot, x, eps=eps, variant=variant, params=params)
    c = x - x.mean(axis=-1, keepdims=True)
    if variant == "canonical":
        r = np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)
    else:
        r = np.sqrt(np.sum(c * c, axis=-1, keepdims=True) / (x.shape[-1] - 1)) + eps
    return {"x": cot["y"] * params["gamma"] / r}, gp


def layer_norm_no_variance_term(cot, x, *, eps=1e-5, variant="canonical", params):
    """dx = (dz - mean(dz)) / r: the variance's dependence on x (the z mean(dz z) term)
    left out."""
    gi, gp = norm.layer_norm_vjp(cot, x, eps=eps, variant=variant, params=params)
    dz = cot["y"] * params["gamma"]
    c = x - x.mean(axis=-1, keepdims=True)
    r = np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) if variant == "canonical" else \
        np.sqrt(np.sum(c * c, axis=-1, keepdims=True) / (x.shape[-1] - 1)) + eps
    return {"x": (dz - dz.mean(axis=-1, keepdims=True)) / r}, gp


def layer_norm_dgamma_of_x(cot, x, *, eps=1e-5, variant="canonical", params):
    """dgamma = sum dy x: the raw input where the normalised one belongs."""
    gi, gp = norm.layer_norm_vjp(cot, x, eps=eps, variant=variant, params=params)
    return gi, {**gp, "gamma": (cot["y"] * x).reshape(-1, x.shape[-1]).sum(axis=0)}


def rms_norm_no_second_term(cot, x, *, eps=1e-6, params):
    gi, gp = norm.rms_norm_vjp(cot, x, eps=eps, params=params)
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return {"x": cot["y"] * params["gamma"] / r}, gp


# -- feedforward, cross_entropy ------------------------------------------------------------

def ffn_no_activation_grad(cot, x, *, activation="relu", params):
    """dh = dy W2^T: the activation's derivative left out."""
    saved = dict(feedforward.ACTIVATION_GRADS)
    feedforward.ACTIVATION_GRADS.update(dict.fromkeys(saved, np.ones_like))
    try:
        return feedforward.feedforward_vjp(cot, x, activation=activation, params=params)
    finally:
        feedforward.ACTIVATION_GRADS.update(saved)


def ffn_dw1_transposed(cot, x, *, activation="relu", params):
    """dW1 = (x^T dh)^T reshaped back: the right numbers in the wrong layout."""
    gi, gp = feedforward.feedforward_vjp(cot, x, activation=activation, params=params)
    return gi, {**gp, "w1": gp["w1"].T.reshape(gp["w1"].shape)}


def ce_mean_over_all_tokens(cot, logits, targets, *, ignore_index=-100, label_smoothing=0.0,
                            reduction="mean"):
    """The mean divides by every token, ignored ones included."""
    gi, _ = losses.cross_entropy_vjp(cot, logits, targets, ignore_index=ignore_index,
                                     label_smoothing=label_smoothing, reduction=reduction)
    t = np.asarray(targets)
    n = np.sum(t != ignore_index)
    scale = n / t.size if reduction == "mean" and n else 1.0
    return {"logits": gi["logits"] * scale}, {}


def ce_smoothing_ignored(cot, logits, targets, *, ignore_index=-100, label_smoothing=0.0,
                         reduction="mean"):
    return losses.cross_entropy_vjp(cot, logits, targets, ignore_index=ignore_index,
                                    label_smoothing=0.0, reduction=reduction)


# == grad2: embedding, lm_head, rope, gated_feedforward, gru_cell, gru, softcap, dropout ====

def embedding_overwritten(cot, ids, *, scale=True, params):
    """dtable[ids] = dy * f: a repeated id's rows overwrite each other, the last one wins,
    instead of accumulating (scatter instead of scatter-add)."""
    table = np.asarray(params["table"])
    f = np.sqrt(table.shape[1]) if scale else 1.0
    dtable = np.zeros_like(table)
    dtable[np.asarray(ids).reshape(-1)] = np.asarray(cot["y"]).reshape(-1, table.shape[1]) * f
    return {}, {"table": dtable}


def embedding_unscaled_grad(cot, ids, *, scale=True, params):
    """The sqrt(D) factor of the forward pass left out of the backward pass."""
    return embedding.embedding_vjp(cot, ids, scale=False, params=params)


def lm_head_tied_untransposed(cot, x, *, tied=False, params):
    """Tied: dtable = x^T dlogits (the untied dW's layout) reshaped to (L, D)."""
    gi, gp = embedding.lm_head_vjp(cot, x, tied=tied, params=params)
    if tied:
        gp = {**gp, "table": gp["table"].T.reshape(gp["table"].shape)}
    return gi, gp


def rope_forward_rotation(cot, x, *, offset=0, base=10000.0, convention="interleaved"):
    """dx = R dy: the cotangent rotated forward, the inverse rotation not transposed."""
    return {"x": positional.rope(cot["y"], offset=offset, base=base, convention=convention)}, {}


def glu_no_up_path(cot, x, *, activation="silu", params):
    """dx = dg W_gate^T: the path through the up projection left out of dx."""
    gi, gp = feedforward.gated_feedforward_vjp(cot, x, activation=activation, params=params)
    x2 = np.asarray(x).reshape(-1, np.shape(x)[-1])
    du = (np.asarray(cot["y"]).reshape(-1, params["w_down"].shape[1]) @ params["w_down"].T
          * feedforward.GATES[activation](x2 @ params["w_gate"]))
    return {"x": gi["x"] - (du @ params["w_up"].T).reshape(np.shape(x))}, gp


def glu_no_gate_grad(cot, x, *, activation="silu", params):
    """dg = dh u: the gate activation's derivative left out."""
    saved = dict(feedforward.GATE_GRADS)
    feedforward.GATE_GRADS.update(dict.fromkeys(saved, np.ones_like))
    try:
        return feedforward.gated_feedforward_vjp(cot, x, activation=activation, params=params)
    finally:
        feedforward.GATE_GRADS.update(saved)


def _gru_step_bug(kind):
    """rnn._step_vjp with the reset gate's backward wrong: 'r_dropped' (da_r = 0, r treated
    as a constant); 'reset_before' (the gradient of n = tanh(x W_in + b_in + (r h) W_hn +
    b_hn), reset applied before the hidden matmul: dW_hn = (r h)^T da_n, dr = h (da_n W_hn^T))."""
    def step(x, h, w, dh_next):
        hid = h.shape[-1]
        gi, gh = x @ w.w_ih + w.b_ih, h @ w.w_hh + w.b_hh
        r = rnn._sigmoid(gi[:, :hid] + gh[:, :hid])
        z = rnn._sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
        n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
        da_n = dh_next * (1 - z) * (1 - n * n)
        da_z = dh_next * (h - n) * z * (1 - z)
        w_hn = w.w_hh[:, 2 * hid:]
        if kind == "r_dropped":
            da_r = np.zeros_like(da_n)
            dh_n, dw_hn = da_n * r @ w_hn.T, h.T @ (r * da_n)
        else:
            da_r = (da_n @ w_hn.T) * h * r * (1 - r)
            dh_n, dw_hn = (da_n @ w_hn.T) * r, (r * h).T @ da_n
        dg_i = np.concatenate([da_r, da_z, da_n], axis=-1)
        dg_rz = np.concatenate([da_r, da_z], axis=-1)
        dh = dh_next * z + dg_rz @ w.w_hh[:, :2 * hid].T + dh_n
        grads = rnn.GRUWeights(x.T @ dg_i, np.concatenate([h.T @ dg_rz, dw_hn], axis=-1),
                               dg_i.sum(axis=0), np.concatenate([dg_rz, da_n], -1).sum(axis=0))
        return dg_i @ w.w_ih.T, dh, grads
    return step


def gru_mutant(name, kind):
    def broken(cot, *args, **kw):
        saved = rnn._step_vjp
        rnn._step_vjp = _gru_step_bug(kind)
        try:
            return getattr(rnn, f"{name}_vjp")(cot, *args, **kw)
        finally:
            rnn._step_vjp = saved
    return broken


def gru_no_carry(cot, x, h0=None, *, params):
    """Truncated backpropagation: each step's state gradient is not carried to the step
    before (dh_{t-1} = 0 except through doutputs)."""
    saved = rnn._step_vjp

    def step(*a):
        dx, dh, g = saved(*a)
        return dx, np.zeros_like(dh), g
    rnn._step_vjp = step
    try:
        return rnn.gru_vjp(cot, x, h0, params=params)
    finally:
        rnn._step_vjp = saved


def softcap_cap_outside(cot, x, *, cap):
    """dx = dy (1 - tanh^2(x)): the 1/cap inside tanh's argument forgotten."""
    t = np.tanh(np.asarray(x))
    return {"x": np.asarray(cot["y"]) * (1 - t * t)}, {}


def dropout_unscaled_grad(cot, x, keep_mask=None, *, p, seed=None):
    """dx = keep dy: the 1 / (1 - p) of inverted dropout left out of the backward pass."""
    return {"x": np.where(keep_mask, cot["y"], 0) if p else np.asarray(cot["y"])}, {}


def entropy_no_plus_one(cot, weights, *, axis=-1):
    """dw = -dH ln w: the + 1 (d(w ln w)/dw = ln w + 1) left out."""
    w = np.asarray(weights)
    dh = np.expand_dims(np.asarray(cot["entropy"]), axis)
    return {"weights": np.where(w > 0, -dh * np.log(np.where(w > 0, w, 1)), 0)}, {}


def entropy_unguarded(cot, weights, *, axis=-1):
    """dw = -dH (ln w + 1) everywhere: +inf at a zero weight."""
    w = np.asarray(weights)
    dh = np.expand_dims(np.asarray(cot["entropy"]), axis)
    return {"weights": -dh * (np.log(w) + 1)}, {}


GRAD2_BUGS = {
    "attention_entropy": {"no_plus_one": entropy_no_plus_one, "unguarded": entropy_unguarded},
    "embedding": {"overwritten_not_accumulated": embedding_overwritten,
                  "unscaled_grad": embedding_unscaled_grad,
                  "tied_untransposed": lm_head_tied_untransposed},
    "rope": {"inverse_not_transposed": rope_forward_rotation},
    "gated_feedforward": {"no_up_path": glu_no_up_path, "no_gate_grad": glu_no_gate_grad},
    "gru_cell": {"reset_r_dropped": gru_mutant("gru_cell", "r_dropped"),
                 "reset_before_matmul": gru_mutant("gru_cell", "reset_before")},
    "gru": {"reset_r_dropped": gru_mutant("gru", "r_dropped"),
            "reset_before_matmul": gru_mutant("gru", "reset_before"),
            "no_carry": gru_no_carry},
    "softcap": {"cap_outside": softcap_cap_outside},
    "dropout": {"unscaled_grad": dropout_unscaled_grad},
}
GRAD2_FUNCTIONS = {("embedding", "unscaled_grad"): "embedding",
                   ("embedding", "overwritten_not_accumulated"): "embedding",
                   ("embedding", "tied_untransposed"): "lm_head"}

# == end grad2 ===============================================================================


BUGS = {
    "softmax": {"no_subtraction": softmax_no_subtraction, "sum_last_axis": softmax_sum_last_axis},
    "sdpa": {**{n: sdpa_mutant(f) for n, f in SDPA_BUGS.items() if f is not None},
             "weights_cotangent_ignored": sdpa_weights_ignored},
    "layer_norm": {"no_mean_terms": layer_norm_no_mean_terms,
                   "no_variance_term": layer_norm_no_variance_term,
                   "dgamma_of_x": layer_norm_dgamma_of_x},
    "rms_norm": {"no_second_term": rms_norm_no_second_term},
    "feedforward": {"no_activation_grad": ffn_no_activation_grad,
                    "dw1_transposed": ffn_dw1_transposed},
    "cross_entropy": {"mean_over_all_tokens": ce_mean_over_all_tokens,
                      "smoothing_ignored": ce_smoothing_ignored},
}
BUGS.update(GRAD2_BUGS)
CASES = [(c, n) for c, bugs in BUGS.items() for n in bugs]


@pytest.mark.parametrize("component, bug", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_backward_bug_fails_at_every_dtype(component, bug):
    with np.errstate(all="ignore"):
        name = GRAD2_FUNCTIONS.get((component, bug), component)
        assert_gradient_bug_fails(mutant(**{f"{name}_vjp": BUGS[component][bug]}), component)


@pytest.mark.parametrize("component", list(BUGS))
def test_correct_backward_passes(component):
    assert gradient_rejections(mutant(), component) == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


def test_a_backend_without_vjp_is_missing_not_passing():
    """A backend with no hand-written backward (and no autodiff) reports 'missing'."""
    from attnspec.backends.numpy import NumpyBackend
    from attnspec.conformance.runner import run_gradient_vector
    from attnspec.spec.errors import NotImplementedComponent
    from attnspec.spec.vectors import default_spec

    class NoGradients(NumpyBackend):
        def function(self, name, module):
            if name.endswith("_vjp"):
                raise NotImplementedComponent(f"no {name}")
            return super().function(name, module)

    spec = default_spec()
    grads = [v for v in spec.vectors if v.expect == "gradient"]
    assert grads
    for v in grads:
        assert run_gradient_vector(NoGradients(), spec, v, "float64", "cpu").status == "missing"
