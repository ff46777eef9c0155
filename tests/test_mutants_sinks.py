"""Planted bugs in attention_sinks (forward and backward) that the vectors must catch at
every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, gradient_rejections, mutant
from .test_mutants_grad import assert_gradient_bug_fails


def _with_sinks(change):
    """sdpa_sinks called with change(sinks, q, k, num_kv_heads) as its sinks."""
    def broken(q, k, v, sinks, mask=None, bias=None, *, scale=None, num_kv_heads=None,
               softcap=None):
        return attention.sdpa_sinks(q, k, v, change(np.asarray(sinks), q, k, num_kv_heads),
                                    mask, bias, scale=scale, num_kv_heads=num_kv_heads,
                                    softcap=softcap)
    return broken


def _kv_head_sink(sinks, q, k, kv):
    """Query head h reads the sink of kv head h // G (sinks indexed per kv head)."""
    if kv is None:
        return sinks[::-1].copy()
    group = len(sinks) // kv
    return np.repeat(sinks[::group], group)


def _scaled_sink(sinks, q, k, kv):
    return sinks / np.sqrt(np.shape(q)[-1])


def sink_in_numerator(q, k, v, sinks, mask=None, bias=None, **attrs):
    """The sink as a key whose value is v's first key (not 0)."""
    output, w = attention.sdpa_sinks(q, k, v, sinks, mask, bias, **attrs)
    plain, _ = attention.sdpa(q, k, v, mask, bias, **attrs)
    kept = w.sum(-1, keepdims=True)
    first = attention.repeat_kv(q, k, v, attrs["num_kv_heads"])[1] \
        if attrs.get("num_kv_heads") else np.broadcast_to(v, plain.shape[:-2] + v.shape[-2:])
    return output + (1 - kept) * first[..., :1, :], w


def sinks_dropped(q, k, v, sinks, mask=None, bias=None, **attrs):
    return attention.sdpa(q, k, v, mask, bias, **attrs)


def sinks_renormalised(q, k, v, sinks, mask=None, bias=None, **attrs):
    """The weights renormalised to sum 1 after the sink: the sink changes nothing."""
    output, w = attention.sdpa_sinks(q, k, v, sinks, mask, bias, **attrs)
    total = w.sum(-1, keepdims=True)
    scale = np.where(total > 0, 1 / np.where(total > 0, total, 1), 0)
    return output * scale, w * scale


SINK_BUGS = {
    "sinks_dropped": sinks_dropped,
    "sink_of_the_wrong_head": _with_sinks(_kv_head_sink),
    "sink_scaled": _with_sinks(_scaled_sink),
    "sink_with_a_value": sink_in_numerator,
    "weights_renormalised": sinks_renormalised,
}


@pytest.mark.parametrize("bug", sorted(SINK_BUGS))
def test_attention_sinks_mutant_is_rejected(bug):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(sdpa_sinks=SINK_BUGS[bug]), "attention_sinks")


def sinks_vjp_no_sink_gradient(cotangents, q, k, v, sinks, mask=None, bias=None, **attrs):
    grads, p = attention.sdpa_sinks_vjp(cotangents, q, k, v, sinks, mask, bias, **attrs)
    grads["sinks"] = np.zeros_like(grads["sinks"])
    return grads, p


def sinks_vjp_first_batch_only(cotangents, q, k, v, sinks, mask=None, bias=None, **attrs):
    """dsinks from batch entry 0 (and query 0) only: not summed over the rows of a head."""
    cot = {n: np.array(c) for n, c in cotangents.items()}
    for c in cot.values():
        c[..., 1:, :] = 0  # only query 0 of each head contributes
    grads, p = attention.sdpa_sinks_vjp(cotangents, q, k, v, sinks, mask, bias, **attrs)
    grads["sinks"] = attention.sdpa_sinks_vjp(cot, q, k, v, sinks, mask, bias, **attrs)[0]["sinks"]
    return grads, p


def sinks_vjp_plain_sdpa_dS(cotangents, q, k, v, sinks, mask=None, bias=None, **attrs):
    """dq, dk, dv, dbias of sdpa without the sink (its weights renormalised)."""
    grads, p = attention.sdpa_vjp(cotangents, q, k, v, mask, bias, **attrs)
    mine, _ = attention.sdpa_sinks_vjp(cotangents, q, k, v, sinks, mask, bias, **attrs)
    return {**grads, "sinks": mine["sinks"]}, p


GRAD_BUGS = {
    "no_sink_gradient": sinks_vjp_no_sink_gradient,
    "sink_gradient_not_summed_over_rows": sinks_vjp_first_batch_only,
    "sdpa_backward_without_the_sink": sinks_vjp_plain_sdpa_dS,
}


@pytest.mark.parametrize("bug", sorted(GRAD_BUGS))
def test_attention_sinks_backward_bug_fails_at_every_dtype(bug):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(sdpa_sinks_vjp=GRAD_BUGS[bug]), "attention_sinks")


def test_attention_sinks_correct_backward_passes():
    assert gradient_rejections(mutant(), "attention_sinks") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)
