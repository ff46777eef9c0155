"""Project tests of the PyTorch backend's idiomatic layer: converter round trips (exact),
modules' state_dict / load_spec / .to / autograd / torch.compile, the fused path.
Skipped (only) where torch is not installed: the ``numpy`` tox environment."""

import pytest

torch = pytest.importorskip("torch")

from attnspec.backends.torch import convert  # noqa: E402
from attnspec.backends.torch.extras import (  # noqa: E402
    _ffn_params,
    _ln_params,
    _mha_params,
)
from attnspec.backends.torch.modules import (  # noqa: E402
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
)
from attnspec.spec.errors import DeviceError, DTypeError, ParameterError  # noqa: E402


def _detached(p):
    return {k: v.detach() for k, v in p.items()}


def _encoder_params(d=8, f=16):
    p = _mha_params(d, d, "cpu", "self_attn.")
    for extra in (_ln_params(d, "cpu", "norm1."), _ffn_params(d, f, "cpu", "ffn."),
                  _ln_params(d, "cpu", "norm2.")):
        p.update(extra)
    return _detached(p)


def _decoder_params(d=8, f=16):
    p = _mha_params(d, d, "cpu", "self_attn.")
    for extra in (_ln_params(d, "cpu", "norm1."), _mha_params(d, d, "cpu", "cross_attn."),
                  _ln_params(d, "cpu", "norm2."), _ffn_params(d, f, "cpu", "ffn."),
                  _ln_params(d, "cpu", "norm3.")):
        p.update(extra)
    return _detached(p)


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_mha_round_trip_is_exact():
    p = _detached(_mha_params(8, 8, "cpu"))
    _same(convert.mha_from_torch(convert.mha_to_torch(p, num_heads=2)), p)


def test_mha_round_trip_kdim_vdim_is_exact():
    p = _detached(_mha_params(8, 8, "cpu"))
    p["w_k"] = torch.rand(5, 8, dtype=torch.float64)
    p["w_v"] = torch.rand(3, 8, dtype=torch.float64)
    _same(convert.mha_from_torch(convert.mha_to_torch(p, num_heads=4)), p)


def test_builtin_to_spec_to_builtin_is_exact():
    mod = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    again = convert.encoder_layer_to_torch(convert.encoder_layer_from_torch(mod), num_heads=2)
    for (k, a), (_, b) in zip(mod.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_and_decoder_layer_round_trips(norm):
    p = _encoder_params()
    _same(convert.encoder_layer_from_torch(
        convert.encoder_layer_to_torch(p, num_heads=2, norm=norm)), p)
    p = _decoder_params()
    _same(convert.decoder_layer_from_torch(
        convert.decoder_layer_to_torch(p, num_heads=2, norm=norm)), p)


def test_layer_norm_and_gru_round_trips():
    p = _detached(_ln_params(6, "cpu", ""))
    _same(convert.layer_norm_from_torch(convert.layer_norm_to_torch(p)), p)
    gru = torch.nn.GRU(3, 4, batch_first=True, dtype=torch.float64)
    spec = convert.gru_from_torch(gru)
    _same(convert.gru_from_torch(convert.gru_to_torch(spec)), spec)


def test_gru_matches_builtin():
    from attnspec.backends.torch.rnn import gru

    mod = torch.nn.GRU(3, 4, batch_first=True, dtype=torch.float64)
    x = torch.rand(2, 5, 3, dtype=torch.float64)
    out, h = gru(x, params=convert.gru_from_torch(mod))
    ref, h_ref = mod(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h, h_ref[0])


def test_module_state_dict_keys_are_spec_paths_and_load_spec():
    p = _encoder_params()
    m = EncoderLayer.from_spec(p, num_heads=2)
    assert list(m.state_dict()) == list(p)
    _same(m.spec_params(), p)
    m2 = EncoderLayer.from_spec({k: torch.zeros_like(v) for k, v in p.items()}, num_heads=2)
    m2.load_state_dict(m.state_dict())
    _same(m2.spec_params(), p)
    with pytest.raises(ParameterError, match="self_attn.w_q"):
        m2.load_spec({**p, "self_attn.w_q": torch.zeros(3, 3, dtype=torch.float64)})


def test_module_paths_agree_and_autograd_and_to():
    p = _encoder_params()
    m = EncoderLayer.from_spec(p, num_heads=2)
    x = torch.rand(2, 5, 8, dtype=torch.float64)
    explicit, fused = m(x, need_weights=True), m(x)
    torch.testing.assert_close(explicit, fused)
    fused.sum().backward()
    assert all(v.grad is not None for v in m.parameters())
    m32 = m.to(torch.float32)
    assert m32(x.float()).dtype == torch.float32


def test_module_matches_builtin_decoder_layer():
    p = _decoder_params()
    m = DecoderLayer.from_spec(p, num_heads=2)
    ref = convert.decoder_layer_to_torch(p, num_heads=2)
    x, mem = torch.rand(2, 4, 8, dtype=torch.float64), torch.rand(2, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(m(x, mem), ref(x, mem))


def test_mha_module_fused_and_explicit():
    mod = MultiHeadAttention.from_spec(_detached(_mha_params(8, 8, "cpu")), num_heads=2)
    x = torch.rand(2, 5, 8, dtype=torch.float64)
    out, w = mod(x)
    fast, none = mod(x, need_weights=False)
    assert none is None and w.shape == (2, 2, 5, 5)
    torch.testing.assert_close(out, fast)


def test_compile():
    m = EncoderLayer.from_spec({k: v.float() for k, v in _encoder_params().items()},
                               num_heads=2).eval()
    x = torch.rand(2, 5, 8)
    torch.testing.assert_close(torch.compile(m)(x), m(x))


def test_error_contract_device_and_dtype():
    from attnspec.backends.torch.attention import sdpa

    q = torch.zeros(1, 2, 4)
    with pytest.raises(DeviceError, match="meta"):
        sdpa(q, torch.zeros(1, 3, 4, device="meta"), torch.zeros(1, 3, 4))
    with pytest.raises(DTypeError, match="q"):
        sdpa(q.long(), q, q)


def test_torch_ops_provide_the_whole_composite_surface():
    import importlib

    from attnspec.backends.composite import OPS

    ops = importlib.import_module("attnspec.backends.torch.ops")
    assert [name for name in OPS if not callable(getattr(ops, name, None))] == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_masked_softmax_keeps_its_dtype(dtype):
    """The fill for masked entries is made from two Python scalars (float32 by default):
    it must not promote a float16/bfloat16 softmax to float32."""
    from attnspec.backends.torch.attention import softmax

    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]], dtype=dtype)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    y = softmax(x, mask)
    assert y.dtype == dtype
    want = torch.softmax(torch.tensor([0.5, 2.0], dtype=torch.float64), dim=0)
    torch.testing.assert_close(y[0, [0, 2]].double(), want, rtol=1e-2, atol=1e-3)
    assert torch.equal(y[0, 1], torch.zeros((), dtype=dtype)) and not bool(y[1].any())
