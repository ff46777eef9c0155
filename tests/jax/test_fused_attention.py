"""Issue 27 item 1 for JAX: under ``attention=fused`` the composites called without a trace
run jax.nn.dot_product_attention (is_causal for a causal mask, a compact mask otherwise),
and take the explicit path where the built-in disagrees with the spec (float64: its logits
are float32; a NaN in a value; a row with no key is set to 0 here)."""

import numpy as np
import pytest
from attnspec.spec.errors import ConfigError

pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")

from attnspec.backends.jax import JaxBackend, attention_path, layers
from attnspec.backends.jax import attention as A
from attnspec.spec.trace import Trace

B, T, D, H, H_KV, F_ = 2, 6, 16, 4, 2, 24


@pytest.fixture
def fused_calls(monkeypatch):
    """Each call of the fused kernel: (mask shape or None, causal)."""
    calls, real = [], A._fused

    def spy(q, k, v, mask, c, causal):
        calls.append((None if mask is None else tuple(mask.shape), causal))
        return real(q, k, v, mask, c, causal)
    monkeypatch.setattr(A, "_fused", spy)
    return calls


def _params(dtype):
    rng = np.random.default_rng(0)

    def r(*shape):
        return (rng.standard_normal(shape) / shape[0] ** 0.5).astype(dtype)
    k = D // H
    return {"attn_norm.gamma": 1 + r(D), "ffn_norm.gamma": 1 + r(D), "attn.w_q": r(D, H * k),
            "attn.w_k": r(D, H_KV * k), "attn.w_v": r(D, H_KV * k), "attn.w_o": r(H * k, D),
            "ffn.w_gate": r(D, F_), "ffn.w_up": r(D, F_), "ffn.w_down": r(F_, D)}, r(B, T, D)


def _llama(x, p, mask=None, **kw):
    return np.asarray(layers.llama_layer(x, mask, num_heads=H, num_kv_heads=H_KV, params=p, **kw))


def test_the_fused_option_runs_llama_causal_without_weights(fused_calls):
    p, x = _params(np.float32)
    y = JaxBackend(attention="fused").function("llama_layer", "layers")(
        x, num_heads=H, num_kv_heads=H_KV, params=p)
    assert fused_calls == [((T, T), True)]
    np.testing.assert_allclose(np.asarray(y), _llama(x, p), rtol=1e-5, atol=1e-6)


def test_a_padded_mask_stays_compact_and_empty_rows_are_zero(fused_calls):
    p, x = _params(np.float32)
    keep = np.ones((B, 1, 1, T), bool)
    keep[0, ..., :2] = False  # rows 0 and 1 of batch 0 attend nothing
    with attention_path("fused"):
        y = _llama(x, p, keep)
    assert fused_calls == [((B, 1, T, T), False)]
    np.testing.assert_allclose(y, _llama(x, p, keep), rtol=1e-5, atol=1e-6)


def test_float64_and_non_finite_values_take_the_explicit_path(fused_calls):
    p, x = _params(np.float64)
    with attention_path("fused"):
        _llama(x, p)
    p32, x32 = _params(np.float32)
    x32[1, 2, 3] = np.nan  # only row 1 of the batch becomes NaN in the spec
    with attention_path("fused"):
        y = _llama(x32, p32)
    assert fused_calls == []
    assert np.isfinite(y[0]).all()


def test_a_trace_gets_the_weights(fused_calls):
    p, x = _params(np.float32)
    trace = Trace()
    with attention_path("fused"):
        _llama(x, p, trace=trace)
    assert fused_calls == [] and trace.as_dict()["attn.weights"].shape == (B, H, T, T)


def test_an_unknown_attention_option_is_a_config_error():
    with pytest.raises(ConfigError, match="attention='flash'"):
        JaxBackend(attention="flash")
