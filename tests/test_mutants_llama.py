"""Planted bugs in the Llama-style decoder (llama_layer, llama_decoder_only, the cached
llama_step behind greedy_decode) that the vectors must catch at every dtype."""

import types

import numpy as np
import pytest
from attnspec.backends.composite.decoding import Decoding
from attnspec.backends.numpy import attention, feedforward, positional

from .mutants import assert_rejected, composite_mutant, gradient_rejections, mutant, rejections
from .test_mutants_grad import (
    assert_gradient_bug_fails,
    glu_no_gate_grad,
    glu_no_up_path,
    rms_norm_no_second_term,
    rope_forward_rotation,
    sdpa_gqa_mutant,
)


def _kernels(**kernels):
    return composite_mutant(Decoding, kernels=kernels)


def _methods(**methods):
    return composite_mutant(Decoding, methods=methods)


def rope_interleaved(x, *, offset=0, base=10000.0, convention="interleaved"):
    """RoPE pairs (2i, 2i+1) (Meta's checkpoints' layout) where the spec's Llama uses "half"."""
    return positional.rope(x, offset=offset, base=base, convention="interleaved")


def _rms_with(stat):
    def rms_norm(x, *, eps=1e-6, params):
        return stat(x, eps) * params["gamma"]
    return rms_norm


# LayerNorm (mean subtracted, no beta) in place of RMSNorm
layer_norm_for_rms = _rms_with(lambda x, eps: (x - x.mean(-1, keepdims=True)) / np.sqrt(
    ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + eps))
# x / (sqrt(mean(x^2)) + eps): eps outside the root
eps_outside_sqrt = _rms_with(lambda x, eps: x / (np.sqrt((x * x).mean(-1, keepdims=True)) + eps))


def gelu_for_silu(x, *, activation="silu", params):
    """GeGLU where the spec's Llama uses SwiGLU."""
    return feedforward.gated_feedforward(x, activation="gelu", params=params)


def gate_up_swapped(x, *, activation="silu", params):
    """silu(x W_up) * (x W_gate): the two projections read from each other's paths."""
    swapped = {"w_gate": params["w_up"], "w_up": params["w_gate"], "w_down": params["w_down"]}
    return feedforward.gated_feedforward(x, activation=activation, params=swapped)


def kv_heads_modulo(q, k, v, mask=None, bias=None, *, scale=None, num_kv_heads=None):
    """Query head h reads kv head h % H_kv (tiled) instead of h // (H / H_kv) (repeated)."""
    group = q.shape[-3] // k.shape[-3]
    reps = (1,) * (k.ndim - 3) + (group, 1, 1)
    return attention.sdpa(q, np.tile(k, reps), np.tile(v, reps), mask, bias, scale=scale)


def window_off_by_one(*, t, s, window):
    """window + 1 keys: p - W <= j <= p."""
    return attention.sliding_window_mask(t=t, s=s, window=window + 1)


def window_top_left(*, t, s, window):
    """The window aligned top-left (query i at position i, not i + S - T): right for a full
    forward pass (S = T), wrong for every cached step."""
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return (j <= i) & (j > i - window)


def no_final_norm(self, h, eps, p, trace=None):
    """logits = h W_lm, the final RMSNorm (norm.gamma) skipped."""
    if trace is not None:
        trace.record("norm.output", h)
    return self.project(h, p.scope("lm_head"), "w")


def step_positions_not_offset(self, x, keep, heads, kv, eps, base, offset, p, trace,
                              past=None, bias=False, rope=None):
    """A cached step rotates its queries and keys at positions 0.. instead of n.."""
    return Decoding.llama_block(self, x, keep, heads, kv, eps, base,
                                offset if past is None else 0, p, trace, past, bias, rope)


MUTANTS = {
    "llama": {
        "rope-interleaved": _kernels(rope=rope_interleaved),
        "layer-norm-for-rms-norm": _kernels(rms_norm=layer_norm_for_rms),
        "eps-outside-sqrt": _kernels(rms_norm=eps_outside_sqrt),
        "gelu-for-silu": _kernels(gated_feedforward=gelu_for_silu),
        "gate-up-swapped": _kernels(gated_feedforward=gate_up_swapped),
        "kv-heads-modulo": _kernels(sdpa=kv_heads_modulo),
        "window-off-by-one": _kernels(sliding_window_mask=window_off_by_one),
        "no-final-norm": _methods(llama_head=no_final_norm),
    },
    "greedy_decode": {
        "llama-window-top-left": _kernels(sliding_window_mask=window_top_left),
        "llama-step-positions-not-offset": _methods(llama_block=step_positions_not_offset),
        "llama-rope-interleaved": _kernels(rope=rope_interleaved),
    },
}

