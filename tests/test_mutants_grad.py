"""Planted bugs in backward passes (the NumPy backend's hand-written VJPs) that the
gradient vectors must catch at every dtype's tolerance."""

import numpy as np
import pytest
from attnspec.backends.numpy import (
    alignment,
    attention,
    embedding,
    feedforward,
    losses,
    multihead,
    norm,
    positional,
    rnn,
)

from .mutants import gradient_rejections, mutant


def assert_gradient_bug_fails(backend, component):
    fails = gradient_rejections(backend, component, until_each=True)
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

def _sdpa_parts(cot, q, k, v, mask, bias, scale, softcap=None):
    out, w = attention.sdpa(q, k, v, mask, bias, scale=scale, softcap=softcap)
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


# -- composites (the tape of backends/composite/tape.py, or a hand-written composite VJP) --

def _scoped(params, name):
    return {k[len(name) + 1:]: a for k, a in params.items() if k.startswith(name + ".")}


def residual_norm_at_x(cot, x, *, position="post", eps=1e-5, activation="relu", params):
    """post-norm: the LayerNorm's backward evaluated at x, not at its input x + f(x)."""
    from attnspec.backends.composite.tape import composite_vjp

    if position == "pre":
        return composite_vjp(mutant(), "residual", dict(x=x, position=position, eps=eps,
                                                        activation=activation, params=params),
                             cot)
    ffn, lnp = _scoped(params, "ffn"), _scoped(params, "norm")
    gs, gn = norm.layer_norm_vjp(cot, x, eps=eps, params=lnp)
    gx, gf = feedforward.feedforward_vjp({"y": gs["x"]}, x, activation=activation, params=ffn)
    return {"x": gs["x"] + gx["x"]}, {**{f"ffn.{k}": g for k, g in gf.items()},
                                      **{f"norm.{k}": g for k, g in gn.items()}}


def residual_order_swapped(cot, x, *, position="post", eps=1e-5, activation="relu", params):
    """The other arrangement's backward: post-norm differentiated as pre-norm and back."""
    from attnspec.backends.composite.tape import composite_vjp

    other = {"post": "pre", "pre": "post"}[position]
    return composite_vjp(mutant(), "residual", dict(x=x, position=other, eps=eps,
                                                    activation=activation, params=params),
                         cot)

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
    "residual": {"norm_at_x": residual_norm_at_x, "order_swapped": residual_order_swapped},
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


# -- the composite tape: a bug in the shared mechanism fails every composite's vectors ----

TAPE_BUGS = {
    # dout reaches the second operand only: the skip path of x + f(x) lost
    "skip_path_lost": lambda add: lambda self, shapes, nodes, out: add(
        self, shapes, [None, *nodes[1:]], out),
    # dout reaches the skip path only: the sublayer's path of x + f(x) lost
    "sublayer_path_lost": lambda add: lambda self, shapes, nodes, out: add(
        self, shapes, [nodes[0], *[None] * (len(nodes) - 1)], out),
}


COMPOSITES = ["residual", "encoder_layer", "decoder_layer", "encoder", "decoder",
              "encoder_only", "decoder_only", "transformer", "decoder_only_loss",
              "seq2seq_attention"]


@pytest.mark.parametrize("bug", sorted(TAPE_BUGS))
@pytest.mark.parametrize("component", [c for c in COMPOSITES if c != "seq2seq_attention"])
def test_tape_bug_fails_at_every_dtype(monkeypatch, bug, component):
    from attnspec.backends.composite import tape

    monkeypatch.setattr(tape.Tape, "add", TAPE_BUGS[bug](tape.Tape.add))
    assert_gradient_bug_fails(mutant(), component)


@pytest.mark.parametrize("component", ["decoder_only", "decoder_only_loss"])
def test_broadcast_add_gradient_not_summed_fails(monkeypatch, component):
    """e + pos.table[0..T-1]: the position table's gradient taken from batch row 0 instead
    of summed over the batch."""
    from attnspec.backends.composite import tape

    def first_row(g, shape):
        g = g[(0,) * (g.ndim - len(shape))]
        return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)

    monkeypatch.setattr(tape, "_unbroadcast", first_row)
    assert_gradient_bug_fails(mutant(), component)


@pytest.mark.parametrize("component", COMPOSITES)
def test_correct_composite_backward_passes(component):
    assert gradient_rejections(mutant(), component) == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


