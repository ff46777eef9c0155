"""beam_search (spec/components/beam_search.md) against transformers' `generate(num_beams=...)`
of the installed release, on a random LlamaForCausalLM (tests/hf/small.py, no download)
converted by backends/torch/hf.py: the same hypotheses, the same scores (transformers
computes them in float32), and the differences spec/components/huggingface.md names."""

import numpy as np
import pytest

pytest.importorskip("transformers")  # as the other tests/hf modules: run by tox -e hf

import torch
from attnspec.backends.numpy import decoding
from attnspec.backends.torch.hf import from_hf

from .small import llama_lm, randomized

EOS, PAD = 2, 0


def _llama(seed, eos_gain):
    """A random float64 LlamaForCausalLM (vocabulary 16, H = 4, H_kv = 2) with spread
    logits, EOS's LM-head row scaled by eos_gain and pad_id's made small (transformers never
    masks a generated pad token's key; the spec does, as greedy_decode does)."""
    model = randomized(llama_lm(num_hidden_layers=1, vocab_size=16), seed=seed)
    with torch.no_grad():
        w = model.lm_head.weight
        w.mul_(3.0)
        w[EOS].mul_(eos_gain)
        w[PAD].mul_(0.125)
    return model


def _both(model, prompt, max_len, **beam):
    attrs, params = from_hf(model)
    attrs = {k: v for k, v in attrs.items() if k != "pad_id"}
    ours = decoding.beam_search(prompt, model="llama_decoder_only", bos_id=1, eos_id=EOS,
                                pad_id=PAD, max_len=max_len, norm="pre", activation="silu",
                                params={k: np.asarray(v) for k, v in params.items()},
                                **attrs, **beam)
    ids = torch.tensor(prompt)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_length=max_len, eos_token_id=EOS, pad_token_id=PAD,
                         num_beams=beam["num_beams"],
                         num_return_sequences=beam["num_return_sequences"],
                         length_penalty=beam["length_penalty"],
                         early_stopping=beam["early_stopping"], output_scores=True,
                         return_dict_in_generate=True)
    return ours, out


def _as_spec(sequences, b, r, max_len):
    """transformers' (B*R, T <= max_len) result as the spec's (B, R, max_len): padded with
    pad_id after EOS (transformers fills with `pad_token_id or eos_token_id`, so EOS here)."""
    x = np.full((b * r, max_len), PAD, dtype=np.int64)
    seqs = sequences.numpy()
    x[:, :seqs.shape[1]] = seqs
    for row in x:
        gen = list(row[2:])
        if EOS in gen:
            row[2 + gen.index(EOS) + 1:] = PAD
    return x.reshape(b, r, max_len)


CASES = [(1.0, False, 2, 2, 1.0), (0.0, True, 2, 1, 2.0), (2.0, "never", 3, 3, 2.0),
         (1.0, True, 3, 2, 3.0), (-1.0, False, 2, 2, 2.0)]


@pytest.mark.parametrize(("alpha", "early_stopping", "k", "r", "eos_gain"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_equals_transformers_generate(seed, alpha, early_stopping, k, r, eos_gain):
    prompt, max_len = np.array([[1, 5], [1, 9]]), 7
    p = _llama(seed, eos_gain)
    (ids, scores), out = _both(p, prompt, max_len, num_beams=k, num_return_sequences=r,
                               length_penalty=alpha, early_stopping=early_stopping)
    np.testing.assert_array_equal(_as_spec(out.sequences, 2, r, max_len), ids)
    np.testing.assert_allclose(out.sequences_scores.numpy().reshape(2, r), scores, rtol=2e-6,
                               atol=2e-6)


def test_transformers_fills_with_eos_when_pad_token_id_is_zero():
    """Documented difference: `pad_token_id or eos_token_id` is EOS for pad_token_id = 0, and
    the result is cut to the longest returned hypothesis; the spec pads with pad_id to
    max_len."""
    prompt, max_len = np.array([[1, 5], [1, 9]]), 7
    for seed in range(20):
        p = _llama(seed, 3.0)
        (ids, _), out = _both(p, prompt, max_len, num_beams=2, num_return_sequences=2,
                              length_penalty=1.0, early_stopping=False)
        ended = [(b, h) for b in range(2) for h in range(2)
                 if EOS in ids[b, h, 2:-1].tolist()]
        if ended:
            break
    else:
        pytest.fail("no seed ends a hypothesis before max_len")
    seqs = out.sequences.numpy().reshape(2, 2, -1)
    b, h = ended[0]
    end = 2 + ids[b, h, 2:].tolist().index(EOS)
    assert (ids[b, h, end + 1:] == PAD).all()
    assert (seqs[b, h, end + 1:] == EOS).all() and seqs.shape[-1] <= max_len


def test_transformers_scores_in_float32_whatever_the_model_dtype():
    """Documented difference: the model here is float64, transformers' scores are float32
    (it casts the logits to float32 before the log-softmax); the spec's are the parameters'
    dtype."""
    p = _llama(0, 1.0)
    (_, scores), out = _both(p, np.array([[1, 5]]), 5, num_beams=2, num_return_sequences=1,
                             length_penalty=1.0, early_stopping=False)
    assert scores.dtype == np.float64 and out.sequences_scores.dtype == torch.float32
