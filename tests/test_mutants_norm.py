"""Planted bugs in layer_norm, rms_norm, feedforward, gated_feedforward, dropout, residual and
embedding
that the vectors must catch at every dtype (or, where the page says so, at the dtypes
that can resolve them)."""

import numpy as np
import pytest
from attnspec.backends.numpy import embedding as emb
from attnspec.backends.numpy import feedforward as ff
from attnspec.backends.numpy import norm

from .mutants import assert_rejected, mutant, rejections

# -- layer_norm ------------------------------------------------------------------------

def _ln(x, gamma, beta, eps, unbiased=False, eps_outside=False):
    x = np.asarray(x)
    mu = x.mean(axis=-1, keepdims=True)
    d = x.shape[-1]
    ss = np.sum((x - mu) ** 2, axis=-1, keepdims=True)
    var = ss / (d - 1 if unbiased else d)
    denom = np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps)
    return (x - mu) / denom * gamma + beta


def ln_unbiased(x, *, eps=1e-5, variant="canonical", params):
    """Canonical LayerNorm with the unbiased variance (divide by D - 1)."""
    return _ln(x, params["gamma"], params["beta"], eps, unbiased=True,
               eps_outside=variant == "annotated")


def ln_eps_outside(x, *, eps=1e-5, variant="canonical", params):
    """Canonical LayerNorm with eps added to the std instead of inside the root."""
    return _ln(x, params["gamma"], params["beta"], eps, unbiased=variant == "annotated",
               eps_outside=True)


def ln_variants_swapped(x, *, eps=1e-5, variant="canonical", params):
    other = {"canonical": "annotated", "annotated": "canonical"}[variant]
    if x.shape[-1] < 2:
        return norm.layer_norm(x, eps=eps, params=params)
    return norm.layer_norm(x, eps=eps, variant=other, params=params)


def ln_gamma_beta_swapped(x, *, eps=1e-5, variant="canonical", params):
    return norm.layer_norm(x, eps=eps, variant=variant,
                           params={"gamma": params["beta"], "beta": params["gamma"]})


def ln_eps_ignored(x, *, eps=1e-5, variant="canonical", params):
    """The eps attribute is not passed on: always 1e-5."""
    return norm.layer_norm(x, eps=1e-5, variant=variant, params=params)


def ln_keras_eps(x, *, eps=1e-5, variant="canonical", params):
    """Keras LayerNormalization's default epsilon 1e-3 where the spec's default 1e-5 is asked."""
    return norm.layer_norm(x, eps=1e-3 if eps == 1e-5 else eps, variant=variant, params=params)


def ln_annotated_biased(x, *, eps=1e-5, variant="canonical", params):
    """The annotated variant computed with the biased std."""
    return _ln(x, params["gamma"], params["beta"], eps, eps_outside=variant == "annotated")


def ln_annotated_eps_inside(x, *, eps=1e-5, variant="canonical", params):
    """The annotated variant with eps inside the root."""
    return _ln(x, params["gamma"], params["beta"], eps, unbiased=variant == "annotated")


def ln_wrong_axis(x, *, eps=1e-5, variant="canonical", params):
    """Normalises over the first axis (rank >= 2) instead of the last."""
    if x.ndim < 2:
        return norm.layer_norm(x, eps=eps, variant=variant, params=params)
    x0 = np.moveaxis(x, 0, -1)
    mu, var = x0.mean(-1, keepdims=True), x0.var(-1, keepdims=True)
    z = np.moveaxis((x0 - mu) / np.sqrt(var + eps), -1, 0)
    return z * params["gamma"] + params["beta"]


def ln_no_affine(x, *, eps=1e-5, variant="canonical", params):
    d = x.shape[-1]
    return norm.layer_norm(x, eps=eps, variant=variant,
                           params={"gamma": np.ones(d), "beta": np.zeros(d)})


LN = [ln_unbiased, ln_eps_outside, ln_variants_swapped, ln_gamma_beta_swapped, ln_eps_ignored,
      ln_keras_eps, ln_annotated_biased, ln_annotated_eps_inside, ln_wrong_axis, ln_no_affine]


@pytest.mark.parametrize("broken", LN, ids=lambda f: f.__name__)
def test_layer_norm_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(layer_norm=broken), "layer_norm")


