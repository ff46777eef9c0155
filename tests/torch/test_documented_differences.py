"""What spec/components/pytorch.md (and mha.md) say PyTorch does, asserted on the installed
torch: when a release changes one of these behaviours, this fails and the page is stale.

Runs in the torch-cpu tox environment; torch missing there is an import error, not a skip.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attnspec.spec.vectors import default_spec

DT = torch.float64


def _qkv(t=3, s=5, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 1, n, d, generator=g, dtype=DT) for n in (t, s, s))


def _row_masked(t=3, s=5, row=1):
    keep = torch.ones(t, s, dtype=torch.bool)  # True = may attend
    keep[row] = False
    return keep


def _mha(e=8, h=2, seed=0):
    """nn.MultiheadAttention with every parameter nonzero (so b_o is visible)."""
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(e, h, batch_first=True, dtype=DT)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    return m


# -- rows with nothing to attend to ----------------------------------------------------------


def test_explicit_softmax_of_a_fully_masked_row_is_nan():
    q, k, _ = _qkv()
    scores = (q @ k.transpose(-1, -2)).masked_fill(~_row_masked(), -math.inf)
    w = torch.softmax(scores, dim=-1)
    assert torch.isnan(w[0, 0, 1]).all()
    assert torch.isfinite(w[0, 0, [0, 2]]).all()


@pytest.mark.parametrize("form", ["bool", "float"])
def test_sdpa_gives_a_zero_row_where_nothing_is_kept(form):
    q, k, v = _qkv()
    keep = _row_masked()
    attn = keep if form == "bool" else torch.zeros(keep.shape, dtype=DT).masked_fill(~keep, -math.inf)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn)  # (1, 1, T, V)
    assert torch.equal(out[0, 0, 1], torch.zeros(4, dtype=DT))
    expected = torch.softmax((q @ k.transpose(-1, -2)) / 2.0, -1) @ v  # rows 0, 2: nothing masked
    torch.testing.assert_close(out[0, 0, [0, 2]], expected[0, 0, [0, 2]], rtol=1e-12, atol=1e-12)


# -- non-finite inputs (sdpa.md, softmax.md: Edge cases) ----------------------------------------


def test_sdpa_lets_a_nan_value_of_a_masked_key_reach_the_output():
    q, k, v = _qkv()
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[:, 4] = False  # key 4 masked for every query
    v = v.clone()
    v[0, 0, 4, 0] = math.nan
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # weight 0 * NaN
    assert torch.isnan(out[0, 0, :, 0]).all() and torch.isfinite(out[0, 0, :, 1:]).all()


def test_softmax_and_sdpa_give_nan_for_pos_inf_scores():
    assert torch.isnan(torch.softmax(torch.tensor([1.0, math.inf, math.inf], dtype=DT), -1)).all()
    q, k, v = _qkv()
    bias = torch.zeros(3, 5, dtype=DT)
    bias[1, 2] = math.inf
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert torch.isnan(out[0, 0, 1]).all()  # the spec: weight 1 on key 2, output v[2]


def _mha_masked_row(m, *, need_weights, grad, train):
    x = torch.randn(2, 3, 8, dtype=DT, generator=torch.Generator().manual_seed(1))
    masked = ~_row_masked(3, 3)  # PyTorch: True = masked out
    m.train(train)
    with torch.set_grad_enabled(grad):
        out, w = m(x, x, x, attn_mask=masked, need_weights=need_weights)
    return out.detach(), (None if w is None else w.detach())


@pytest.mark.parametrize("grad,train", [(True, False), (False, False), (True, True)])
def test_mha_returning_weights_gives_nan_on_a_fully_masked_row(grad, train):
    out, w = _mha_masked_row(_mha(), need_weights=True, grad=grad, train=train)
    assert torch.isnan(out[:, 1]).all() and torch.isnan(w[:, 1]).all()
    assert torch.isfinite(out[:, [0, 2]]).all()


def test_mha_fast_path_gives_nan_on_a_fully_masked_row():
    out, _ = _mha_masked_row(_mha(), need_weights=False, grad=False, train=False)
    assert torch.isnan(out[:, 1]).all()


@pytest.mark.parametrize("grad,train", [(True, False), (True, True), (False, True)])
def test_mha_without_weights_outside_the_fast_path_gives_b_o(grad, train):
    m = _mha()
    out, w = _mha_masked_row(m, need_weights=False, grad=grad, train=train)
    assert w is None
    b_o = m.out_proj.bias.detach()
    assert not torch.equal(b_o, torch.zeros_like(b_o))
    torch.testing.assert_close(out[:, 1], b_o.expand(2, -1), rtol=0, atol=1e-14)


# -- causal alignment ------------------------------------------------------------------------


def test_sdpa_is_causal_is_top_left_where_the_spec_is_bottom_right():
    spec_mask = default_spec().vector("masks/causal-002").outputs["mask"]  # T=2, S=5, bottom-right
    t, s = spec_mask.shape
    q, k, v = _qkv(t, s)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = torch.ones(t, s, dtype=torch.bool).tril()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left),
                               rtol=1e-12, atol=1e-12)
    spec = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(spec_mask))
    assert not np.array_equal(top_left.numpy(), spec_mask)
    assert (out - spec).abs().max() > 1e-3


# -- nn.TransformerEncoder's nested-tensor path ----------------------------------------------


def _encoder(nested):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=DT)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested).eval()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_transformer_encoder_nested_tensor_path_zeroes_padded_rows():
    x = torch.randn(2, 4, 8, dtype=DT, generator=torch.Generator().manual_seed(2))
    pad = torch.tensor([[False] * 4, [False, False, True, True]])  # True = padding
    with torch.no_grad():
        nested = _encoder(True)(x, src_key_padding_mask=pad)
        plain = _encoder(False)(x, src_key_padding_mask=pad)
    with torch.enable_grad():  # not the inference fast path: padded rows keep their values
        graded = _encoder(True)(x, src_key_padding_mask=pad).detach()
    assert torch.equal(nested[1, 2:], torch.zeros(2, 8, dtype=DT))
    torch.testing.assert_close(graded, plain, rtol=1e-12, atol=1e-12)
    assert plain[1, 2:].abs().min() > 0  # the padded rows do have values
    torch.testing.assert_close(nested[:, :2], plain[:, :2], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nested[0], plain[0], rtol=1e-12, atol=1e-12)


# -- mha.md: widths and averaged weights ------------------------------------------------------


def test_mha_kdim_vdim_set_input_widths_only():
    m = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    assert m.head_dim == 4 and m.in_proj_weight is None
    assert tuple(m.q_proj_weight.shape) == (8, 8)
    assert tuple(m.k_proj_weight.shape) == (8, 5) and tuple(m.v_proj_weight.shape) == (8, 3)
    assert tuple(m.out_proj.weight.shape) == (8, 8)
    packed = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    assert tuple(packed.in_proj_weight.shape) == (24, 8)


def test_mha_averages_weights_over_heads_by_default():
    m = _mha().eval()
    x = torch.randn(2, 3, 8, dtype=DT)
    with torch.no_grad():
        _, avg = m(x, x, x)
        _, per_head = m(x, x, x, average_attn_weights=False)
    assert tuple(avg.shape) == (2, 3, 3) and tuple(per_head.shape) == (2, 2, 3, 3)
    torch.testing.assert_close(avg, per_head.mean(1), rtol=1e-12, atol=1e-14)
