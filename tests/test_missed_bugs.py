"""Survivors of mutation testing (issue 9), each planted in the NumPy backend and shown to
be caught now: by a value vector (at the dtypes it can show at), an error vector, the
runner's input check, or a property run against the broken backend."""

import types

import numpy as np
import pytest
from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.ops import Ops
from attnspec.conformance.runner import run_vector
from attnspec.conformance.suite import test_properties_layers as layer_props
from attnspec.conformance.suite import test_properties_norm as norm_props
from attnspec.spec.errors import DomainError
from attnspec.spec.vectors import default_spec

from .mutants import assert_rejected, mutant, rejections

NUMPY = NumpyBackend()


def real(name: str):
    return NUMPY.function(name, default_spec().functions[name].module)


def fails(backend, vid: str, dtype: str = "float64") -> bool:
    """The vector ``vid`` does not pass on ``backend`` at ``dtype``."""
    spec = default_spec()
    with np.errstate(all="ignore"):
        return run_vector(backend, spec, spec.vector(vid), dtype, "cpu").status != "pass"


# -- layer_norm: the one-pass variance ---------------------------------------------------

def ln_one_pass(x, *, eps=1e-5, variant="canonical", params):
    """var = E[x^2] - E[x]^2, in the input's dtype."""
    mu = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mu * mu
    return (x - mu) / np.sqrt(var + x.dtype.type(eps)) * params["gamma"] + params["beta"]


def test_one_pass_variance_is_caught_at_float32():
    assert fails(mutant(layer_norm=ln_one_pass), "layer_norm/one-pass-001", "float32")


# -- top-k ties ----------------------------------------------------------------------------

def topk_ties_last(q, k, v, mask=None, *, top_k, scale=None, only_long=False):
    """Ties broken towards the higher key index (the real function on reversed keys)."""
    if only_long and k.shape[-2] <= 16:
        return real("topk_attention")(q, k, v, mask, top_k=top_k, scale=scale)
    rev = None if mask is None else np.asarray(mask)[..., ::-1]
    out, w = real("topk_attention")(q, k[..., ::-1, :], v[..., ::-1, :], rev, top_k=top_k,
                                    scale=scale)
    return out, w[..., ::-1]


def test_topk_ties_to_the_higher_index_are_caught():
    m = mutant(topk_attention=topk_ties_last)
    assert fails(m, "topk_attention/ties-003")


def test_topk_ties_reordered_above_16_keys_are_caught():
    """torch.topk's order of equal values changes with the algorithm (more than 16 keys)."""
    def broken(*a, **kw):
        return topk_ties_last(*a, **kw, only_long=True)
    assert fails(mutant(topk_attention=broken), "topk_attention/ties-004")


# -- greedy decoding: ties, EOS in the prompt, bos_id = 0, the max_len bound ---------------

def greedy(prompt=None, src_ids=None, *, model, bos_id, eos_id, pad_id, max_len, num_layers,
           num_heads, norm, eps=1e-5, activation, tie_embeddings=False, params, bug=None):
    """Greedy decoding by full recomputation, with one planted bug (None: correct)."""
    kw = dict(pad_id=pad_id, num_layers=num_layers, num_heads=num_heads, norm=norm, eps=eps,
              activation=activation, params=params)
    if model == "transformer":
        first = (bos_id or 1) if bug == "bos-falsy" else bos_id
        seq = np.full((src_ids.shape[0], 1), first, dtype=np.int64)
        logits_of = lambda s: real("transformer")(src_ids, s, tie_embeddings=tie_embeddings, **kw)  # noqa: E731
    else:
        seq = np.asarray(prompt, dtype=np.int64)
        rows = params["pos.table"].shape[0]
        if max_len > rows + (0 if bug == "max-len" else 1):
            raise ValueError("max_len")
        logits_of = lambda s: real("decoder_only")(s, **kw)  # noqa: E731
    done = (seq == eos_id).any(1) if bug == "prompt-eos" else np.zeros(len(seq), bool)
    while seq.shape[1] < max_len and not done.all():
        last = logits_of(seq)[:, -1]  # (B, L)
        nxt = last.shape[-1] - 1 - last[:, ::-1].argmax(-1) if bug == "tie-last" else last.argmax(-1)
        nxt = np.where(done, pad_id, nxt)
        done = done | (nxt == eos_id)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    out = np.full((seq.shape[0], max_len), pad_id, dtype=np.int64)
    out[:, :seq.shape[1]] = seq
    return out


def test_the_greedy_loop_used_for_mutants_is_correct():
    m = mutant(greedy_decode=greedy)
    for vid in ("tie-001", "prompt-eos-001", "bos-zero-001", "max-len-003"):
        assert not fails(m, f"greedy_decode/{vid}"), vid


@pytest.mark.parametrize("bug, vid", [("tie-last", "tie-001"), ("prompt-eos", "prompt-eos-001"),
                                      ("bos-falsy", "bos-zero-001"), ("max-len", "max-len-003")])
def test_greedy_bug_is_caught(bug, vid):
    def broken(*a, **kw):
        return greedy(*a, **kw, bug=bug)
    assert fails(mutant(greedy_decode=broken), f"greedy_decode/{vid}")


# -- mha with a per-head (H, T, S) mask ----------------------------------------------------

def mha_head0_mask(query, key, value, mask=None, *, num_heads, params):
    """Head 0's mask row applied to every head."""
    if mask is not None and np.ndim(mask) >= 3:
        mask = np.asarray(mask)[..., :1, :, :]
    return real("mha")(query, key, value, mask, num_heads=num_heads, params=params)


def test_per_head_rank3_mask_applied_to_the_wrong_heads_is_caught():
    assert fails(mutant(mha=mha_head0_mask), "mha/head-mask-002")


