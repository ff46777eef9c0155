"""Planted bugs in sdpa_fp8 that its vectors must catch at every dtype: a descale dropped, a
per-tensor descale (the first head's) where per head is given, q's descale indexed by the
wrong head, v's descale applied to the scores, scales passed for descales, k's and v's
descales swapped, e5m2 read as e4m3fn (through its cast, or its bits reinterpreted); and
backward bugs. q's and k's
descales swapped is no bug: the scores are bilinear, (d_q q)(d_k k)^T = d_q d_k q k^T,
so it is shown to pass every vector."""

import ml_dtypes
import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, gradient_rejections, mutant, rejections
from .test_mutants_grad import assert_gradient_bug_fails

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def per_head(d, heads: int, h_kv: int, index=None):
    """A descale as a multiplier of (B, heads, T, .): 1 if absent, a scalar, or (B, H_kv)
    read at index(h) (default h // (heads / H_kv)) for each head h."""
    if d is None:
        return 1.0
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 0:
        return d
    index = index or (lambda h: h // (heads // h_kv))
    return d[:, [index(h) for h in range(heads)], None, None]


def correct_scales(dq, dk, dv, h, h_kv):
    return per_head(dq, h, h_kv), per_head(dk, h_kv, h_kv), per_head(dv, h_kv, h_kv)


def sketch(read=None, scales=correct_scales, v_on_scores=False):
    """sdpa_fp8 written from the page in float64, with the values read by read(x, format),
    the multipliers from scales(dq, dk, dv, H, H_kv) and, with v_on_scores, v's descale
    multiplying the scores instead of v."""
    def fn(q, k, v, q_descale=None, k_descale=None, v_descale=None, *, fp8_format="e4m3fn",
           scale=None, causal=False, num_kv_heads=None, softcap=None):
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
        if read is not None:
            q, k, v = (read(x, fp8_format) for x in (q, k, v))
        h, h_kv = q.shape[1], k.shape[1]
        dq, dk, dv = scales(q_descale, k_descale, v_descale, h, h_kv)
        if v_on_scores:
            dq, dv = dq * per_head(v_descale, h, h_kv), 1.0
        t, s = q.shape[2], k.shape[2]
        mask = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t) if causal else None
        with np.errstate(all="ignore"):
            out, _ = attention.sdpa(q * dq, k * dk, v * dv, mask, scale=scale,
                                    num_kv_heads=num_kv_heads, softcap=softcap)
        return out
    return fn


def _dropped(which: int):
    def scales(*a):
        out = list(correct_scales(*a))
        out[which] = 1.0
        return tuple(out)
    return scales


def _first_head(dq, dk, dv, h, h_kv):
    """A (B, H_kv) descale read as one number: its [0, 0] entry."""
    first = [None if d is None else np.asarray(d, dtype=np.float64).reshape(-1)[0] for d in (dq, dk, dv)]
    return correct_scales(*first, h, h_kv)


def _q_tiled(dq, dk, dv, h, h_kv):
    """q_descale read at h % H_kv (heads interleaved) instead of h // (H / H_kv)."""
    return per_head(dq, h, h_kv, lambda i: i % h_kv), per_head(dk, h_kv, h_kv), per_head(dv, h_kv, h_kv)


def _kv_swapped(dq, dk, dv, h, h_kv):
    return correct_scales(dq, dv, dk, h, h_kv)


def _inverted(dq, dk, dv, h, h_kv):
    """Each descale used as a quantisation scale (1 / descale; a zero stays 0)."""
    def inv(d):
        if d is None:
            return None
        d = np.asarray(d, dtype=np.float64)
        return np.where(d > 0, 1 / np.where(d > 0, d, 1), 0.0)
    return correct_scales(inv(dq), inv(dk), inv(dv), h, h_kv)


def _qk_swapped(dq, dk, dv, h, h_kv):
    return per_head(dk, h, h_kv), per_head(dq, h_kv, h_kv), per_head(dv, h_kv, h_kv)


def _e5m2_cast_as_e4m3fn(x, fmt):
    """e5m2 values converted through e4m3fn (its overflow NaN, its underflow 0)."""
    return x.astype(E4M3).astype(np.float64) if fmt == "e5m2" else x


