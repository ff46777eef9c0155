"""Planted bugs in the Llama layers' RoPE scaling and partial rotary (llama_layer's and
llama_decoder_only's rope_scaling and rotary_dim, issue 25 item 1) that the llama vectors must
catch at every dtype, and a cached step that loses the scaling, caught by the property that
llama_step equals the full forward under scaling."""

import types

import numpy as np
import pytest
from attnspec.backends import _rope
from attnspec.backends.composite.decoding import Decoding
from attnspec.backends.numpy import positional

from .mutants import assert_rejected, composite_mutant, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails


def _kernels(**kernels):
    return composite_mutant(Decoding, kernels=kernels)


def _rope_with(change):
    """The NumPy rope with its rotary_dim and scaling passed through ``change`` first."""
    def rope(x, *, offset=0, base=10000.0, convention="interleaved", rotary_dim=None,
             scaling=None):
        kw = change(x, dict(offset=offset, base=base, convention=convention,
                            rotary_dim=rotary_dim, scaling=scaling))
        return positional.rope(x, **kw)
    return rope


def _scaling(kw, **changes):
    return {**kw, "scaling": None if kw["scaling"] is None else {**kw["scaling"], **changes}}


def _rule(kw):
    return (kw["scaling"] or {}).get("rope_type")


def scaling_ignored(x, kw):
    """rope_scaling not passed on to rope: the default frequencies, m = 1."""
    return {**kw, "scaling": None}


def attention_factor_dropped(x, kw):
    """The scaled frequencies, but cos and sin not multiplied by yarn's / longrope's m."""
    return _scaling(kw, attention_factor=1.0) if _rule(kw) in ("yarn", "longrope") else kw


def seq_len_from_chunk(x, kw):
    """The rule evaluated at seq_len = T (the rows of this call), not offset + T (the largest
    position + 1, transformers' max(position_ids) + 1): dynamic and longrope pick another L."""
    return _scaling(kw, seq_len=x.shape[-2]) if kw["scaling"] else kw


def longrope_always_long(x, kw):
    """longrope's long factors at every length (no switch at L0)."""
    return _scaling(kw, seq_len=10**9) if _rule(kw) == "longrope" else kw


def llama3_as_linear(x, kw):
    """llama3's three bands replaced by theta_i / factor for every pair."""
    if _rule(kw) != "llama3":
        return kw
    return {**kw, "scaling": {"rope_type": "linear", "factor": kw["scaling"]["factor"]}}


def yarn_as_linear(x, kw):
    """yarn read as linear interpolation: theta_i / factor everywhere, no ramp, no m."""
    if _rule(kw) != "yarn":
        return kw
    return {**kw, "scaling": {"rope_type": "linear", "factor": kw["scaling"]["factor"]}}


def rotary_dim_ignored(x, kw):
    """Every feature of the head rotated (rotary_dim dropped)."""
    return {**kw, "rotary_dim": None}


def rotary_theta_from_k(x, kw):
    """The first R features rotated, but with theta_i = base^(-2i/K) (K the head width): the
    frequencies of the whole head spread over the rotated part (base^(R/K) as the base)."""
    r = kw["rotary_dim"]
    if r is None or kw["scaling"] is not None:
        return kw
    return {**kw, "base": kw["base"] ** (r / x.shape[-1])}


def attention_factor_on_scores(self, n1, p, heads, kv, base, offset, bias=False, rope=None):
    """m applied once to the scores (the queries scaled by m, the keys not), not to cos and
    sin of both: softmax(m q.k / sqrt(K)) where the spec has m^2."""
    rope = dict(rope or {})
    scaling = rope.get("scaling")
    if scaling is None or scaling.get("rope_type") not in ("yarn", "longrope"):
        return Decoding.llama_qkv(self, n1, p, heads, kv, base, offset, bias, rope)
    q, k, v = Decoding.llama_qkv(self, n1, p, heads, kv, base, offset, bias,
                                 {**rope, "scaling": {**scaling, "attention_factor": 1.0}})
    width = q.shape[-1] if rope.get("rotary_dim") is None else rope["rotary_dim"]
    _, m = _rope.scaled(scaling, rotary_dim=width, base=base, seq_len=offset + q.shape[-2])
    return q * q.dtype.type(m), k, v