# -- relative attention at +-1000 ----------------------------------------------------------

def rel_naive_softmax(q, k, v, mask=None, *, max_distance, scale=None, params):
    """Shaw et al. with softmax = exp(s) / sum exp(s) (no maximum subtracted)."""
    t, s, kw = q.shape[-2], k.shape[-2], q.shape[-1]
    dist = np.clip(np.arange(s)[None, :] - np.arange(t)[:, None], -max_distance, max_distance)
    a_k, a_v = params["rel_k"][dist + max_distance], params["rel_v"][dist + max_distance]
    scores = (q @ np.swapaxes(k, -1, -2) + np.einsum("...tk,tsk->...ts", q, a_k))
    scores = scores * (kw ** -0.5 if scale is None else scale)
    e = np.exp(scores) if mask is None else np.where(mask, np.exp(scores), 0)
    w = e / e.sum(-1, keepdims=True)
    return w @ v + np.einsum("...ts,tsv->...tv", w, a_v), w


def test_relative_attention_without_max_subtraction_is_caught():
    m = mutant(relative_attention=rel_naive_softmax)
    assert not fails(m, "relative_attention/basic-001"), "the naive mutant must be otherwise right"
    assert fails(m, "relative_attention/large-001")


# -- lm_head on a rank-1 x -----------------------------------------------------------------

def head_atleast_2d(x, *, tied=False, params):
    return real("lm_head")(np.atleast_2d(x), tied=tied, params=params)


def test_rank1_lm_head_input_given_a_batch_axis_is_caught():
    assert fails(mutant(lm_head=head_atleast_2d), "embedding/lm-head-rank1-001")


# -- error vectors: what a lenient backend accepts -----------------------------------------

def entropy_finite_unchecked(weights, *, axis=-1):
    w = np.asarray(weights)
    if (w < 0).any():
        raise DomainError(f"weights must be >= 0, got shape {w.shape}")
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0), axis=axis)


def values_squeezed(name):
    def broken(query, keys, values=None, mask=None, **kw):
        if values is not None and np.ndim(values) == 4:
            values = np.asarray(values)[:, 0]
        return real(name)(query, keys, values, mask, **kw)
    return broken


def coerce(name, attr):
    def broken(*a, **kw):
        if attr in kw:
            kw[attr] = float(kw[attr])
        return real(name)(*a, **kw)
    return broken


@pytest.mark.parametrize("overrides, vids", [
    ({"attention_entropy": entropy_finite_unchecked}, ["attention_entropy/inf-001"]),
    ({"luong_attention": values_squeezed("luong_attention")}, ["luong_attention/values-rank-001"]),
    ({"additive_attention": values_squeezed("additive_attention")},
     ["additive_attention/values-rank-001"]),
    ({"layer_norm": coerce("layer_norm", "eps")},
     ["layer_norm/eps-type-001", "layer_norm/eps-type-002"]),
    ({"rms_norm": coerce("rms_norm", "eps")}, ["rms_norm/eps-type-001", "rms_norm/eps-type-002"]),
    ({"dropout": coerce("dropout", "p")}, ["dropout/p-type-001", "dropout/p-type-002"]),
], ids=lambda x: next(iter(x)) if isinstance(x, dict) else None)
def test_lenient_input_checks_are_caught(overrides, vids):
    m = mutant(**overrides)
    for vid in vids:
        assert fails(m, vid), vid


# -- inputs changed in place ---------------------------------------------------------------

def ln_in_place(x, *, eps=1e-5, variant="canonical", params):
    """Centres x in place (saving a copy) before normalising."""
    x -= x.mean(-1, keepdims=True)
    return real("layer_norm")(x, eps=eps, variant=variant, params=params)


def test_a_function_that_changes_its_input_is_caught():
    assert_rejected(mutant(layer_norm=ln_in_place), "layer_norm")


# -- properties run against planted bugs ---------------------------------------------------

def _ops(backend):
    return Ops(backend, default_spec(), "cpu", "float64")


def step_updates_cache(ids, cache, **kw):
    """Returns the new cache, but also writes it into the one it was given."""
    logits, new = real_raw("decoder_only_step")(ids, cache, **kw)
    cache.update(new)
    return logits, new


def real_raw(name):
    return NUMPY.function(name, "decoding")


def cache_property(backend, seed):
    """The cache property's body on fixed examples (no search: a mutant fails at once)."""
    session = types.SimpleNamespace(property_dtype="float64")
    layer_props.test_decoder_only_step_leaves_its_input_cache_unchanged.hypothesis.inner_test(
        backend=backend, device="cpu", attnspec_session=session, ops=_ops(backend), seed=seed,
        t=2, more=2)


def seed_property(backend, seed):
    norm_props.test_dropout_same_seed_same_mask_other_seed_other_mask.hypothesis.inner_test(
        ops=_ops(backend), seed=seed, p=0.5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoder_only_step_changing_its_cache_is_caught(seed):
    with pytest.raises(AssertionError, match="cache"):
        cache_property(mutant(decoder_only_step=step_updates_cache), seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dropout_ignoring_its_seed_is_caught(seed):
    def broken(x, keep_mask=None, *, p, seed=None):
        return real("dropout")(x, keep_mask, p=p)
    with pytest.raises(AssertionError, match="seed"):
        seed_property(mutant(dropout=broken), seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_properties_pass_on_the_correct_backend(seed):
    cache_property(mutant(), seed)
    seed_property(mutant(), seed)


def test_correct_backend_passes_the_new_vectors():
    for component in ("layer_norm", "topk_attention", "greedy_decode", "mha",
                      "relative_attention", "embedding"):
        assert not any(rejections(mutant(), component).values()), component
