"""The stress family's kernel interfaces (issue 22): the fast oracle's sdpa_lse and sdpa_sinks
agree with mpmath bit for bit on small problems, and the generator's varlen and paged paths
equal the mpmath oracles of those components."""

from __future__ import annotations

import numpy as np
import pytest
from attnspec.spec import fastoracle as fo
from attnspec.spec.cases._build import Rng

from .test_stress import _exact, _oracle_precision  # noqa: F401 (the autouse fixture)


def _gqa(name):
    r = Rng(f"stress/interfaces/{name}")
    q, k, v = r.uniform((2, 4, 5, 8), -4, 4), r.uniform((2, 2, 7, 8), -4, 4), r.uniform((2, 2, 7, 3))
    mask = r.bools((5, 7))
    mask[2] = False  # a fully masked row
    return r, q, k, v, mask


@pytest.mark.parametrize("extra", [{}, {"softcap": 5.0}, {"scale": 0.3, "bias": "far-below"}])
def test_fast_sdpa_lse_equals_mpmath(extra):
    from attnspec.spec.oracle.sdpa_lse import sdpa_lse

    r, q, k, v, mask = _gqa(f"lse/{sorted(extra)}")
    kw = {"mask": mask, "num_kv_heads": 2, **extra}
    if "bias" in kw:  # every score near -131072: lse far below any finite sentinel
        kw["bias"] = r.uniform((5, 7), -1, 1) - 131072.0
        kw["bias"][0, 3] = -np.inf
    fast, slow = fo.sdpa_lse(q, k, v, **kw), sdpa_lse(q, k, v, **kw)
    _exact(fast["output"], slow["output"])
    _exact(fast["lse"], slow["lse"])
    assert np.all(np.isneginf(fo.to_float(fast["lse"])[..., 2]))  # the fully masked row


@pytest.mark.parametrize("sinks", [[24.0, -8192.0, 1.5, -0.75], [0.0, 40.0, -3.0, 2.0]])
def test_fast_sdpa_sinks_equals_mpmath(sinks):
    from attnspec.spec.oracle.attention_sinks import sdpa_sinks

    _, q, k, v, mask = _gqa(f"sinks/{sinks}")
    kw = {"mask": mask, "num_kv_heads": 2}
    fast, slow = fo.sdpa_sinks(q, k, v, np.array(sinks), **kw), sdpa_sinks(q, k, v, np.array(sinks), **kw)
    _exact(fast["output"], slow["output"])
    _exact(fast["weights"], slow["weights"])


def test_fast_varlen_and_paged_equal_mpmath():
    from attnspec.spec.oracle.paged_attention import paged_attention
    from attnspec.spec.oracle.sdpa_varlen import sdpa_varlen
    from attnspec.spec.stress.build import expected

    r = Rng("stress/interfaces/varlen")
    x = {"q": r.uniform((9, 4, 8), -4, 4), "k": r.uniform((12, 2, 8), -4, 4), "v": r.uniform((12, 2, 3)),
         "cu_seqlens_q": np.array([0, 3, 3, 4, 9]), "cu_seqlens_k": np.array([0, 5, 5, 5, 12])}
    a = {"scale": None, "causal": True, "window": None, "window_left": None, "window_right": None}
    got, _ = expected("sdpa_varlen", x, {}, a, None)
    _exact(got["output"], sdpa_varlen(**x, causal=True)["output"])
    x = {"q": r.uniform((2, 3, 4, 8), -4, 4), "k_cache": r.uniform((6, 4, 2, 8), -4, 4),
         "v_cache": r.uniform((6, 4, 2, 3)), "block_table": np.array([[5, 2, 0], [5, 1, 4]]),
         "seq_lens": np.array([9, 6])}
    got, _ = expected("paged_attention", x, {}, {"scale": None, "causal": True}, None)
    _exact(got["output"], paged_attention(**x, causal=True)["output"])


def test_fast_sdpa_vjp_with_an_lse_cotangent_equals_mpmath():
    """sdpa_lse's gradient: d lse / dS = W added to the fast oracle's sdpa VJP."""
    from attnspec.spec.oracle.sdpa_lse import sdpa_lse_vjp

    r, q, k, v, mask = _gqa("lse-vjp")
    cot = {"output": r.uniform((2, 4, 5, 3)), "lse": r.uniform((2, 4, 5))}
    fast = fo.sdpa_vjp(cot, q, k, v, mask, None, None, 2, None)
    slow, _ = sdpa_lse_vjp(cot, q, k, v, mask=mask, num_kv_heads=2)
    for name in ("q", "k", "v"):
        _exact(fast[name], slow[name])
