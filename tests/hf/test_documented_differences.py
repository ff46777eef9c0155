"""What spec/components/huggingface.md says transformers does, asserted on the installed
release: when a release changes one of these behaviours, this fails and the page is stale."""

import math

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnspec.backends.numpy import positional
from attnspec.backends.torch import hf
from transformers import BertConfig
from transformers.models.bert import modeling_bert
from transformers.models.llama import modeling_llama

from .small import DT, gpt2, llama, torch, x_of

F32 = torch.float32


def test_bert_layer_norm_eps_is_1e_12():
    assert BertConfig().layer_norm_eps == 1e-12


def test_gpt2_block_is_causal_only_through_the_mask_gpt2_model_builds():
    m, x = gpt2(), x_of(1, 4, 12)
    later = x.clone()
    later[0, -1] = x_of(1, 1, 12, seed=7)[0, 0]  # change the last token only
    free = hf.forward(m, later)[0, 0] - hf.forward(m, x)[0, 0]
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    masked = hf.forward(m, later, causal)[0, 0] - hf.forward(m, x, causal)[0, 0]
    assert free.abs().max() > 1e-3 and torch.equal(masked, torch.zeros_like(masked))


def test_gpt2_conv1d_stores_w_as_in_by_out():
    m, x = gpt2(), x_of(1, 3, 12)
    w, b = m.attn.c_attn.weight, m.attn.c_attn.bias
    assert tuple(w.shape) == (12, 36)
    torch.testing.assert_close(m.attn.c_attn(x), x @ w + b, rtol=1e-15, atol=1e-15)


def test_a_row_with_nothing_to_attend_to_gets_uniform_weights():
    """HF's additive mask adds finfo.min to every key of the row: the spec gives zeros."""
    q, k, v = (x_of(1, 1 * n, 4, seed=s).reshape(1, 1, n, 4) for s, n in ((1, 3), (2, 5), (3, 5)))
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1] = False
    module = torch.nn.Module().eval()
    _, w = modeling_bert.eager_attention_forward(module, q, k, v, hf.additive_mask(keep, DT),
                                                 scaling=0.5)
    assert torch.equal(w[0, 0, 1], torch.full((5,), 1 / 5, dtype=DT))


def test_llama_rms_norm_computes_in_float32_for_float64_input():
    m, x = llama(), x_of(2, 3, 16)
    n = m.input_layernorm
    x32 = x.to(F32)
    in_float32 = n.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True)
                                               + n.variance_epsilon)).to(DT)
    got = n(x)
    assert got.dtype == DT and torch.equal(got, in_float32)


def test_llama_rope_angles_are_float32_for_float64_input():
    m, x = llama(), x_of(1, 50, 16)
    rotary = modeling_llama.LlamaRotaryEmbedding(m.self_attn.config)
    cos, _ = rotary(x, torch.arange(50)[None])
    k = m.self_attn.head_dim
    inv = 1.0 / (100.0 ** (torch.arange(0, k, 2, dtype=F32) / k))
    angle = torch.arange(50, dtype=F32)[:, None] * inv
    assert cos.dtype == DT
    assert torch.equal(cos[0], torch.cat([angle, angle], -1).cos().to(DT))
    exact = torch.cat([angle, angle], -1).to(DT)  # not the float64 angles: ~1e-6 apart at p=49
    assert (cos[0] - exact.cos()).abs().max() > 1e-9


def test_llama_eager_softmax_is_float32_for_float64_input():
    m = llama()
    q, k = x_of(1, 8, 6).reshape(1, 1, 8, 6).expand(1, 4, 8, 6), x_of(1, 8, 6, seed=2)
    k = k.reshape(1, 1, 8, 6).expand(1, 2, 8, 6)
    _, w = modeling_llama.eager_attention_forward(m.self_attn, q, k, k, None, scaling=1.0)
    scores = q @ modeling_llama.repeat_kv(k, 2).transpose(2, 3)
    assert w.dtype == DT
    assert torch.equal(w, torch.softmax(scores, -1, dtype=F32).to(DT))
    assert not torch.equal(w, torch.softmax(scores, -1))


def test_llama_rotate_half_is_the_spec_rope_half_convention():
    x = x_of(1, 6, 8).reshape(1, 1, 6, 8)
    angle = torch.arange(2, 8, dtype=DT)[:, None] * 100.0 ** (-torch.arange(0, 8, 2, dtype=DT) / 8)
    emb = torch.cat([angle, angle], -1)[None]  # positions 2..7, (1, T, K)
    got, _ = modeling_llama.apply_rotary_pos_emb(x, x, emb.cos(), emb.sin())
    half = positional.rope(x.numpy(), offset=2, base=100.0, convention="half")
    interleaved = positional.rope(x.numpy(), offset=2, base=100.0, convention="interleaved")
    np.testing.assert_allclose(got.numpy(), half, rtol=1e-14, atol=1e-15)
    assert not np.allclose(got.numpy(), interleaved)


def test_llama_scales_scores_by_one_over_sqrt_head_dim():
    m = llama()
    assert math.isclose(m.self_attn.scaling, 1 / math.sqrt(m.self_attn.head_dim), rel_tol=1e-15)
