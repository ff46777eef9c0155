"""Issue 27 item 1: where no weights are asked for, attention takes PyTorch's fused kernel
with a compact mask (``is_causal=True`` for a causal one), never the (B, H, T, S) scores.

What reaches ``F.scaled_dot_product_attention`` is recorded (a spy around it), so each test
fails if weights are computed, a mask is expanded or a causal mask is handed over as a mask.
"""

import pytest

torch = pytest.importorskip("torch")

from attnspec.backends.torch import TorchBackend, attention_path, layers, modules  # noqa: E402
from attnspec.backends.torch import attention as A  # noqa: E402
from attnspec.spec.errors import ConfigError  # noqa: E402
from attnspec.spec.trace import Trace  # noqa: E402

B, T, D, H, H_KV, F_ = 2, 6, 16, 4, 2, 24


@pytest.fixture
def kernel_calls(monkeypatch):
    """Each call of F.scaled_dot_product_attention: (attn_mask shape or None, is_causal)."""
    calls, real = [], A.F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, is_causal=False, **kw):
        calls.append((None if attn_mask is None else tuple(attn_mask.shape), is_causal))
        return real(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)
    monkeypatch.setattr(A.F, "scaled_dot_product_attention", spy)
    return calls


@pytest.fixture
def weights_made(monkeypatch):
    """How many times the explicit weights softmax(q k^T) were computed."""
    made, real = [], A._weights

    def spy(*args, **kw):
        made.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(A, "_weights", spy)
    return made


def _randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64) / shape[0] ** 0.5


def _llama_params():
    k = D // H
    return {"attn_norm.gamma": 1 + _randn(D), "ffn_norm.gamma": 1 + _randn(D, seed=1),
            "attn.w_q": _randn(D, H * k), "attn.w_k": _randn(D, H_KV * k, seed=2),
            "attn.w_v": _randn(D, H_KV * k, seed=3), "attn.w_o": _randn(H * k, D),
            "ffn.w_gate": _randn(D, F_), "ffn.w_up": _randn(D, F_, seed=4),
            "ffn.w_down": _randn(F_, D)}


def _mha_params(prefix=""):
    return {f"{prefix}w_{n}": _randn(D, D, seed=i) for i, n in enumerate("qkvo")}


def _encoder_params():
    p = {**_mha_params("self_attn."), "ffn.w1": _randn(D, F_), "ffn.b1": _randn(F_),
         "ffn.w2": _randn(F_, D), "ffn.b2": _randn(D)}
    for n in ("norm1", "norm2"):
        p[f"{n}.gamma"], p[f"{n}.beta"] = 1 + _randn(D, seed=5), _randn(D, seed=6)
    return p


def test_llama_layer_under_the_fused_option_is_causal_without_weights(kernel_calls, weights_made):
    x, p = _randn(B, T, D), _llama_params()
    fused, explicit = TorchBackend(attention="fused"), TorchBackend()
    y = fused.function("llama_layer", "layers")(x, num_heads=H, num_kv_heads=H_KV, params=p)
    assert kernel_calls == [(None, True)]  # no mask at all: is_causal
    assert weights_made == [] and fused.paths.ran == {"fused": 1}
    want = explicit.function("llama_layer", "layers")(x, num_heads=H, num_kv_heads=H_KV, params=p)
    torch.testing.assert_close(y, want)


def test_a_padded_causal_mask_stays_compact(kernel_calls, weights_made):
    x, p = _randn(B, T, D), _llama_params()
    keep = torch.ones(B, 1, 1, T, dtype=torch.bool)
    keep[0, ..., :2] = False  # the first two keys of row 0 are padding
    with attention_path("fused"):
        y = layers.llama_layer(x, keep, num_heads=H, num_kv_heads=H_KV, params=p)
    assert kernel_calls == [((B, 1, T, T), False)]  # never (B, H, T, T)
    assert weights_made == []
    want = layers.llama_layer(x, keep, num_heads=H, num_kv_heads=H_KV, params=p)  # explicit
    torch.testing.assert_close(y, want)  # rows 0, 1 of batch 0 attend nothing: zero there too


def test_encoder_layer_with_a_key_mask_hands_over_the_key_mask(kernel_calls, weights_made):
    x, p = _randn(B, T, D), _encoder_params()
    keep = torch.ones(B, 1, 1, T, dtype=torch.bool)
    keep[1, ..., -1] = False
    with attention_path("fused"):
        y = layers.encoder_layer(x, keep, num_heads=H, params=p)
    assert kernel_calls == [((B, 1, 1, T), False)]
    assert weights_made == []
    torch.testing.assert_close(y, layers.encoder_layer(x, keep, num_heads=H, params=p))


def test_a_trace_still_gets_the_weights(kernel_calls):
    x, p, trace = _randn(B, T, D), _llama_params(), Trace()
    with attention_path("fused"):
        layers.llama_layer(x, num_heads=H, num_kv_heads=H_KV, params=p, trace=trace)
    assert trace.as_dict()["attn.weights"].shape == (B, H, T, T)


def test_the_module_fast_path_is_causal(kernel_calls, weights_made):
    layer = modules.EncoderLayer.from_spec(_encoder_params(), num_heads=H)
    causal = A.causal_mask(t=T, s=T)
    layer(_randn(B, T, D), causal)
    assert kernel_calls == [(None, True)] and weights_made == []


def test_a_causal_mask_of_another_alignment_is_not_is_causal(kernel_calls):
    """PyTorch's is_causal is top-left aligned: a (T, S) mask with T < S stays a mask."""
    q, kv = _randn(B, H, 3, 4), _randn(B, H, 5, 4, seed=1)
    with attention_path("fused"), A.paths.skipping_weights(True):
        out, w = A.sdpa(q, kv, kv, A.causal_mask(t=3, s=5))
    assert w is None and kernel_calls == [((3, 5), False)]
    torch.testing.assert_close(out, A.sdpa(q, kv, kv, A.causal_mask(t=3, s=5))[0])


def test_attention_path_rejects_an_unknown_path():
    with pytest.raises(ConfigError, match="attention_path"), attention_path("flash"):
        pass
