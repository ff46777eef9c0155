"""sdpa_lse and merge_attention_states: the oracle's VJPs against central differences, the
split property against planted bugs, and `attnspec check` on the new components."""

import numpy as np
import pytest
from attnspec.conformance.cli import main
from attnspec.conformance.ops import Ops
from attnspec.conformance.suite import test_properties_lse as props
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.merge_attention_states import merge_attention_states
from attnspec.spec.oracle.sdpa_lse import sdpa_lse
from attnspec.spec.vectors import default_spec

from .mutants import mutant
from .test_grad_oracle import VJP, _check
from .test_mutants_lse import MERGE_BUGS


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


@pytest.mark.parametrize("attrs", [{}, {"softcap": 1.5, "scale": 0.5},
                                   {"num_kv_heads": 1, "softcap": 2.0}],
                         ids=["plain", "softcap-scale", "mqa-softcap"])
def test_sdpa_lse_vjp_matches_central_differences(attrs):
    r = Rng(f"test/sdpa_lse/{sorted(attrs)}")
    h = 2 if "num_kv_heads" in attrs else 1
    q, k, v = r.uniform((h, 2, 3)), r.uniform((1, 3, 3)), r.uniform((1, 3, 2))
    mask = np.array([[True, False, True], [True, True, True]])
    cot = {"output": r.uniform((h, 2, 2)), "lse": r.uniform((h, 2))}
    _check(sdpa_lse, VJP["sdpa_lse"], cot,
           {"q": q, "k": k, "v": v, "mask": mask, "bias": r.uniform((2, 3))},
           {"scale": None, "num_kv_heads": None, "softcap": None, **attrs})


def test_merge_attention_states_vjp_matches_central_differences():
    r = Rng("test/merge_attention_states")
    lses = r.uniform((3, 2), -4, 4)
    lses[1, 0] = -np.inf  # an empty part: no gradient
    _check(merge_attention_states, VJP["merge_attention_states"],
           {"output": r.uniform((2, 3)), "lse": r.uniform((2,))},
           {"outputs": r.uniform((3, 2, 3)), "lses": lses}, {})


def test_an_empty_part_and_an_empty_row_get_zero_gradients_not_nan():
    lses = np.array([[-np.inf, 0.5], [-np.inf, -np.inf]])  # row 0: every part empty
    outputs = np.array([[[np.nan, 1.0], [2.0, 3.0]], [[0.0, 0.0], [np.inf, 1.0]]])
    g, _ = VJP["merge_attention_states"]({"output": np.ones((2, 2)), "lse": np.ones(2)},
                                         outputs, lses)
    assert all(x == 0 for x in g["lses"].ravel()[[0, 2, 3]])
    assert all(x == 0 for x in g["outputs"][:, 0].ravel()) and g["lses"][0, 1] == 1


def _split_property(backend, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (np.round(rng.uniform(-2, 2, shape) * 64) / 64 for shape in
               ((2, 3, 4), (2, 6, 4), (2, 6, 3)))
    mask = rng.random((3, 6)) < 0.6
    mask[1] = False
    mask[:, 2:4] = False  # part [2, 4) is empty for every query
    props.test_merging_the_parts_of_any_split_of_the_keys_equals_attention_over_all_keys \
        .hypothesis.inner_test(ops=Ops(backend, default_spec(), "cpu", "float64"),
                               x=(q, k, v, mask), data=_Fixed([0, 2, 4, 4, 6]))


class _Fixed:
    """st.data() replaced by a fixed draw (the split's cut points)."""

    def __init__(self, value):
        self.value = value

    def draw(self, strategy):
        return self.value


def test_the_split_property_holds_for_the_reference():
    _split_property(mutant(), 0)


@pytest.mark.parametrize("bug", ["all_empty_gives_nan", "weights_not_renormalised", "lses_in_base_2",
                                 "lse_is_the_max", "first_two_parts_only"])
def test_the_split_property_catches_a_planted_merge_bug(bug):
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        _split_property(mutant(merge_attention_states=MERGE_BUGS[bug]), 0)


NAIVE_MERGE = '''
import numpy as np


def merge(outputs, lses):
    m = np.max(lses, axis=0)
    w = np.exp(lses - m)
    return (w[..., None] * outputs).sum(0) / w.sum(0)[..., None], m + np.log(w.sum(0))
'''


def test_attnspec_check_knows_merge_attention_states_and_fails_a_naive_merge(tmp_path, capsys):
    """The textbook merge (no guard for empty parts) passes the ordinary vectors and fails
    exactly the ones with fully masked parts."""
    user = tmp_path / "user.py"
    user.write_text(NAIVE_MERGE, encoding="utf-8")
    with np.errstate(all="ignore"):
        code = main(["check", f"{user}:merge", "--component", "merge_attention_states"])
    out = capsys.readouterr().out
    assert code == 1, out
    failed = {line.split()[1] for line in out.splitlines() if line.startswith("FAIL")}
    assert failed == {"merge_attention_states/all-empty-001",
                      "merge_attention_states/empty-part-nan-001",
                      "merge_attention_states/single-part-001"}, out
    assert "PASS  merge_attention_states/basic-001" in out