# -- rms_norm --------------------------------------------------------------------------

def rms_mean_subtracted(x, *, eps=1e-6, params):
    """Subtracts the mean first (LayerNorm without beta)."""
    return norm.rms_norm(x - x.mean(axis=-1, keepdims=True), eps=eps, params=params)


def rms_eps_outside(x, *, eps=1e-6, params):
    return x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps) * params["gamma"]


def rms_eps_1e5(x, *, eps=1e-6, params):
    """LayerNorm's default eps 1e-5 where 1e-6 is asked."""
    return norm.rms_norm(x, eps=1e-5 if eps == 1e-6 else eps, params=params)


def rms_torch_default_eps(x, *, eps=1e-6, params):
    """torch.nn.RMSNorm(eps=None): finfo(float32).eps = 1.2e-7 where 1e-6 is asked."""
    return norm.rms_norm(x, eps=float(np.finfo(np.float32).eps) if eps == 1e-6 else eps,
                         params=params)


def rms_eps_ignored(x, *, eps=1e-6, params):
    return norm.rms_norm(x, params=params)


def rms_sum_not_mean(x, *, eps=1e-6, params):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps) * params["gamma"]


def rms_no_gamma(x, *, eps=1e-6, params):
    return norm.rms_norm(x, eps=eps, params={"gamma": np.ones(x.shape[-1])})


RMS = [rms_mean_subtracted, rms_eps_outside, rms_eps_1e5, rms_torch_default_eps, rms_eps_ignored,
       rms_sum_not_mean, rms_no_gamma]


@pytest.mark.parametrize("broken", RMS, ids=lambda f: f.__name__)
def test_rms_norm_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(rms_norm=broken), "rms_norm")


# -- feedforward -----------------------------------------------------------------------

def _ffn(x, params, act):
    return act(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def ffn_always_relu(x, *, activation="relu", params):
    return _ffn(x, params, ff.relu)


def ffn_always_gelu(x, *, activation="relu", params):
    return _ffn(x, params, ff.gelu)


def ffn_gelu_is_tanh(x, *, activation="relu", params):
    """activation='gelu' computed with the tanh approximation."""
    return ff.feedforward(x, activation="gelu_tanh" if activation == "gelu" else activation,
                          params=params)


def ffn_tanh_is_gelu(x, *, activation="relu", params):
    """activation='gelu_tanh' computed with the exact erf GELU."""
    return ff.feedforward(x, activation="gelu" if activation == "gelu_tanh" else activation,
                          params=params)


def ffn_no_b1(x, *, activation="relu", params):
    return ff.feedforward(x, activation=activation, params={**params, "b1": 0 * params["b1"]})


def ffn_no_b2(x, *, activation="relu", params):
    return ff.feedforward(x, activation=activation, params={**params, "b2": 0 * params["b2"]})


def ffn_act_on_output(x, *, activation="relu", params):
    """The activation applied after the second linear map as well."""
    return ff.ACTIVATIONS[activation](ff.feedforward(x, activation=activation, params=params))


FFN = [ffn_always_relu, ffn_always_gelu, ffn_no_b1, ffn_no_b2, ffn_act_on_output]


@pytest.mark.parametrize("broken", FFN, ids=lambda f: f.__name__)
def test_feedforward_mutant_is_rejected(broken):
    assert_rejected(mutant(feedforward=broken), "feedforward")


@pytest.mark.parametrize("broken", [ffn_gelu_is_tanh, ffn_tanh_is_gelu],
                         ids=lambda f: f.__name__)
def test_feedforward_gelu_variant_rejected_where_resolvable(broken):
    """erf-GELU vs tanh-GELU: caught at float64 and float32; below float16/bfloat16
    resolution (the page says so), so those dtypes are not asserted."""
    fails = rejections(mutant(feedforward=broken), "feedforward")
    assert fails["float64"] > 0 and fails["float32"] > 0, fails


# -- gated_feedforward -----------------------------------------------------------------

def _glu(x, params, act, gate="w_gate", up="w_up"):
    return (act(x @ params[gate]) * (x @ params[up])) @ params["w_down"]


def _sigmoid(h):
    return 1 / (1 + np.exp(-h))


def glu_silu_is_gelu(x, *, activation="silu", params):
    """Swish replaced by GELU (SwiGLU computed as GeGLU)."""
    return ff.gated_feedforward(x, activation="gelu" if activation == "silu" else activation,
                                params=params)


def glu_gelu_is_silu(x, *, activation="silu", params):
    """GeGLU computed as SwiGLU."""
    return ff.gated_feedforward(x, activation="silu" if activation == "gelu" else activation,
                                params=params)


def glu_gate_up_swapped(x, *, activation="silu", params):
    """The activation applied to x W_up instead of x W_gate."""
    return _glu(x, params, ff.GATES[activation], gate="w_up", up="w_gate")


def glu_sigmoid_gate(x, *, activation="silu", params):
    """The original GLU's sigmoid where silu is asked."""
    act = _sigmoid if activation == "silu" else ff.GATES[activation]
    return _glu(x, params, act)


def glu_relu_gate(x, *, activation="silu", params):
    """ReGLU: relu where silu is asked."""
    act = ff.relu if activation == "silu" else ff.GATES[activation]
    return _glu(x, params, act)


def glu_act_on_product(x, *, activation="silu", params):
    """act(x W_gate * x W_up) W_down: the activation after the product."""
    act = ff.GATES[activation]
    return act((x @ params["w_gate"]) * (x @ params["w_up"])) @ params["w_down"]


def glu_ungated(x, *, activation="silu", params):
    """act(x W_gate) W_down: the up branch dropped."""
    return ff.GATES[activation](x @ params["w_gate"]) @ params["w_down"]


def glu_gelu_is_tanh(x, *, activation="silu", params):
    return ff.gated_feedforward(x, activation="gelu_tanh" if activation == "gelu" else activation,
                                params=params)


def glu_tanh_is_gelu(x, *, activation="silu", params):
    return ff.gated_feedforward(x, activation="gelu" if activation == "gelu_tanh" else activation,
                                params=params)


GLU = [glu_silu_is_gelu, glu_gelu_is_silu, glu_gate_up_swapped, glu_sigmoid_gate, glu_relu_gate,
       glu_act_on_product, glu_ungated]


@pytest.mark.parametrize("broken", GLU, ids=lambda f: f.__name__)
def test_gated_feedforward_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(gated_feedforward=broken), "gated_feedforward")


