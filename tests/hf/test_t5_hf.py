"""transformers' T5Stack (tiny local configs, random weights, no download) judged against the
spec's t5_encoder / t5_decoder through backends/torch/hf_t5.py, and the convention
differences of spec/components/huggingface.md (T5) asserted against the installed release."""

import numpy as np
import pytest
import torch
from attnspec.backends import _checks as check
from attnspec.backends.numpy import models as spec_models
from attnspec.backends.torch.hf_t5 import t5_stack_from_hf
from attnspec.spec.errors import ConfigError
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention, T5Stack


def _stack(decoder: bool, feed_forward: str, seed: int = 0) -> T5Stack:
    torch.manual_seed(seed)
    config = T5Config(d_model=8, d_kv=4, num_heads=2, d_ff=16, num_layers=2, num_decoder_layers=2,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16,
                      feed_forward_proj=feed_forward, dropout_rate=0.0, vocab_size=4,
                      is_decoder=decoder, use_cache=False)
    stack = T5Stack(config).eval().double()
    with torch.no_grad():  # T5's init gives tiny q/k: widen them so the scores matter
        for p in stack.parameters():
            p.normal_(0.0, 0.5)
    return stack


# transformers computes T5LayerNorm's variance and the attention softmax in float32 even for a
# float64 module: judged at the t5 vectors' float32 tolerance (spec/cases/encoder_layer.py "stack").
F32 = {"rtol": 2e-5, "atol": 1e-5}


def _numpy(params):
    return {k: v.numpy() for k, v in params.items()}


@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
def test_t5_encoder_stack_matches_the_spec(feed_forward):
    stack = _stack(False, feed_forward)
    name, attrs, params = t5_stack_from_hf(stack)
    assert name == "t5_encoder" and attrs["feed_forward"] == feed_forward
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    keep = torch.ones(2, 7, dtype=torch.long)
    keep[1, 5:] = 0
    with torch.no_grad():
        want = stack(inputs_embeds=x, attention_mask=keep).last_hidden_state.numpy()
    got = spec_models.t5_encoder(x.numpy(), keep.numpy().astype(bool)[:, None, None, :],
                                 **attrs, params=_numpy(params))
    np.testing.assert_allclose(got, want, **F32)


@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
def test_t5_decoder_stack_matches_the_spec(feed_forward):
    stack = _stack(True, feed_forward, seed=1)
    name, attrs, params = t5_stack_from_hf(stack)
    assert name == "t5_decoder"
    x, memory = torch.randn(2, 8, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        want = stack(inputs_embeds=x, encoder_hidden_states=memory).last_hidden_state.numpy()
    got = spec_models.t5_decoder(x.numpy(), memory.numpy(), **attrs, params=_numpy(params))
    np.testing.assert_allclose(got, want, **F32)


def test_a_wrong_convention_in_the_spec_call_would_show():
    """The comparison can fail: the decoder called with encoder-sized buckets differs."""
    stack = _stack(True, "relu", seed=2)
    _, attrs, params = t5_stack_from_hf(stack)
    x, memory = torch.randn(1, 8, 8, dtype=torch.float64), torch.randn(1, 3, 8, dtype=torch.float64)
    with torch.no_grad():
        want = stack(inputs_embeds=x, encoder_hidden_states=memory).last_hidden_state.numpy()
    got = spec_models.t5_decoder(x.numpy(), memory.numpy(), **{**attrs, "max_distance": 9},
                                 params=_numpy(params))
    assert not np.allclose(got, want, rtol=1e-6)


def test_hf_computes_parts_of_a_float64_t5_in_float32():
    """Why F32: the float64 module's T5LayerNorm variance is float32 (a documented difference)."""
    stack = _stack(False, "relu")
    norm = stack.final_layer_norm
    x = torch.full((1, 1, 8), 1 / 3, dtype=torch.float64) * torch.arange(1, 9, dtype=torch.float64)
    exact = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * norm.weight
    with torch.no_grad():
        assert not torch.equal(norm(x), exact)
        torch.testing.assert_close(norm(x), exact, rtol=1e-6, atol=1e-7)


def test_other_feed_forward_is_refused():
    stack = _stack(False, "relu")
    stack.config.dense_act_fn = "gelu"
    with pytest.raises(ConfigError, match="feed_forward_proj"):
        t5_stack_from_hf(stack)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("n_buckets,m", [(8, 16), (32, 128), (12, 40)])
def test_hf_buckets_equal_the_spec_buckets(bidirectional, n_buckets, m):
    """transformers' float32 log buckets equal the spec's integer rule on these configs."""
    t, s, offset = 3, 400, 150
    rel = torch.arange(s)[None, :] - (offset + torch.arange(t))[:, None]
    hf = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                               num_buckets=n_buckets, max_distance=m)
    np.testing.assert_array_equal(hf.numpy(), check.t5_buckets(t, s, bidirectional, n_buckets, m, offset))


def test_hf_later_blocks_own_no_table_and_cross_attention_has_no_bias():
    """The documented differences, on the installed release: only block 0's self-attention
    has relative_attention_bias; EncDecAttention never has one; no 1/sqrt(d) in T5Attention."""
    stack = _stack(True, "relu")
    assert stack.block[0].layer[0].SelfAttention.has_relative_attention_bias
    assert not stack.block[1].layer[0].SelfAttention.has_relative_attention_bias
    assert not any(b.layer[1].EncDecAttention.has_relative_attention_bias for b in stack.block)
    attn = stack.block[0].layer[0].SelfAttention
    assert not hasattr(attn, "scaling") or attn.scaling in (None, 1, 1.0)
