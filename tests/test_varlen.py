"""sdpa_varlen: the oracle's VJP against central differences, and `attnspec check` on the
new component (an independent packed attention passes; one aligned top-left fails)."""

import numpy as np
import pytest
from attnspec.conformance.cli import main
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.sdpa_varlen import sdpa_varlen

from .test_grad_oracle import VJP, _check


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


@pytest.mark.parametrize("attrs", [{}, {"causal": True}, {"window": 1, "scale": 0.5}],
                         ids=["plain", "causal", "window-scale"])
def test_sdpa_varlen_vjp_matches_central_differences(attrs):
    """Two kv heads under four query heads; sequences (2, 1, 0) queries over (1, 0, 2) keys:
    a query with no key, keys with no query."""
    r = Rng(f"test/sdpa_varlen/{sorted(attrs)}")
    q, k, v = r.uniform((3, 4, 2)), r.uniform((3, 2, 2)), r.uniform((3, 2, 1))
    _check(sdpa_varlen, VJP["sdpa_varlen"], {"output": r.uniform((3, 4, 1))},
           {"q": q, "k": k, "v": v, "cu_seqlens_q": np.array([0, 2, 3, 3]),
            "cu_seqlens_k": np.array([0, 1, 1, 3])},
           {"max_seqlen_q": 2, "max_seqlen_k": 2, "scale": None, "causal": False,
            "window": None, **attrs})


PACKED = '''
import numpy as np


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                causal=False, window=None):
    out = np.zeros(q.shape[:2] + v.shape[2:], dtype=q.dtype)
    g = q.shape[1] // k.shape[1]
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    for b in range(len(cu_seqlens_q) - 1):
        a, e = cu_seqlens_q[b], cu_seqlens_q[b + 1]
        s0, s1 = cu_seqlens_k[b], cu_seqlens_k[b + 1]
        t, s = e - a, s1 - s0
        kb, vb = np.repeat(k[s0:s1], g, axis=1), np.repeat(v[s0:s1], g, axis=1)
        p = np.arange(t)[:, None] + (ALIGN)
        j = np.arange(s)[None, :]
        keep = np.ones((t, s), bool)
        if causal or window:
            keep &= j <= p
        if window:
            keep &= j > p - window
        sc = np.where(keep, np.einsum("thk,shk->hts", q[a:e], kb) * c, -np.inf)
        m = np.max(np.where(keep, sc, -1e30), -1, keepdims=True, initial=-1e30)
        w = np.where(keep, np.exp(sc - m), 0)
        d = w.sum(-1, keepdims=True)
        out[a:e] = np.einsum("hts,shv->thv", np.where(d > 0, w / np.where(d > 0, d, 1), 0), vb)
    return out
'''


@pytest.mark.parametrize("align, fails", [("s - t", set()),
                                          ("0", {"causal-001", "gqa-001", "window-001",
                                                 "long-001", "stress-packed-001"})],
                         ids=["bottom-right", "top-left"])
def test_attnspec_check_knows_sdpa_varlen(tmp_path, capsys, align, fails):
    user = tmp_path / "user.py"
    user.write_text(PACKED.replace("ALIGN", align), encoding="utf-8")
    code = main(["check", f"{user}:sdpa_varlen", "--component", "sdpa_varlen"])
    out = capsys.readouterr().out
    failed = {line.split()[1].split("/")[1] for line in out.splitlines() if line.startswith("FAIL")}
    assert failed == fails and code == (1 if fails else 0), out
    assert "PASS  sdpa_varlen/basic-001" in out
