"""sdpa_fp8: the oracle's VJP against central differences, the vectors' inputs on their
format's grid, and `attnspec check` on the new component (an independent FP8 attention
passes; one that forgets q's descale fails)."""

import ml_dtypes
import numpy as np
import pytest
from attnspec.conformance.cli import main
from attnspec.spec.cases._build import Rng
from attnspec.spec.oracle.core import precision
from attnspec.spec.oracle.sdpa_fp8 import sdpa_fp8
from attnspec.spec.vectors import default_spec

from .test_grad_oracle import VJP, _check

F8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture(autouse=True)
def _working_precision():
    with precision():
        yield


@pytest.mark.parametrize("descales, attrs", [
    ({"q_descale": 0.5, "k_descale": 1.5, "v_descale": 0.25}, {}),
    ({"q_descale": [[0.5, 2.0]], "v_descale": [[1.5, 0.75]]}, {"causal": True, "num_kv_heads": 2}),
    ({"k_descale": [[0.5, 1.25]]}, {"softcap": 2.0, "scale": 0.75, "num_kv_heads": 2}),
], ids=["per-tensor", "per-head-causal", "softcap"])
def test_sdpa_fp8_vjp_matches_central_differences(descales, attrs):
    """Four query heads over two kv heads (per-tensor: two over two), T = 2 over S = 3:
    every input's gradient and each given descale's."""
    r = Rng(f"test/sdpa_fp8/{sorted(descales)}/{sorted(attrs)}")
    h = 4 if attrs.get("num_kv_heads") else 2
    x = {"q": r.uniform((1, h, 2, 2)), "k": r.uniform((1, 2, 3, 2)), "v": r.uniform((1, 2, 3, 2))}
    x.update({n: np.asarray(d, dtype=np.float64) for n, d in descales.items()})
    _check(sdpa_fp8, VJP["sdpa_fp8"], {"output": r.uniform((1, h, 2, 2))}, x,
           {"fp8_format": "e4m3fn", "scale": None, "causal": False, "num_kv_heads": None,
            "softcap": None, **attrs})


def test_every_value_vector_input_is_on_its_format_grid():
    """q, k, v of every value and gradient vector are values of the vector's fp8_format
    (NaN included), as the cases claim; the descales are not float8."""
    checked = 0
    for v in default_spec().vectors:
        if v.component != "sdpa_fp8" or v.expect == "error":
            continue
        f8 = F8[v.attributes.get("fp8_format", "e4m3fn")]
        for name in ("q", "k", "v"):
            x = np.asarray(v.inputs[name], dtype=np.float64)
            back = x.astype(f8).astype(np.float64)
            assert np.all((back == x) | np.isnan(x)), (v.id, name)
        checked += 1
    assert checked >= 10


USER = '''
import ml_dtypes
import numpy as np


def sdpa_fp8(q, k, v, q_descale=None, k_descale=None, v_descale=None, fp8_format="e4m3fn",
             scale=None, causal=False, num_kv_heads=None, softcap=None):
    f8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fp8_format]
    h, h_kv = q.shape[1], k.shape[1]

    def heads(d, n):
        if d is None:
            return 1.0
        d = np.asarray(d, dtype=np.float64)
        return d if d.ndim == 0 else np.repeat(d, n // h_kv, axis=1)[:, :, None, None]

    qd = q.astype(f8).astype(np.float64) * (QDESCALE)
    kd = np.repeat(k.astype(f8).astype(np.float64) * heads(k_descale, h_kv), h // h_kv, axis=1)
    vd = np.repeat(v.astype(f8).astype(np.float64) * heads(v_descale, h_kv), h // h_kv, axis=1)
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhtk,bhsk->bhts", qd, kd) * c
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    t, n = q.shape[2], k.shape[2]
    keep = np.arange(n)[None, :] <= np.arange(t)[:, None] + (n - t) if causal else np.ones((t, n), bool)
    with np.errstate(invalid="ignore"):
        m = np.max(np.where(keep, s, -np.inf), -1, keepdims=True)
        w = np.where(keep, np.exp(s - m), 0)
        w = w / w.sum(-1, keepdims=True)
        terms = w[..., None] * vd[:, :, None]  # (B, H, T, S, V): a masked key is left out
        out = np.where(w[..., None] != 0, terms, 0).sum(-2)
    return out.astype(q.dtype)
'''


@pytest.mark.parametrize("q_descale, fails", [
    ("heads(q_descale, h)", set()),
    ("1.0", {"basic-001", "per-head-001", "e5m2-001", "causal-001", "softcap-001",
             "zero-descale-001", "saturate-001", "saturate-002", "nan-001", "mixed-001",
             "large-001", "large-002"}),
], ids=["correct", "q-descale-dropped"])
def test_attnspec_check_knows_sdpa_fp8(tmp_path, capsys, q_descale, fails):
    user = tmp_path / "user.py"
    user.write_text(USER.replace("QDESCALE", q_descale), encoding="utf-8")
    code = main(["check", f"{user}:sdpa_fp8", "--component", "sdpa_fp8"])
    out = capsys.readouterr().out
    failed = {line.split()[1].split("/")[1] for line in out.splitlines() if line.startswith("FAIL")}
    assert failed == fails and code == (1 if fails else 0), out
    assert "sdpa_fp8/basic-001" in out


def test_a_backend_without_fp8_grid_reports_sdpa_fp8_missing(monkeypatch):
    """The composite needs the backend's float8 round trip: without it the function is
    reported missing (NotImplementedComponent), not crashed."""
    from attnspec.backends.composite.fp8 import Fp8
    from attnspec.backends.numpy import attention
    from attnspec.spec.errors import NotImplementedComponent

    monkeypatch.delattr(attention, "fp8_grid")
    (fn,) = Fp8.bind("attnspec.backends.numpy", "sdpa_fp8")
    x = np.ones((1, 1, 2, 2))
    with pytest.raises(NotImplementedComponent, match="fp8_grid"):
        fn(x, x, x)