def _e5m2_bits_as_e4m3fn(x, fmt):
    """e5m2 bytes reinterpreted as e4m3fn (a kernel given the wrong format)."""
    if fmt != "e5m2":
        return x
    with np.errstate(all="ignore"):
        return x.astype(E5M2).view(np.uint8).view(E4M3).astype(np.float64)


FP8_BUGS = {
    "q_descale_dropped": sketch(scales=_dropped(0)),
    "k_descale_dropped": sketch(scales=_dropped(1)),
    "v_descale_dropped": sketch(scales=_dropped(2)),
    "per_tensor_first_head": sketch(scales=_first_head),
    "q_descale_heads_interleaved": sketch(scales=_q_tiled),
    "k_v_descales_swapped": sketch(scales=_kv_swapped),
    "v_descale_on_the_scores": sketch(v_on_scores=True),
    "scales_for_descales": sketch(scales=_inverted),
    "e5m2_cast_as_e4m3fn": sketch(read=_e5m2_cast_as_e4m3fn),
    "e5m2_bits_as_e4m3fn": sketch(read=_e5m2_bits_as_e4m3fn),
}


@pytest.mark.parametrize("bug", sorted(FP8_BUGS))
def test_sdpa_fp8_mutant_is_rejected(bug):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(sdpa_fp8=FP8_BUGS[bug]), "sdpa_fp8")


def test_the_correct_sketch_passes_every_vector():
    """The sketches' frame is right: without a bug it passes everything at every dtype."""
    assert rejections(mutant(sdpa_fp8=sketch()), "sdpa_fp8") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


def test_q_and_k_descales_swapped_is_no_bug():
    """(d_q q)(d_k k)^T = d_q d_k q k^T for either descale layout: the swap passes every
    vector (so the page lists it as what no vector can catch)."""
    assert rejections(mutant(sdpa_fp8=sketch(scales=_qk_swapped)), "sdpa_fp8") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)


# -- backward ------------------------------------------------------------------------------

def _vjp(change):
    def broken(cotangents, q, k, v, q_descale=None, k_descale=None, v_descale=None, **attrs):
        grads, p = attention.sdpa_fp8_vjp(cotangents, q, k, v, q_descale, k_descale, v_descale,
                                          **attrs)
        return change(grads, q, k, v, (q_descale, k_descale, v_descale), attrs), p
    return broken


def _dq_not_rescaled(grads, q, k, v, ds, attrs):
    """dq returned as the gradient w.r.t. the dequantised q (the descale's factor left out)."""
    if ds[0] is not None:
        grads["q"] = grads["q"] / per_head(ds[0], q.shape[1], k.shape[1])
    return grads


def _descale_grad_first_head(grads, q, k, v, ds, attrs):
    """d(q_descale)[b, g] from the first query head of group g only (not summed)."""
    d = grads.get("q_descale")
    if d is not None and np.ndim(d) == 2:
        dq_hat = grads["q"] / per_head(ds[0], q.shape[1], k.shape[1])
        group = q.shape[1] // k.shape[1]
        grads["q_descale"] = np.sum(dq_hat * q, axis=(2, 3))[:, ::group].astype(d.dtype)
    return grads


def _no_descale_grad(grads, q, k, v, ds, attrs):
    return {n: (np.zeros_like(g) if n.endswith("_descale") else g) for n, g in grads.items()}


GRAD_BUGS = {
    "dq_not_rescaled": _vjp(_dq_not_rescaled),
    "descale_gradient_first_head_of_group": _vjp(_descale_grad_first_head),
    "no_descale_gradient": _vjp(_no_descale_grad),
}


@pytest.mark.parametrize("bug", sorted(GRAD_BUGS))
def test_sdpa_fp8_backward_bug_fails_at_every_dtype(bug):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(sdpa_fp8_vjp=GRAD_BUGS[bug]), "sdpa_fp8")


def test_sdpa_fp8_correct_backward_passes():
    assert gradient_rejections(mutant(), "sdpa_fp8") == dict.fromkeys(
        ("float64", "float32", "float16", "bfloat16"), 0)