def _swap_layers(name):
    """The composite's VJP with the gradients of layers.0.* and layers.1.* exchanged."""
    from attnspec.backends.composite.tape import composite_vjp

    def broken(cot, **call):
        gi, gp = composite_vjp(mutant(), name, call, cot)
        swap = {k: k.replace("layers.0.", "layers.1.") if "layers.0." in k
                else k.replace("layers.1.", "layers.0.") for k in gp}
        if all(v in gp for v in swap.values()):
            gp = {k: gp[swap[k]] for k in gp}
        return gi, gp
    return broken


def mha_value_path_dropped(cot, query, key, value, mask=None, *, num_heads, params,
                           num_kv_heads=None):
    """dvalue = 0: memory (key and value of the cross-attention) gets dkey only."""
    gi, gp = multihead.mha_vjp(cot, query, key, value, mask, num_heads=num_heads,
                               params=params, num_kv_heads=num_kv_heads)
    return {**gi, "value": np.zeros_like(gi["value"])}, gp


def lm_head_tied_grad_dropped(cot, x, *, tied=False, params):
    """Tied: the LM head's dtable left out, the embedding's rows only."""
    gi, gp = embedding.lm_head_vjp(cot, x, tied=tied, params=params)
    return gi, ({**gp, "table": np.zeros_like(gp["table"])} if tied else gp)


COMPOSITE_BUGS = {
    ("encoder", "layers_swapped"): {"encoder_vjp": _swap_layers("encoder")},
    ("decoder", "layers_swapped"): {"decoder_vjp": _swap_layers("decoder")},
    ("decoder_layer", "memory_value_path_dropped"): {"mha_vjp": mha_value_path_dropped},
    ("encoder_layer", "self_attention_value_path_dropped"): {"mha_vjp": mha_value_path_dropped},
    ("transformer", "tied_head_grad_dropped"): {"lm_head_vjp": lm_head_tied_grad_dropped},
    ("decoder_only_loss", "mean_over_all_tokens"): {"cross_entropy_vjp":
                                                     ce_mean_over_all_tokens},
    # (label smoothing ignored moves a training step's gradients by less than bfloat16's
    # tolerance; cross_entropy's own gradient vectors catch it at every dtype)
}


@pytest.mark.parametrize("component, bug", list(COMPOSITE_BUGS),
                         ids=[f"{c}-{b}" for c, b in COMPOSITE_BUGS])
def test_composite_backward_bug_fails_at_every_dtype(component, bug):
    """A kernel VJP or the composite's own, planted through the backend's function lookup
    (the tape finds kernel VJPs there)."""
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(**COMPOSITE_BUGS[component, bug]), component)

# -- attention kernels: sdpa (num_kv_heads, softcap), mha, self_attention, additive_attention,
# luong_attention, relative_attention -----------------------------------------------------------

