"""Planted bugs in sdpa_lse and merge_attention_states (forward and backward) that the
vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, gradient_rejections, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails

LOG2E = 1 / np.log(2)

# -- sdpa_lse ------------------------------------------------------------------------------


def _lse_from(**changed):
    """sdpa_lse whose lse is that of sdpa_lse called with ``changed`` arguments."""
    def broken(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
        call = dict(mask=mask, bias=bias, scale=scale, num_kv_heads=num_kv_heads, softcap=softcap)
        output, _ = attention.sdpa_lse(q, k, v, **call)
        return output, attention.sdpa_lse(q, k, v, **{**call, **changed})[1]
    return broken


def _lse_mapped(f):
    """sdpa_lse with f(lse, scores, keep) in place of the lse."""
    def broken(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None, softcap=None):
        output, lse = attention.sdpa_lse(q, k, v, mask, bias, scale=scale,
                                         num_kv_heads=num_kv_heads, softcap=softcap)
        _, scores, keep = attention._lse_scores(q, k, v, mask, bias, scale, num_kv_heads, softcap)
        return output, f(lse, scores, keep).astype(lse.dtype)
    return broken


def _no_max(lse, scores, keep):
    """ln sum exp(s) without the row maximum subtracted: exp overflows or underflows."""
    with np.errstate(all="ignore"):
        return np.log(np.sum(np.where(keep, np.exp(scores), 0), axis=-1))


SDPA_LSE_BUGS = {
    "lse_in_log2": _lse_mapped(lambda lse, s, keep: lse * LOG2E),
    "max_not_subtracted": _lse_mapped(_no_max),
    "empty_row_zero": _lse_mapped(lambda lse, s, keep: np.where(lse == -np.inf, 0.0, lse)),
    "empty_row_finite_sentinel": _lse_mapped(lambda lse, s, keep: np.maximum(lse, -1e4)),
    "empty_row_plus_inf": _lse_mapped(  # flash-attn 2's convention outside split-KV
        lambda lse, s, keep: np.where(lse == -np.inf, np.inf, lse)),
    "unscaled_scores": _lse_from(scale=1.0),
    "bias_left_out": _lse_from(bias=None),
    "cap_left_out": _lse_from(softcap=None),
    "mask_ignored": _lse_from(mask=None),
}


@pytest.mark.parametrize("bug", sorted(SDPA_LSE_BUGS))
def test_sdpa_lse_mutant_is_rejected(bug):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(sdpa_lse=SDPA_LSE_BUGS[bug]), "sdpa_lse")


# -- merge_attention_states ----------------------------------------------------------------


def _merge(outputs, lses, *, base=np.e, subtract_max=True, guard=True, leave_out=True,
           normalise=True, lse_as_max=False, parts=None):
    """A configurable merge to plant bugs in: the correct one with every default."""
    o, s = np.asarray(outputs, dtype=np.float64), np.asarray(lses, dtype=np.float64)
    if parts is not None:
        o, s = o[:parts], s[:parts]
    s = s * np.log(base)  # base-b lses read as natural logs of b**lse
    m = np.max(s, axis=0) if subtract_max else np.zeros(s.shape[1:])
    if guard:
        m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)  # (N, ...)
    total = np.sum(e, axis=0)
    w = e / (np.where(total > 0, total, 1) if guard else total) if normalise else e
    terms = w[..., None] * o
    if leave_out:
        terms = np.where(w[..., None] != 0, terms, 0)
    lse = m if lse_as_max else m + np.log(total)
    return np.sum(terms, axis=0), np.asarray(lse / np.log(base))


def _merge_with(**bug):
    def broken(outputs, lses):
        with np.errstate(all="ignore"):
            return _merge(outputs, lses, **bug)
    return broken


MERGE_BUGS = {
    "lses_in_base_2": _merge_with(base=2.0),
    "max_not_subtracted": _merge_with(subtract_max=False),
    "all_empty_gives_nan": _merge_with(guard=False),
    "empty_part_multiplied_by_zero": _merge_with(leave_out=False),
    "weights_not_renormalised": _merge_with(normalise=False),
    "lse_is_the_max": _merge_with(lse_as_max=True),
    "first_two_parts_only": _merge_with(parts=2),
}


def test_the_configurable_merge_is_correct_with_its_defaults():
    """The sketch the bugs are planted in passes every vector (so each bug is its own)."""
    fails = rejections(mutant(merge_attention_states=_merge_with()), "merge_attention_states")
    assert fails == dict.fromkeys(("float64", "float32", "float16", "bfloat16"), 0)


@pytest.mark.parametrize("bug", sorted(MERGE_BUGS))
def test_merge_attention_states_mutant_is_rejected(bug):
    assert_rejected(mutant(merge_attention_states=MERGE_BUGS[bug]), "merge_attention_states")


# -- backward ------------------------------------------------------------------------------


def sdpa_lse_vjp_without_lse_term(cotangents, q, k, v, mask=None, bias=None, **attrs):
    """The gradient of the output alone: W dlse left out of dS."""
    cot = {"output": cotangents.get("output", np.zeros(1))}
    return attention.sdpa_lse_vjp(cot, q, k, v, mask, bias, **attrs)


def sdpa_lse_vjp_lse_term_unweighted(cotangents, q, k, v, mask=None, bias=None, **attrs):
    """dS gets dlse on every key instead of W dlse: as if d lse / dS were 1."""
    grads, _ = attention.sdpa_lse_vjp(cotangents, q, k, v, mask, bias, **attrs)
    if bias is not None and "lse" in cotangents:
        grads["bias"] = grads["bias"] + attention._unbroadcast(
            np.broadcast_to(np.asarray(cotangents["lse"])[..., None],
                            np.broadcast_shapes(np.shape(bias), (*np.shape(cotangents["lse"]), 1))),
            np.shape(bias))
    return grads, {}


def merge_vjp_without_minus_output(cotangents, outputs, lses):
    """dlse_n = w_n (dO . o_n + dL): the - O of the softmax backward left out."""
    grads, _ = attention.merge_attention_states_vjp(cotangents, outputs, lses)
    w = attention.softmax(np.asarray(lses), axis=0)
    merged, _ = attention.merge_attention_states(outputs, lses)
    dO = np.asarray(cotangents.get("output", np.zeros_like(merged)))
    grads["lses"] = grads["lses"] + w * np.sum(dO * merged, axis=-1)
    return grads, {}


def merge_vjp_without_lse_cotangent(cotangents, outputs, lses):
    """The merged lse's cotangent dropped."""
    return attention.merge_attention_states_vjp(
        {k: c for k, c in cotangents.items() if k != "lse"}, outputs, lses)


GRAD_BUGS = {
    ("sdpa_lse", "lse_term_left_out"): sdpa_lse_vjp_without_lse_term,
    ("sdpa_lse", "lse_term_unweighted"): sdpa_lse_vjp_lse_term_unweighted,
    ("merge_attention_states", "minus_output_left_out"): merge_vjp_without_minus_output,
    ("merge_attention_states", "lse_cotangent_dropped"): merge_vjp_without_lse_cotangent,
}


@pytest.mark.parametrize("component, bug", sorted(GRAD_BUGS))
def test_backward_bug_fails_at_every_dtype(component, bug):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(**{f"{component}_vjp": GRAD_BUGS[component, bug]}),
                                  component)


@pytest.mark.parametrize("component", ["sdpa_lse", "merge_attention_states"])
def test_correct_backward_passes(component):
    assert gradient_rejections(mutant(), component) == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)