MUTANTS = {
    "rope-scaling-ignored": _kernels(rope=_rope_with(scaling_ignored)),
    "attention-factor-dropped": _kernels(rope=_rope_with(attention_factor_dropped)),
    "attention-factor-on-scores": composite_mutant(
        Decoding, methods={"llama_qkv": attention_factor_on_scores}),
    "seq-len-from-chunk": _kernels(rope=_rope_with(seq_len_from_chunk)),
    "longrope-always-long": _kernels(rope=_rope_with(longrope_always_long)),
    "llama3-as-linear": _kernels(rope=_rope_with(llama3_as_linear)),
    "yarn-as-linear": _kernels(rope=_rope_with(yarn_as_linear)),
    "rotary-dim-ignored": _kernels(rope=_rope_with(rotary_dim_ignored)),
    "rotary-theta-from-k": _kernels(rope=_rope_with(rotary_theta_from_k)),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_llama_rope_scaling_mutant_is_rejected(name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[name], "llama")


def test_correct_backend_passes_the_scaled_llama_vectors():
    assert set(rejections(composite_mutant(Decoding), "llama", "rope-scaling").values()) == {0}
    assert set(rejections(composite_mutant(Decoding), "llama", "rotary-dim").values()) == {0}


# -- gradients --------------------------------------------------------------------------------

def rope_vjp_without_m(cot, x, *, offset=0, base=10000.0, convention="interleaved",
                       rotary_dim=None, scaling=None):
    """dx = R^T dy where the spec has m R^T dy (yarn's / longrope's m left out of the
    backward)."""
    if scaling is not None and scaling.get("rope_type") in ("yarn", "longrope"):
        scaling = {**scaling, "attention_factor": 1.0}
    return positional.rope_vjp(cot, x, offset=offset, base=base, convention=convention,
                               rotary_dim=rotary_dim, scaling=scaling)


def rope_vjp_unscaled(cot, x, *, offset=0, base=10000.0, convention="interleaved",
                      rotary_dim=None, scaling=None):
    """The backward rotates back by the default frequencies (scaling dropped in the VJP)."""
    return positional.rope_vjp(cot, x, offset=offset, base=base, convention=convention,
                               rotary_dim=rotary_dim)


def rope_vjp_rotates_pass_through(cot, x, *, offset=0, base=10000.0, convention="interleaved",
                                  rotary_dim=None, scaling=None):
    """The backward rotates every feature, the pass-through ones too (rotary_dim dropped)."""
    return positional.rope_vjp(cot, x, offset=offset, base=base, convention=convention,
                               scaling=scaling)


GRAD_BUGS = {"rope-backward-without-m": rope_vjp_without_m,
             "rope-backward-unscaled": rope_vjp_unscaled,
             "rope-backward-rotates-pass-through": rope_vjp_rotates_pass_through}


@pytest.mark.parametrize("name", sorted(GRAD_BUGS))
def test_llama_rope_scaling_backward_bug_fails_at_every_dtype(name):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(rope_vjp=GRAD_BUGS[name]), "llama")


# -- the cached step: llama_step equals the full forward under scaling -------------------------

def step_drops_scaling(self, x, keep, heads, kv, eps, base, offset, p, trace, past=None,
                       bias=False, rope=None):
    """A cached step (past given) rotates with the default frequencies (the step's own
    rotary embedding built without the config's rope_scaling)."""
    if past is not None and rope:
        rope = {k: v for k, v in rope.items() if k != "scaling"}
    return Decoding.llama_block(self, x, keep, heads, kv, eps, base, offset, p, trace, past,
                                bias, rope)


def _incremental(backend, seed, rule):
    from attnspec.conformance.ops import Ops
    from attnspec.conformance.suite import test_properties_llama as props
    from attnspec.spec.vectors import default_spec

    class Data:
        def draw(self, _):
            return [3, 5]

    session = types.SimpleNamespace(property_dtype="float64")
    props.test_llama_step_with_rope_scaling_equals_full_forward.hypothesis.inner_test(
        backend=backend, device="cpu", attnspec_session=session,
        ops=Ops(backend, default_spec(), "cpu", "float64"), seed=seed, cfg=(16, 2, 1),
        rule=rule, rotary=None, t=7, data=Data())


@pytest.mark.parametrize("rule", ["linear", "yarn", "llama3"])
def test_step_dropping_the_scaling_is_caught_by_the_property(rule):
    with pytest.raises(AssertionError), np.errstate(all="ignore"):
        _incremental(composite_mutant(Decoding, methods={"llama_block": step_drops_scaling}),
                     0, rule)


@pytest.mark.parametrize("rule", ["linear", "yarn", "llama3"])
def test_scaled_step_property_passes_the_correct_backend(rule):
    _incremental(composite_mutant(Decoding), 0, rule)