def sdpa_gqa_mutant(reduce):
    """dk, dv of a kv head from its group's (..., group, S, .) per-query-head gradients."""
    def broken(cot, q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
        if num_kv_heads is None:
            return attention.sdpa_vjp(cot, q, k, v, mask, bias, scale=scale, softcap=softcap)
        kr, vr = attention.repeat_kv(q, k, v, num_kv_heads)
        g, gp = attention.sdpa_vjp(cot, q, kr, vr, mask, bias, scale=scale, softcap=softcap)
        for name, x in (("k", k), ("v", v)):
            a = g[name]
            kv = np.shape(x)[-3]
            g[name] = reduce(a.reshape(a.shape[:-3] + (kv, a.shape[-3] // kv) + a.shape[-2:]))
        return g, gp
    return broken


def sdpa_softcap_mutant(which):
    """ds = dS (tanh' left out) in dq, dk ("no_tanh_grad"), or dbias = ds ("dbias_capped")."""
    def broken(cot, q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
        g, gp = attention.sdpa_vjp(cot, q, k, v, mask, bias, scale=scale,
                                   num_kv_heads=num_kv_heads, softcap=softcap)
        if softcap is None:
            return g, gp
        kr, vr = (k, v) if num_kv_heads is None else attention.repeat_kv(q, k, v, num_kv_heads)
        w, dS, c = _sdpa_parts(cot, q, kr, vr, mask, bias, scale, softcap)
        t2 = np.tanh((q @ np.swapaxes(kr, -1, -2)) * c / softcap) ** 2
        if which == "no_tanh_grad":
            g["q"] = attention._unbroadcast(c * (dS @ kr), q.shape)
        elif bias is not None:
            g["bias"] = attention._unbroadcast(dS * (1 - t2), np.shape(bias))
        return g, gp
    return broken


def patched(module, name, replacement, vjp):
    """``vjp`` run with ``module.name`` replaced: a bug planted in one step of a backward."""
    def broken(*args, **kw):
        saved = getattr(module, name)
        setattr(module, name, replacement)
        try:
            return vjp(*args, **kw)
        finally:
            setattr(module, name, saved)
    return broken


def linear_vjp_mutant(bad_param, change):
    """multihead._linear_vjp with ``change(x, dy, grad)`` applied to parameter ``bad_param``'s
    gradient."""
    right = multihead._linear_vjp

    def bad(x, p, w, b, dy, grads):
        dx = right(x, p, w, b, dy, grads)
        if bad_param in grads and bad_param in (w, b):
            grads[bad_param] = change(x, dy, grads[bad_param])
        return dx
    return bad


def sa_dx_from_query_only(cot, x, mask=None, *, scale=None, params):
    """dx = dQ W_Q^T: x treated as if it fed the query projection alone."""
    gi, gp = multihead.self_attention_vjp(cot, x, mask, scale=scale, params=params)
    q, k, v = (multihead._project(x, params, f"w_{n}", f"b_{n}") for n in "qkv")
    g, _ = attention.sdpa_vjp(cot, q, k, v, mask, scale=scale)
    return {"x": g["q"] @ params["w_q"].T}, gp


def weights_cotangent_ignored(vjp):
    def broken(cot, *args, **kw):
        return vjp({n: c for n, c in cot.items() if n != "weights"}, *args, **kw)
    return broken


def tanh_score_vjp_without_tanh_grad(query, keys, w_q, w_k, v, de):
    """du = de v: the 1 - h^2 factor left out."""
    h = np.tanh((query @ w_q)[:, :, None, :] + (keys @ w_k)[:, None, :, :])
    du = de[..., None] * v * np.ones_like(h)
    dq_proj, dk_proj = du.sum(axis=2), du.sum(axis=1)
    return (dq_proj @ w_q.T, dk_proj @ w_k.T, np.einsum("bti,bta->ia", query, dq_proj),
            np.einsum("bsj,bsa->ja", keys, dk_proj), np.einsum("bts,btsa->a", de, h))


def keys_without_values_path(dq, dk, dvalues, values_given):
    """values omitted: the keys' gradient from the scores only (dvalues dropped)."""
    return {"query": dq, "keys": dk, **({"values": dvalues} if values_given else {})}


def luong_general_mutant(which):
    def broken(cot, query, keys, values=None, mask=None, *, score="dot", params=None):
        g, gp = alignment.luong_attention_vjp(cot, query, keys, values, mask, score=score,
                                              params=params)
        if score == "general" and which == "dw_transposed":
            gp["w"] = gp["w"].T.reshape(gp["w"].shape)
        elif score == "general":  # dk = de^T q W^T (a shape error unless Dq = Dk)
            w = params["w"]
            vals = keys if values is None else values
            de, dvalues = alignment._attend_vjp(cot, (query @ w) @ np.swapaxes(keys, -1, -2),
                                                vals, mask)
            dk = np.swapaxes(de, -1, -2) @ (query @ w.T)
            g["keys"] = dk if values is not None else dk + dvalues
        return g, gp
    return broken


def scatter_overwrite(table, rows, g):
    """Assignment where a sum belongs: a table row shared by several (i, j) keeps one pair's
    gradient."""
    out = np.zeros_like(table)
    out[rows] = g
    return out


def relative_without_a_k_in_dq(cot, q, k, v, mask=None, *, max_distance, scale=None, params):
    """dq_i = c sum_j de_ij k_j: the a^K_ij term left out."""
    g, gp = positional.relative_attention_vjp(cot, q, k, v, mask, max_distance=max_distance,
                                              scale=scale, params=params)
    z, alpha = positional.relative_attention(q, k, v, mask, max_distance=max_distance,
                                             scale=scale, params=params)
    rows = positional._relative_rows(q.shape[1], k.shape[1], max_distance)
    dz = np.asarray(cot.get("output", np.zeros(z.shape)), dtype=z.dtype)
    dalpha = dz @ np.swapaxes(v, -1, -2) + np.einsum("btv,tsv->bts", dz, params["rel_v"][rows])
    dalpha = dalpha + np.asarray(cot.get("weights", 0.0), dtype=z.dtype)
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    return {**g, "q": c * (attention.softmax_backward(alpha, dalpha) @ k)}, gp


KERNEL_BUGS = {
    "sdpa": {
        "gqa_dk_dv_not_summed": sdpa_gqa_mutant(lambda a: a[..., 0, :, :]),
        "gqa_dk_dv_mean_over_group": sdpa_gqa_mutant(lambda a: a.mean(axis=-3)),
        "softcap_no_tanh_grad": sdpa_softcap_mutant("no_tanh_grad"),
        "softcap_dbias_capped": sdpa_softcap_mutant("dbias_capped"),
    },
    "mha": {
        # dW_o = dO^T concat reshaped: the right numbers in the wrong layout
        "w_o_not_transposed": patched(multihead, "_linear_vjp", linear_vjp_mutant(
            "w_o", lambda x, dy, g: g.T.reshape(g.shape)), multihead.mha_vjp),
        # db_q = sum over the first sequence's tokens only
        "b_q_not_summed_over_batch": patched(multihead, "_linear_vjp", linear_vjp_mutant(
            "b_q", lambda x, dy, g: dy[0].sum(axis=0)), multihead.mha_vjp),
        "gqa_dk_dv_not_summed": patched(multihead, "sdpa_vjp", sdpa_gqa_mutant(
            lambda a: a[..., 0, :, :]), multihead.mha_vjp),
        "weights_cotangent_ignored": weights_cotangent_ignored(multihead.mha_vjp),
    },
    "self_attention": {
        "dx_from_query_only": sa_dx_from_query_only,
        "w_v_not_transposed": patched(multihead, "_linear_vjp", linear_vjp_mutant(
            "w_v", lambda x, dy, g: g.T.reshape(g.shape)), multihead.self_attention_vjp),
        "weights_cotangent_ignored": weights_cotangent_ignored(multihead.self_attention_vjp),
    },
    "additive_attention": {
        "no_tanh_grad": patched(alignment, "_tanh_score_vjp", tanh_score_vjp_without_tanh_grad,
                                alignment.additive_attention_vjp),
        "keys_without_values_path": patched(alignment, "_with_values", keys_without_values_path,
                                            alignment.additive_attention_vjp),
        "weights_cotangent_ignored": weights_cotangent_ignored(alignment.additive_attention_vjp),
    },
    "luong_attention": {
        "concat_no_tanh_grad": patched(alignment, "_tanh_score_vjp",
                                       tanh_score_vjp_without_tanh_grad,
                                       alignment.luong_attention_vjp),
        "keys_without_values_path": patched(alignment, "_with_values", keys_without_values_path,
                                            alignment.luong_attention_vjp),
        "general_dw_transposed": luong_general_mutant("dw_transposed"),
        "general_dk_with_w_transposed": luong_general_mutant("dk"),
        "weights_cotangent_ignored": weights_cotangent_ignored(alignment.luong_attention_vjp),
    },
    "relative_attention": {
        "table_gradient_overwritten": patched(positional, "_scatter_add", scatter_overwrite,
                                              positional.relative_attention_vjp),
        "dq_without_a_k": relative_without_a_k_in_dq,
        "weights_cotangent_ignored": weights_cotangent_ignored(positional.relative_attention_vjp),
    },
}
KERNEL_CASES = [(c, n) for c, bugs in KERNEL_BUGS.items() for n in bugs]


@pytest.mark.parametrize("component, bug", KERNEL_CASES,
                         ids=[f"{c}-{n}" for c, n in KERNEL_CASES])
def test_kernel_backward_bug_fails_at_every_dtype(component, bug):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(**{f"{component}_vjp": KERNEL_BUGS[component][bug]}),
                                  component)


@pytest.mark.parametrize("component", [c for c in KERNEL_BUGS if c not in BUGS])
def test_correct_kernel_backward_passes(component):
    assert gradient_rejections(mutant(), component) == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


def _tanh_without_derivative(self, x):
    """h~ = tanh(z): dz = dh~, the (1 - h~^2) factor left out."""
    from attnspec.backends.composite.tape import _plain

    y = self._ops.tanh(_plain(x))
    return self.tape.op(lambda g: [g], [x], y)


def _initial_state_not_backpropagated(self, x, index):
    """h_0 = o[b, last_b]: its gradient never reaches the encoder outputs."""
    from attnspec.backends.composite.tape import _plain

    return self.tape.op(lambda g: [None, None], [x, index],
                        self._ops.take_rows(_plain(x), index))


@pytest.mark.parametrize("op, bug", [("tanh", _tanh_without_derivative),
                                     ("take_rows", _initial_state_not_backpropagated)])
def test_seq2seq_op_backward_bug_fails_at_every_dtype(monkeypatch, op, bug):
    from attnspec.backends.composite import tape

    monkeypatch.setattr(tape.TapeOps, op, bug)
    assert_gradient_bug_fails(mutant(), "seq2seq_attention")
