"""Planted bugs of a tiled attention kernel (issue 21.2), each rejected at every dtype
(float64, float32, float16, bfloat16 computed for real) and at both tilings: by some sdpa
vector, or, where every current vector passes it, by an input built here from sdpa's
semantics (tests/kernels/planted.py names the stress input that would have caught it).
``python benchmarks/planted_kernels.py`` prints the whole table."""

from __future__ import annotations

import pytest

pytest.importorskip("ml_dtypes")  # the kernels extra; ATTNSPEC_REQUIRE makes it an error there

from .planted import ALL_DTYPES, BUGS, MAX_ELEMENTS, TILINGS, fails, own_cases
from .vectors import as_call, value_vectors

CASES = own_cases()


def _size(case) -> int:
    """The case's score count: the candidates are tried smallest first, so a bug that a small
    vector rejects never waits for the 2x2-tiled loop over a 1024 x 1024 one."""
    call = case.call if hasattr(case, "call") else as_call(case)
    return call.q.size // call.q.shape[-1] * call.k.shape[-2]


CANDIDATES = sorted([*value_vectors(max_elements=MAX_ELEMENTS), *CASES], key=_size)


def _caught(bug, dtype, tiling):
    bq, bk = TILINGS[tiling]
    kw = {"bug": bug, "block_q": bq, "block_k": bk}
    return next((v.id for v in CANDIDATES if dtype in v.dtypes and fails(v, dtype, **kw)), None)


@pytest.mark.parametrize("tiling", sorted(TILINGS))
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_kernel_bug_is_rejected_at_every_dtype(bug, tiling):
    missed = [d for d in ALL_DTYPES if _caught(bug, d, tiling) is None]
    assert not missed, f"{bug} ({BUGS[bug]}) at {tiling} tiles passes at {missed}"


def test_finite_fill_and_sentinel_pass_every_current_vector_as_the_issue_reports():
    """The two bug classes of issue 21 pass every current sdpa vector at float32: the own
    inputs are what rejects them (when the stress family lands, a stress vector will)."""
    for bug in ("sentinel-max", "mask-fill-1e4"):
        caught = _caught(bug, "float32", "64x64")
        assert caught is not None and (caught.startswith("own/") or "stress" in caught), caught