@pytest.mark.parametrize("broken", [glu_gelu_is_tanh, glu_tanh_is_gelu], ids=lambda f: f.__name__)
def test_gated_feedforward_gelu_variant_rejected_where_resolvable(broken):
    """erf-GELU vs tanh-GELU in the gate: caught at float64 and float32 (the tail vectors)."""
    fails = rejections(mutant(gated_feedforward=broken), "gated_feedforward")
    assert fails["float64"] > 0 and fails["float32"] > 0, fails


# -- dropout ---------------------------------------------------------------------------

def drop_scale_by_keep_prob(x, keep_mask=None, *, p, seed=None):
    """Scales kept entries by (1 - p) instead of 1 / (1 - p)."""
    if p == 0:
        return x
    return np.where(keep_mask, x * (1 - p), 0)


def drop_polarity_inverted(x, keep_mask=None, *, p, seed=None):
    return ff.dropout(x, None if keep_mask is None else ~np.asarray(keep_mask), p=p, seed=seed)


def drop_no_scaling(x, keep_mask=None, *, p, seed=None):
    if p == 0:
        return x
    return np.where(keep_mask, x, 0)


def drop_p0_uses_mask(x, keep_mask=None, *, p, seed=None):
    """y = x * keep / (1 - p) even at p = 0."""
    if keep_mask is None:
        return ff.dropout(x, p=p, seed=seed)
    return np.where(keep_mask, x / (1 - p), 0)


def drop_mask_ignored(x, keep_mask=None, *, p, seed=None):
    """The keep mask is ignored and a random one drawn."""
    return ff.dropout(x, p=p, seed=0)


DROP = [drop_scale_by_keep_prob, drop_polarity_inverted, drop_no_scaling, drop_p0_uses_mask,
        drop_mask_ignored]


@pytest.mark.parametrize("broken", DROP, ids=lambda f: f.__name__)
def test_dropout_mutant_is_rejected(broken):
    assert_rejected(mutant(dropout=broken), "dropout")


# -- residual --------------------------------------------------------------------------

