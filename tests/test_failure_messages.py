"""What a failure says: vector id, output or first diverging intermediate, errors, index."""

import numpy as np
from attnspec.backends.numpy import layers
from attnspec.conformance.runner import run_vector
from attnspec.spec.vectors import default_spec

from .mutants import mutant


def _late_bug(x, mask=None, *, trace=None, **kw):
    """A correct encoder layer whose feed-forward output (and so the layer output) is off."""
    y = layers.encoder_layer(x, mask, trace=trace, **kw)
    if trace is not None:
        trace.record("ffn.output", dict(trace.items())["ffn.output"] + 0.5)
        trace.record("residual2.output", dict(trace.items())["residual2.output"] + 0.5)
    return y + 0.5


def test_a_composite_failure_names_the_first_diverging_intermediate():
    spec = default_spec()
    v = next(v for v in spec.vectors if v.component == "encoder_layer" and v.expect == "value")
    r = run_vector(mutant(encoder_layer=_late_bug), spec, v, "float64", "cpu")
    assert r.status == "fail"
    head = r.messages[0]
    assert v.id in head and "first diverging intermediate: 'ffn.output'" in head
    assert any("output 'y'" in m and "worst at index" in m and "max ULP" in m
               for m in r.messages)
    assert not any("self_attn" in m for m in r.messages[1:])  # earlier ones still agree


def test_a_value_failure_names_output_error_and_index():
    spec = default_spec()
    v = spec.vector("softmax/basic-001")

    def off_by_one_entry(x, mask=None, *, axis=-1):
        y = np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True)
        y[1, 3] += 0.25
        return y

    r = run_vector(mutant(softmax=off_by_one_entry), spec, v, "float32", "cpu")
    assert r.status == "fail" and "softmax/basic-001 [float32]" in r.messages[0]
    assert "worst at index (1, 3)" in r.messages[1] and "max abs err 0.25" in r.messages[1]


def test_a_crash_is_an_error_and_a_stub_is_missing():
    from attnspec.backends.base import missing

    spec = default_spec()
    v = spec.vector("softmax/basic-001")

    def crash(x, mask=None, *, axis=-1):
        raise RuntimeError("boom")

    @missing
    def stub(x, mask=None, *, axis=-1):
        raise NotImplementedError

    assert run_vector(mutant(softmax=crash), spec, v, "float64", "cpu").status == "error"
    assert run_vector(mutant(softmax=stub), spec, v, "float64", "cpu").status == "missing"
