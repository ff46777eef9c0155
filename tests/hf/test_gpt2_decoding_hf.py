"""GPT-2's tied head in decoding (issue 25) against transformers: a random tied
GPT2LMHeadModel (tiny config, no download) converted by backends/torch/hf_gpt2.py decodes as
`generate(do_sample=False)` (greedy_decode) and `generate(num_beams=K)` (beam_search) do,
through the spec's cached steps (decoder_only_step, tie_embeddings=True)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnspec.backends.numpy import decoding  # noqa: E402
from attnspec.backends.torch import hf  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from .small import randomized  # noqa: E402

EOS, PAD, MAX_LEN = 2, 0, 9
PROMPT = np.array([[1, 5], [1, 9]])


def _gpt2(seed, eos_gain=1.0, layers=2):
    """A random float64 tied GPT2LMHeadModel (vocabulary 16, D = 12, H = 3); wte scaled by 2
    (spread logits), wpe by 3 (a random tied model mostly repeats its last token; positions
    vary it), EOS's row by eos_gain, pad_id's by 1/8 (transformers never masks a generated
    pad token's key; the spec does, so pad_id must not be generated)."""
    c = GPT2Config(vocab_size=16, n_positions=MAX_LEN, n_embd=12, n_head=3, n_layer=layers,
                   n_inner=24, activation_function="gelu_new", tie_word_embeddings=True,
                   bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    model = GPT2LMHeadModel(c)
    randomized(model.transformer, seed=seed)
    with torch.no_grad():
        model.transformer.wpe.weight.mul_(3.0)
        w = model.transformer.wte.weight
        w.mul_(2.0)
        w[EOS].mul_(eos_gain)
        w[PAD].mul_(0.125)
    return model.to(torch.float64).eval()


def _spec(model):
    attrs, params = hf.from_hf(model)
    assert attrs["tie_embeddings"] is True and not any(k.startswith("lm_head.") for k in params)
    return attrs, {k: np.asarray(v) for k, v in params.items()}


def _padded(sequences, rows):
    """transformers' (rows, T <= MAX_LEN) as (rows, MAX_LEN), pad_id after EOS."""
    x = np.full((rows, MAX_LEN), PAD, dtype=np.int64)
    seqs = sequences.numpy()
    x[:, :seqs.shape[1]] = seqs
    for row in x:
        gen = list(row[2:])
        if EOS in gen:
            row[2 + gen.index(EOS) + 1:] = PAD
    return x


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("eos_gain", [1.0, 2.0])
def test_tied_greedy_decode_equals_transformers_generate(seed, eos_gain):
    model = _gpt2(seed, eos_gain)
    attrs, params = _spec(model)
    ours = decoding.greedy_decode(PROMPT, model="decoder_only", bos_id=1, eos_id=EOS,
                                  pad_id=PAD, max_len=MAX_LEN, params=params, **attrs)
    ids = torch.tensor(PROMPT)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_length=MAX_LEN, eos_token_id=EOS, pad_token_id=PAD)
    np.testing.assert_array_equal(_padded(out, 2), ours)


CASES = [(2, 2, 1.0, False, 1.5), (3, 3, 2.0, "never", 2.0), (3, 2, 1.0, True, 2.0),
         (2, 1, 0.0, False, 1.5)]


@pytest.mark.parametrize(("k", "r", "alpha", "early_stopping", "eos_gain"), CASES)
@pytest.mark.parametrize("seed", range(3))
def test_tied_beam_search_equals_transformers_generate(seed, k, r, alpha, early_stopping,
                                                       eos_gain):
    model = _gpt2(seed, eos_gain)
    attrs, params = _spec(model)
    ids, scores = decoding.beam_search(PROMPT, model="decoder_only", bos_id=1, eos_id=EOS,
                                       pad_id=PAD, max_len=MAX_LEN, num_beams=k, num_return_sequences=r,
                                       length_penalty=alpha, early_stopping=early_stopping,
                                       params=params, **attrs)
    t = torch.tensor(PROMPT)
    out = model.generate(t, attention_mask=torch.ones_like(t), do_sample=False,
                         max_length=MAX_LEN, eos_token_id=EOS, pad_token_id=PAD, num_beams=k,
                         num_return_sequences=r, length_penalty=alpha,
                         early_stopping=early_stopping, output_scores=True,
                         return_dict_in_generate=True)
    # transformers fills a finished hypothesis with `pad_token_id or eos_token_id` (EOS here;
    # spec/components/beam_search.md): _padded sets pad_id after the first EOS
    np.testing.assert_array_equal(_padded(out.sequences, 2 * r).reshape(2, r, MAX_LEN), ids)
    np.testing.assert_allclose(out.sequences_scores.numpy().reshape(2, r), scores, rtol=2e-6,
                               atol=2e-6)


def test_some_tied_hypotheses_end_at_eos():
    """The comparison above is not only of hypotheses that run to max_len."""
    ended = 0
    for seed in range(3):
        attrs, params = _spec(_gpt2(seed, 2.0))
        ids, _ = decoding.beam_search(PROMPT, model="decoder_only", bos_id=1, eos_id=EOS,
                                      pad_id=PAD, max_len=MAX_LEN, num_beams=3,
                                      num_return_sequences=3, params=params, **attrs)
        ended += sum(EOS in h[2:].tolist() for row in ids for h in row)
    assert ended > 0
