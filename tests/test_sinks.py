"""attention_sinks: the oracle's VJP against central differences, and the sink read per
query head under GQA."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle.attention_sinks import sdpa_sinks
from attnspec.spec.oracle.core import precision, tofloat

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


@pytest.mark.parametrize("attrs", [{}, {"softcap": 1.5, "scale": 0.5}, {"num_kv_heads": 1}],
                         ids=["plain", "softcap-scale", "mqa"])
def test_sdpa_sinks_vjp_matches_central_differences(attrs):
    r = Rng(f"test/sdpa_sinks/{sorted(attrs)}")
    h_kv = 1 if "num_kv_heads" in attrs else 2
    q, k, v = r.uniform((2, 2, 3)), r.uniform((h_kv, 3, 3)), r.uniform((h_kv, 3, 2))
    mask = np.array([[True, False, True], [False, False, False]])  # row 1 fully masked
    cot = {"output": r.uniform((2, 2, 2)), "weights": r.uniform((2, 2, 3))}
    _check(sdpa_sinks, VJP["sdpa_sinks"], cot,
           {"q": q, "k": k, "v": v, "sinks": np.array([0.5, -1.0]), "mask": mask,
            "bias": r.uniform((2, 3))},
           {"scale": None, "num_kv_heads": None, "softcap": None, **attrs})


def test_the_sink_of_query_head_h_is_sinks_h_under_gqa():
    """H = 4 over H_kv = 2 with one large sink on query head 3: only head 3's weights fall."""
    r = Rng("test/sdpa_sinks/gqa")
    q, k, v = r.uniform((4, 2, 3)), r.uniform((2, 3, 3)), r.uniform((2, 3, 2))
    sinks = np.array([-np.inf, -np.inf, -np.inf, 8.0])
    _, w = attention.sdpa_sinks(q, k, v, sinks, num_kv_heads=2)
    np.testing.assert_allclose(w[:3].sum(-1), 1.0)
    assert np.all(w[3].sum(-1) < 0.01)
    want = tofloat(sdpa_sinks(q, k, v, sinks, num_kv_heads=2)["weights"])
    np.testing.assert_allclose(w, want, rtol=1e-12, atol=1e-15)


def _sigmoid_property(backend):
    from attnspec.conformance.ops import Ops
    from attnspec.conformance.suite import test_properties_lse as props
    from attnspec.spec.vectors import default_spec

    r = Rng("test/sdpa_sinks/property")
    x = (r.uniform((2, 3, 3, 4)), r.uniform((2, 3, 5, 4)), r.uniform((2, 3, 5, 2)),
         r.bools((3, 5)), np.array([1.0, -0.5, 2.0]))
    props.test_sdpa_sinks_is_sdpa_times_the_sigmoid_of_its_lse_minus_the_sink.hypothesis \
        .inner_test(ops=Ops(backend, default_spec(), "cpu", "float64"), x=x)


def test_the_sigmoid_property_holds_for_the_reference():
    from .mutants import mutant
    _sigmoid_property(mutant())


@pytest.mark.parametrize("bug", ["sinks_dropped", "sink_of_the_wrong_head", "sink_scaled",
                                 "sink_with_a_value", "weights_renormalised"])
def test_the_sigmoid_property_catches_a_planted_sink_bug(bug):
    from .mutants import mutant
    from .test_mutants_sinks import SINK_BUGS
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        _sigmoid_property(mutant(sdpa_sinks=SINK_BUGS[bug]))
