"""GPT-2's tied head in decoding (issue 25): decoder_only_step, greedy_decode and beam_search
with model='decoder_only', tie_embeddings=True. Planted bugs of the tied head that the
tied-embeddings vectors of greedy_decode and beam_search must catch at every dtype, and the
tied decoding checked against the untied one with lm_head.w = embed.table^T, lm_head.b = 0."""

import numpy as np
import pytest
from attnspec.backends.composite.beam import BeamSearch
from attnspec.backends.composite.models import Models
from attnspec.backends.numpy import decoding, embedding
from attnspec.conformance.runner import run_vector
from attnspec.spec.cases._build import Rng
from attnspec.spec.cases.greedy_decode import gpt2
from attnspec.spec.errors import ConfigError, ParameterError
from attnspec.spec.vectors import default_spec

from .mutants import composite_mutant, mutant, rejections

COMPONENTS = ["greedy_decode", "beam_search"]


def _kernels(**kernels):
    return composite_mutant(BeamSearch, kernels=kernels)


def head_untransposed(x, *, tied=False, params):
    """Tied: logits = h table (the table read as W (D, L)); runs only where L = D."""
    if tied:
        return np.asarray(x) @ np.asarray(params["table"])
    return embedding.lm_head(x, tied=tied, params=params)


def head_scaled_by_sqrt_d(x, *, tied=False, params):
    """Tied: the Transformer's sqrt(D) embedding scale applied to the head too."""
    y = embedding.lm_head(x, tied=tied, params=params)
    return y * np.sqrt(np.shape(params["table"])[1]) if tied else y


def head_rows_shifted(x, *, tied=False, params):
    """Tied with the table's rows off by one (token j's logit read from row j - 1): an
    indexing slip in a hand-written transpose."""
    if tied:
        return np.asarray(x) @ np.roll(np.asarray(params["table"]), 1, axis=0).T
    return embedding.lm_head(x, tied=tied, params=params)


HEAD_BUGS = {"untransposed": head_untransposed, "sqrt-d": head_scaled_by_sqrt_d,
             "rows-shifted": head_rows_shifted}


# a positive scale of the logits (sqrt-d) leaves every arg-max, so greedy ids cannot show it;
# beam search's log-softmax does (decoder_only/gpt2-* catch it in the logits)
@pytest.mark.parametrize("component, bug", [(c, b) for c in COMPONENTS for b in sorted(HEAD_BUGS)
                                            if (c, b) != ("greedy_decode", "sqrt-d")])
def test_tied_head_mutant_in_decoding_is_rejected(component, bug):
    with np.errstate(all="ignore"):
        fails = rejections(_kernels(lm_head=HEAD_BUGS[bug]), component,
                           flag="tied-embeddings", until_each=True)
    assert all(fails.values()), fails


def _head_with_bias(self, h, tie, p):
    """The tied head adding a given lm_head.b (GPT-2's has none), the check skipped."""
    logits = Models.decoder_only_head(self, h, tie, p)
    return logits + p["lm_head.b"] if tie and "lm_head.b" in p.keys() else logits


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_tied_head_that_adds_a_given_bias_is_caught_by_the_error_vector(component):
    spec = default_spec()
    v = next(v for v in spec.vectors if v.id == f"{component}/gpt2-bias-001")
    bad = composite_mutant(BeamSearch, {"decoder_only_head": _head_with_bias,
                                        "no_head_params": staticmethod(lambda p: None)})
    assert run_vector(bad, spec, v, "float64", "cpu").status != "pass"
    assert run_vector(mutant(), spec, v, "float64", "cpu").status == "pass"


def test_untied_head_in_the_step_is_rejected():
    """decoder_only_step reading lm_head.* whatever tie_embeddings says (the head not
    shared with decoder_only): the tied vectors have no lm_head.*, so every one fails."""
    def step_head(self, h, tie, p):
        return self.k.lm_head(h, params=p.scope("lm_head"))
    bad = composite_mutant(BeamSearch, {"decoder_only_head": step_head})
    for component in COMPONENTS:
        fails = rejections(bad, component, flag="tied-embeddings", until_each=True)
        assert all(fails.values()), (component, fails)


# -- the tied decoding equals the untied one with W = E^T, b = 0 ------------------------------

def _model(seed, vocab=16, d=16, n=2):
    inputs, p = gpt2(3, 2, n, d, vocab, gamma_scale=3.0)(Rng(f"test/greedy-tie/{seed}"))
    untied = {**p, "lm_head.w": p["embed.table"].T.copy(), "lm_head.b": np.zeros(vocab)}
    return inputs["prompt"], p, untied


ATTRS = dict(model="decoder_only", bos_id=1, eos_id=2, pad_id=0, max_len=8, num_layers=2,
             num_heads=2, norm="pre", activation="gelu_tanh")


@pytest.mark.parametrize("seed", range(3))
def test_greedy_with_a_tied_head_is_the_untied_greedy_with_the_table_transposed(seed):
    prompt, p, untied = _model(seed)
    tied = decoding.greedy_decode(prompt, params=p, tie_embeddings=True, **ATTRS)
    assert np.array_equal(tied, decoding.greedy_decode(prompt, params=untied, **ATTRS))


@pytest.mark.parametrize("seed", range(3))
def test_beam_search_with_a_tied_head_is_the_untied_one_with_the_table_transposed(seed):
    prompt, p, untied = _model(seed)
    a = {**ATTRS, "num_beams": 3, "num_return_sequences": 3}
    ids, scores = decoding.beam_search(prompt, params=p, tie_embeddings=True, **a)
    ids_u, scores_u = decoding.beam_search(prompt, params=untied, **a)
    assert np.array_equal(ids, ids_u)
    np.testing.assert_allclose(scores, scores_u, rtol=1e-12, atol=1e-12)


def test_tie_embeddings_is_refused_for_a_llama_model():
    prompt, p, _ = _model(0)
    a = {**ATTRS, "model": "llama_decoder_only", "activation": "silu"}
    with pytest.raises(ConfigError, match="tie_embeddings.*llama_decoder_only"):
        decoding.greedy_decode(prompt, params=p, tie_embeddings=True, **a)
    with pytest.raises(ConfigError, match="tie_embeddings.*llama_decoder_only"):
        decoding.beam_search(prompt, params=p, tie_embeddings=True, num_beams=2, **a)


@pytest.mark.parametrize("name", ["lm_head.w", "lm_head.b"])
def test_a_tied_step_refuses_an_lm_head_parameter(name):
    prompt, p, untied = _model(0)
    cache = decoding.decoder_only_init_cache(batch_size=2, num_layers=2, num_heads=2, params=p)
    with pytest.raises(ParameterError, match=name.replace(".", r"\.")):
        decoding.decoder_only_step(prompt, cache, pad_id=0, num_layers=2, num_heads=2,
                                   activation="gelu_tanh", tie_embeddings=True,
                                   params={**p, name: untied[name]})
