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


# transformers computes T5LayerNorm's variance in float32 even for a float64 module (older
# releases the attention softmax too): judged at the t5 vectors' float32 tolerance
# (spec/cases/encoder_layer.py "stack").
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


# -- to_hf (spec -> T5Stack, T5Block) and the T5Block converter (issue 25, item 6) ---------------

from attnspec.backends.torch import extras, hf, hf_t5  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402


@pytest.mark.parametrize("decoder", [False, True])
@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
def test_t5_stack_round_trip_is_exact(decoder, feed_forward):
    stack = _stack(decoder, feed_forward, seed=3)
    kind, attrs, params = t5_stack_from_hf(stack)
    back = hf.to_hf(params, attrs)
    assert isinstance(back, T5Stack) and back.config.is_decoder == decoder
    attrs_back, params_back = hf.from_hf(back)
    assert attrs_back == attrs and params_back.keys() == params.keys()
    assert all(torch.equal(params_back[k], params[k]) for k in params)
    for k, v in stack.state_dict().items():
        if k != "embed_tokens.weight":
            assert torch.equal(v, back.state_dict()[k]), k


def test_hf_forward_with_spec_masks_equals_transformers_own_masks():
    """hf_t5.forward's 4-D additive masks (causal put in for the decoder) give what the stack
    computes from its own 2-D attention masks."""
    enc, dec = _stack(False, "relu", seed=4), _stack(True, "gated-gelu", seed=5)
    x, memory = torch.randn(2, 6, 8, dtype=torch.float64), torch.randn(2, 4, 8, dtype=torch.float64)
    keep, mem_keep = torch.ones(2, 6, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)
    keep[1, 4:], mem_keep[0, 3:] = 0, 0
    with torch.no_grad():
        want_enc = enc(inputs_embeds=x, attention_mask=keep).last_hidden_state
        want_dec = dec(inputs_embeds=x, encoder_hidden_states=memory,
                       encoder_attention_mask=mem_keep).last_hidden_state
    spec_keep = keep.bool()[:, None, None, :]
    torch.testing.assert_close(hf_t5.forward(enc, x, spec_keep), want_enc, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hf_t5.forward(dec, x, None, memory, mem_keep.bool()[:, None, None, :]),
                               want_dec, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("decoder", [False, True])
def test_t5_blocks_chained_with_the_first_blocks_bias_equal_the_stack(decoder):
    """T5Block converter: each block converted alone (from_hf, to_hf), the first computing the
    position bias and every later one given it, then final_norm: the stack's output."""
    stack = _stack(decoder, "gated-gelu", seed=6)
    x, memory = torch.randn(1, 5, 8, dtype=torch.float64), torch.randn(1, 3, 8, dtype=torch.float64)
    h, bias = x, None
    for i, block in enumerate(stack.block):
        attrs, params = hf.from_hf(block)
        assert ("self_attn.rel_bias.table" in params or "attn.rel_bias.table" in params) == (i == 0)
        rebuilt = hf_t5.t5_block_to_hf(params, attrs, decoder=decoder, layer_idx=i)
        h, bias = hf_t5.forward_block(rebuilt, h, memory=memory if decoder else None,
                                      position_bias=bias)
    with torch.no_grad():
        y = stack.final_layer_norm(h)
    torch.testing.assert_close(y, hf_t5.forward(stack, x, memory=memory if decoder else None),
                               rtol=1e-12, atol=1e-12)


def test_a_later_block_without_the_bias_is_refused():
    stack = _stack(False, "relu")
    with pytest.raises(Exception, match="position_bias"):
        hf_t5.forward_block(stack.block[1], torch.randn(1, 3, 8, dtype=torch.float64))


def test_to_hf_refuses_what_t5_cannot_hold():
    _, attrs, params = t5_stack_from_hf(_stack(False, "relu"))
    with pytest.raises(ConfigError, match="feed_forward"):
        hf.to_hf(params, {**attrs, "feed_forward": "swiglu"})
    with pytest.raises(Exception, match="layers.1.attn.rel_bias.table"):
        hf.to_hf({**params, "layers.1.attn.rel_bias.table": params["layers.0.attn.rel_bias.table"]},
                 attrs)


def _t5_check(kind):
    name = "T5Block" if kind == "blocks" else f"T5Stack.{kind}"
    return dict(extras.hf_checks("cpu"))[f"agree/transformers.{name}"]


@pytest.mark.parametrize("kind", ["encoder", "decoder", "blocks"])
def test_the_t5_extra_checks_pass_on_the_golden_vectors(kind):
    _t5_check(kind)(default_spec())


def test_the_t5_extra_check_rejects_a_planted_bug(monkeypatch):
    """A converter that scales the scores by 1/sqrt(d_kv) (the usual attention) fails."""
    real = hf_t5.t5_stack_to_hf

    def scaled(params, attributes, decoder=None):
        stack = real(params, attributes, decoder)
        for block in stack.block:
            for layer in block.layer[:-1]:
                attn = getattr(layer, "SelfAttention", None) or layer.EncDecAttention
                with torch.no_grad():
                    attn.q.weight.mul_(attn.key_value_proj_dim ** -0.5)
        return stack
    monkeypatch.setattr(hf_t5, "t5_stack_to_hf", scaled)
    with pytest.raises(AssertionError, match="T5Stack"):
        _t5_check("encoder")(default_spec())


def test_a_4d_mask_replaces_the_decoders_causal_mask():
    """Why hf_t5.forward puts the causal mask in: a 4-D attention_mask of zeros (attend to
    everything) given to a decoder T5Stack is used as it is, so later tokens change earlier
    outputs; without it the stack is causal."""
    dec = _stack(True, "relu", seed=7)
    x, memory = torch.randn(1, 4, 8, dtype=torch.float64), torch.randn(1, 3, 8, dtype=torch.float64)
    later = x.clone()
    later[0, -1] += 1.0
    zeros = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    with torch.no_grad():
        def first(inp, mask):
            return dec(inputs_embeds=inp, encoder_hidden_states=memory,
                       attention_mask=mask).last_hidden_state[0, 0]
        assert torch.equal(first(x, None), first(later, None))
        assert not torch.allclose(first(x, zeros), first(later, zeros))
