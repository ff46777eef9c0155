"""`check` names the likely mistake (issue 24, item 2): one student function per convention
the spec knows, each written here independently of conformance/variants.py; the failure
says "your output matches <variant> (see <page>#<anchor>)", and a right function is told
nothing of the kind."""

import re
from math import erf, pi, sqrt

import numpy as np
import pytest
from attnspec.conformance.notebook import check


def _softmax(s, axis=-1):
    e = np.exp(s - np.max(s, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _scores(q, k, scale=None, d=None):
    d = q.shape[-1] if d is None else d
    return (1 / np.sqrt(d) if scale is None else scale) * (q @ np.swapaxes(k, -1, -2))


def sdpa_minus_1e9(q, k, v, mask=None, bias=None, scale=None):
    s = _scores(q, k, scale) + (0 if bias is None else bias)
    w = _softmax(np.where(mask, s, -1e9) if mask is not None else s)
    return w @ v, w


def sdpa_minus_inf(q, k, v, mask=None, bias=None, scale=None):
    s = _scores(q, k, scale) + (0 if bias is None else bias)
    with np.errstate(invalid="ignore"):
        w = _softmax(np.where(mask, s, -np.inf) if mask is not None else s)
    return w @ v, w


def _right_weights(q, k, mask, bias, scale):
    s = _scores(q, k, scale) + (0 if bias is None else bias)
    if mask is None:
        return _softmax(s)
    s = np.where(mask, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    t = e.sum(axis=-1, keepdims=True)
    return np.divide(e, t, out=np.zeros_like(e), where=t > 0)


def sdpa_wrong_axis(q, k, v, mask=None, bias=None, scale=None):
    s = _scores(q, k, scale) + (0 if bias is None else bias)
    w = _softmax(s, axis=-2)
    return w @ v, w


def sdpa_d_v(q, k, v, mask=None, bias=None, scale=None):
    s = _scores(q, k, scale, d=v.shape[-1]) + (0 if bias is None else bias)
    w = _softmax(s)
    return w @ v, w


def sdpa_unscaled(q, k, v, mask=None, bias=None):
    w = _softmax(q @ np.swapaxes(k, -1, -2) + (0 if bias is None else bias))
    return w @ v, w


def sdpa_nan_times_zero(q, k, v, mask=None, bias=None, scale=None):
    w = _right_weights(q, k, mask, bias, scale)
    with np.errstate(invalid="ignore"):
        return np.einsum("...ts,...sd->...td", w, v) if not np.isnan(v).any() else \
            (w[..., :, :, None] * v[..., None, :, :]).sum(axis=-2), w


def ln_annotated(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / (x.std(-1, ddof=1, keepdims=True) + eps) + beta


def ln_unbiased(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(((x - mu) ** 2).sum(-1, keepdims=True) /
                                      (x.shape[-1] - 1) + eps) + beta


def ln_eps_outside(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / (np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True)) + eps) + beta


def softmax_wrong_axis(x, axis=-1):
    return _softmax(x, axis=0 if axis in (-1, x.ndim - 1) and x.ndim == 2 else -2)


def _ffn(act):
    def feedforward(x, w1, b1, w2, b2, activation="relu"):
        h = x @ w1 + b1
        h = np.maximum(h, 0) if activation == "relu" else act(h)
        return h @ w2 + b2
    return feedforward


ffn_tanh = _ffn(lambda h: 0.5 * h * (1 + np.tanh(sqrt(2 / pi) * (h + 0.044715 * h ** 3))))
ffn_erf = _ffn(lambda h: 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2))))


def _rope(x, offset, base, half, float32):
    k = x.shape[-1]
    pos = offset + np.arange(x.shape[-2], dtype=np.float32 if float32 else np.float64)
    inv = base ** (-np.arange(0, k, 2) / k)
    ang = np.outer(pos, inv.astype(pos.dtype)).astype(np.float64)
    if half:
        x1, x2 = x[..., : k // 2], x[..., k // 2:]
        return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang),
                               x1 * np.sin(ang) + x2 * np.cos(ang)], axis=-1)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * np.cos(ang) - x[..., 1::2] * np.sin(ang)
    out[..., 1::2] = x[..., 0::2] * np.sin(ang) + x[..., 1::2] * np.cos(ang)
    return out


def rope_always_half(x, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, offset, base, half=True, float32=False)  # the convention ignored


def rope_float32_angles(x, offset=0, base=10000.0, convention="interleaved"):
    return _rope(x, offset, base, half=convention == "half", float32=True)


@pytest.mark.parametrize("fn, component, words, anchor", [
    (rope_always_half, "rope", "the other pairing of RoPE", "rope.md#conventions"),
    (rope_float32_angles, "rope", "RoPE angles p * theta computed in float32", "rope.md#conv"),
    (sdpa_minus_1e9, "sdpa", "-1e9 fills", "sdpa.md#edge-cases"),
    (sdpa_minus_inf, "sdpa", "-inf fills without a guard", "sdpa.md#edge-cases"),
    (sdpa_wrong_axis, "sdpa", "softmax over the wrong axis", "sdpa.md#conventions"),
    (sdpa_d_v, "sdpa", "1/sqrt(d_v), the value width", "sdpa.md#conventions"),
    (sdpa_unscaled, "sdpa", "no 1/sqrt(d_k) scaling", "sdpa.md#conventions"),
    (sdpa_nan_times_zero, "sdpa", "NaN from a masked value times 0", "sdpa.md#edge-cases"),
    (ln_annotated, "layer_norm", "the Annotated Transformer's LayerNorm", "layer_norm.md#conv"),
    (ln_unbiased, "layer_norm", "unbiased variance", "layer_norm.md#conventions"),
    (ln_eps_outside, "layer_norm", "eps added outside the square root", "layer_norm.md#conv"),
    (softmax_wrong_axis, "softmax", "softmax over the wrong axis", "softmax.md#conventions"),
    (ffn_tanh, "feedforward", "the tanh approximation of GELU", "feedforward.md#conventions"),
    (ffn_erf, "feedforward", "the exact (erf) GELU where the vector asks for 'gelu_tanh'",
     "feedforward.md#conventions"),
])
def test_the_convention_is_named(fn, component, words, anchor):
    r = check(fn, component)
    assert r.failed, r.text
    named = re.findall(r"your output matches (.*) \(see spec/components/(\S+)\)", r.text)
    assert any(words in what and where.startswith(anchor) for what, where in named), r.text


def test_a_right_function_is_told_no_mistake():
    r = check(_ffn(lambda h: 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))), "feedforward",
              variant="activation=gelu")
    assert r.ok and "matches" not in r.text