CASES = [(comp, name) for comp, ms in MUTANTS.items() for name in ms]


@pytest.mark.parametrize(("component", "name"), CASES, ids=[f"{c}:{n}" for c, n in CASES])
def test_llama_mutant_is_rejected(component, name):
    with np.errstate(all="ignore"):
        assert_rejected(MUTANTS[component][name], component)


def test_top_left_window_passes_the_full_forward_pass():
    """Why the top-left window is judged by greedy_decode: with S = T (no cache) the two
    alignments agree, so every llama vector passes it."""
    assert set(rejections(MUTANTS["greedy_decode"]["llama-window-top-left"], "llama").values()) \
        == {0}


def test_correct_llama_backend_is_not_rejected():
    for component in MUTANTS:
        assert set(rejections(composite_mutant(Decoding), component).values()) == {0}


# -- the cache, window and grouping bugs judged by the properties too ----------------------

def _incremental(backend, seed):
    """The incremental-decoding property's body on a fixed example: N = 2, GQA (H = 4,
    H_kv = 2), window 2, T = 6 in chunks of 2, 1, 3."""
    from attnspec.conformance.ops import Ops
    from attnspec.conformance.suite import test_properties_llama as props
    from attnspec.spec.vectors import default_spec

    class Data:
        def draw(self, _):
            return [2, 3]

    session = types.SimpleNamespace(property_dtype="float64")
    props.test_llama_incremental_decoding_with_cache_equals_full_forward.hypothesis.inner_test(
        backend=backend, device="cpu", attnspec_session=session,
        ops=Ops(backend, default_spec(), "cpu", "float64"), seed=seed, cfg=(16, 4, 2),
        window=2, n=2, t=6, data=Data())


STEP_BUGS = ["llama-window-top-left", "llama-step-positions-not-offset"]


@pytest.mark.parametrize("name", STEP_BUGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_llama_step_bug_is_caught_by_the_incremental_property(name, seed):
    with pytest.raises(AssertionError), np.errstate(all="ignore"):
        _incremental(MUTANTS["greedy_decode"][name], seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_property_passes_the_correct_backend(seed):
    _incremental(composite_mutant(Decoding), seed)


# -- gradients: planted backward bugs that the llama/grad vectors catch at every dtype ------

GRAD_BUGS = {
    "rope-backward-rotates-forward": {"rope_vjp": rope_forward_rotation},
    "gqa-dk-dv-not-summed": {"sdpa_vjp": sdpa_gqa_mutant(lambda a: a[..., 0, :, :])},
    "gqa-dk-dv-mean-over-group": {"sdpa_vjp": sdpa_gqa_mutant(lambda a: a.mean(axis=-3))},
    "rms-norm-no-second-term": {"rms_norm_vjp": rms_norm_no_second_term},
    "swiglu-no-gate-grad": {"gated_feedforward_vjp": glu_no_gate_grad},
    "swiglu-no-up-path": {"gated_feedforward_vjp": glu_no_up_path},
}


@pytest.mark.parametrize("name", sorted(GRAD_BUGS))
def test_llama_backward_bug_fails_at_every_dtype(name):
    with np.errstate(all="ignore"):
        assert_gradient_bug_fails(mutant(**GRAD_BUGS[name]), "llama")


def _split_heads_backward_as_reshape(self, x, heads):
    """dx of split_heads by a plain reshape of (B, H, T, K) to (B, T, H*K): no transpose."""
    from attnspec.backends.composite import tape

    return self.tape.op(lambda g: [g.reshape(g.shape[0], g.shape[2], -1)], [x],
                        self._ops.split_heads(tape._plain(x), heads))


def _skip_path_lost(add):
    return lambda self, shapes, nodes, out: add(self, shapes, [None, *nodes[1:]], out)


@pytest.mark.parametrize("bug", ["split-heads-backward-reshape", "skip-path-lost"])
def test_llama_tape_bug_fails_at_every_dtype(monkeypatch, bug):
    from attnspec.backends.composite import tape

    if bug == "skip-path-lost":
        monkeypatch.setattr(tape.Tape, "add", _skip_path_lost(tape.Tape.add))
    else:
        monkeypatch.setattr(tape.TapeOps, "split_heads", _split_heads_backward_as_reshape)
    assert_gradient_bug_fails(mutant(), "llama")


def test_correct_llama_backward_passes():
    assert set(gradient_rejections(mutant(), "llama").values()) == {0}