def _parts(params):
    ffn = {k[4:]: v for k, v in params.items() if k.startswith("ffn.")}
    nrm = {k[5:]: v for k, v in params.items() if k.startswith("norm.")}
    return ffn, nrm


def res_swapped(x, *, position="post", eps=1e-5, activation="relu", params, trace=None):
    other = {"post": "pre", "pre": "post"}[position]
    return ff.residual(x, position=other, eps=eps, activation=activation, params=params,
                       trace=trace)


def res_pre_adds_normed(x, *, position="post", eps=1e-5, activation="relu", params,
                        trace=None):
    """Pre-norm adding the residual to LN(x): LN(x) + f(LN(x))."""
    if position == "post":
        return ff.residual(x, eps=eps, activation=activation, params=params, trace=trace)
    f_p, n_p = _parts(params)
    n = norm.layer_norm(x, eps=eps, params=n_p)
    f = ff.feedforward(n, activation=activation, params=f_p)
    if trace is not None:
        trace.record("norm.output", n)
        trace.record("sublayer.output", f)
    return n + f


def res_post_no_skip(x, *, position="post", eps=1e-5, activation="relu", params, trace=None):
    """Post-norm without the skip connection: LN(f(x))."""
    if position == "pre":
        return ff.residual(x, position="pre", eps=eps, activation=activation, params=params,
                           trace=trace)
    f_p, n_p = _parts(params)
    f = ff.feedforward(x, activation=activation, params=f_p)
    if trace is not None:
        trace.record("sublayer.output", f)
    return norm.layer_norm(f, eps=eps, params=n_p)


def res_eps_ignored(x, *, position="post", eps=1e-5, activation="relu", params, trace=None):
    return ff.residual(x, position=position, activation=activation, params=params, trace=trace)


def res_activation_ignored(x, *, position="post", eps=1e-5, activation="relu", params,
                           trace=None):
    return ff.residual(x, position=position, eps=eps, params=params, trace=trace)


RES = [res_swapped, res_pre_adds_normed, res_post_no_skip, res_eps_ignored,
       res_activation_ignored]


@pytest.mark.parametrize("broken", RES, ids=lambda f: f.__name__)
def test_residual_mutant_is_rejected(broken):
    assert_rejected(mutant(residual=broken), "residual")


# -- embedding / lm_head ---------------------------------------------------------------

def emb_unscaled(ids, *, scale=True, params):
    return emb.embedding(ids, scale=False, params=params)


def emb_scale_by_d(ids, *, scale=True, params):
    y = emb.embedding(ids, scale=False, params=params)
    return y * y.shape[-1] if scale else y


def emb_always_scaled(ids, *, scale=True, params):
    return emb.embedding(ids, scale=True, params=params)


def head_tied_no_transpose(x, *, tied=False, params):
    if not tied:
        return emb.lm_head(x, params=params)
    logits = x @ params["table"]
    return logits + params["b"] if "b" in params else logits


def head_bias_ignored(x, *, tied=False, params):
    return emb.lm_head(x, tied=tied, params={k: v for k, v in params.items() if k != "b"})


@pytest.mark.parametrize("broken", [emb_unscaled, emb_scale_by_d, emb_always_scaled],
                         ids=lambda f: f.__name__)
def test_embedding_mutant_is_rejected(broken):
    assert_rejected(mutant(embedding=broken), "embedding")


@pytest.mark.parametrize("broken", [head_tied_no_transpose, head_bias_ignored],
                         ids=lambda f: f.__name__)
def test_lm_head_mutant_is_rejected(broken):
    assert_rejected(mutant(lm_head=broken), "embedding")


@pytest.mark.parametrize("component", ["layer_norm", "rms_norm", "feedforward",
                                       "gated_feedforward", "dropout", "residual", "embedding"])
def test_correct_backend_is_not_rejected(component):
    fails = rejections(mutant(), component)
    assert not any(fails.values()), fails


def test_gelu_variants_differ_by_less_than_half_precision_resolves():
    """The claim on the feedforward page: |gelu - gelu_tanh| < 5e-4 everywhere."""
    h = np.linspace(-8, 8, 20001)
    d = np.abs(ff.gelu(h) - ff.gelu_tanh(h))
    assert d.max() < 5e-4
