"""FlexAttention (torch 2.13.0, CPU) judged through two kernel interfaces (issue 22's
agreement extras): a document mask over a packed batch by the sdpa_varlen vectors
(compiled), and its log-sum-exp (``return_aux=AuxRequest(lse=True)``) by the sdpa_lse
vectors: compiled FlexAttention on the CPU refuses ``return_lse``
(test_kernel_routes.py asserts it), so the log-sum-exp judged is eager FlexAttention's (its
reference path, what runs uncompiled). Float32, the dtype the flex route is judged at.

A packed batch becomes one (1, H, total_q, K) call whose mask keeps key j for query i when
both lie in the same sequence and j is allowed there (causal or a window bottom-right per
sequence, as sdpa_varlen.md states): FlexAttention's document masking, read as a dense
``mask_mod`` tensor in ``score_mod`` as the flex route reads every mask
(torch_routes.compiled_flex says why).

Marked kernel_stress: each bucket of shapes compiles a program (~8 s cold on two cores), so
plain `tox` leaves these to `tox -e kernels`, as the flex route's stress half."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # the kernels extra; ATTNSPEC_REQUIRE makes it an error there

from attnspec.spec.fastoracle import local_keep

from . import torch_routes
from .test_kernel_routes import IN_PROCESS_FLEX
from .vectors import SPEC, Call, as_call, judged, recognise_mask, value_vectors

pytestmark = [pytest.mark.kernel_stress, IN_PROCESS_FLEX]
DTYPE = "float32"

# vector id -> why FlexAttention fails (or cannot take) it: exactly these (flexattention.md,
# "Kernel interfaces")
LSE_FAILS = {
    "sdpa_lse/non-finite-001": "a masked key's inf value reaches the output as NaN "
                               "(flexattention.md#cause-nonfinite-masked); the lse is right",
    "sdpa_lse/empty-keys-001": "S = 0: the route does not call FlexAttention with no key",
}
VARLEN_FAILS: dict[str, str] = {}


def packed_call(v) -> Call:
    """An sdpa_varlen vector as one FlexAttention call with a document mask."""
    attrs = {**SPEC.functions[v.function].attributes, **v.attributes}
    x = v.inputs
    q, k, val = (np.swapaxes(x[n], 0, 1)[None] for n in ("q", "k", "v"))  # (1, H, T, .)
    cq, ck = x["cu_seqlens_q"], x["cu_seqlens_k"]
    keep = np.zeros((q.shape[-2], k.shape[-2]), bool)
    for b in range(len(cq) - 1):
        rq, rk = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        keep[rq, rk] = local_keep(rq.stop - rq.start, rk.stop - rk.start, attrs["causal"],
                                  attrs["window"], attrs.get("window_left"),
                                  attrs.get("window_right"))
    h, h_kv = q.shape[1], k.shape[1]
    return recognise_mask(Call(q, k, val, keep[None, None], None, attrs["scale"],
                               None if h == h_kv else h_kv))


def _failing(vectors, run) -> dict:
    out = {}
    for v in vectors:
        try:
            got = run(v)
        except torch_routes.Skip as why:
            out[v.id] = f"skipped: {why}"
            continue
        result = judged(v, DTYPE, got)
        if result.status != "pass":
            out[v.id] = result.messages[0]
    return out


def test_eager_flex_log_sum_exp_against_the_sdpa_lse_vectors():
    vectors = value_vectors("sdpa_lse")
    assert any("/stress-" in v.id for v in vectors) and len(vectors) >= 8

    def run(v):
        return torch_routes.flex(as_call(v), DTYPE, lse=True, compiled=False)

    got = _failing(vectors, run)
    assert set(got) == set(LSE_FAILS), got


def test_flex_document_mask_against_the_sdpa_varlen_vectors():
    vectors = value_vectors("sdpa_varlen")
    assert any("/stress-" in v.id for v in vectors) and len(vectors) >= 6

    def run(v):
        c = packed_call(v)
        out = torch_routes.flex(c, DTYPE)["output"]  # (1, H, total_q, V)
        return {"output": np.swapaxes(out[0], 0, 1)}

    got = _failing(vectors, run)
    assert set(got) == set(VARLEN_FAILS), got
