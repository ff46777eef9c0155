"""The planted kernel bugs of tests/kernels/tiled.py judged by the sdpa vectors, and the
inputs built here for the bugs that pass every vector (issue 21.2).

A bug is run at every dtype for real (the tiled kernel computes in float16/bfloat16 with
float32 accumulation) and at two tilings: ``2x2`` tiles, where the small vectors cross tile
edges, and ``64x64``, a kernel's usual tile, where no vector of fewer than 65 keys does.
It is caught by a vector when some vector fails; otherwise by an own case: inputs built
from sdpa's semantics, the expected values the NumPy backend's sdpa in float64
(:func:`.vectors.own_case`). Each own case names the stress input that would have caught
the bug (issue 21.1).
"""

from __future__ import annotations

import numpy as np

from .tiled import BUGS, as_dtype, tiled_sdpa
from .vectors import ALL_DTYPES, Call, as_call, judged, own_case, value_vectors

TILINGS = {"2x2": (2, 2), "64x64": (64, 64)}
# vectors up to this many scores (B·H·T·S) are judged: every current one, and the stress
# ones (21.1) up to 1024 x 1024, where a 2x2-tiled NumPy loop still takes seconds
MAX_ELEMENTS = 1 << 20

# the stress input that would have caught each bug where no current vector does
STRESS = {
    "below-sentinel": "every kept score <= -1e5 (21.1 magnitudes)",
    "masked-above-kept": "a masked key scoring above every kept key, kept scores <= -1e5",
    "long-causal": "T != S at odd sizes across a 64-key tile edge, causal (97 x 161)",
    "masked-gap": "T = 97, S = 161 with a fully masked 64-key tile between kept keys",
    "overflow": "products that overflow the dtype unless scaled first",
}


def run(fn, call: Call, dtype: str, **kw):
    def x(a):
        return None if a is None else (as_dtype(a, dtype) if a.dtype.kind == "f" else a)
    with np.errstate(all="ignore"):
        out, w, _ = fn(x(call.q), x(call.k), x(call.v), call.mask, x(call.bias),
                       scale=call.scale, num_kv_heads=call.num_kv_heads, softcap=call.softcap,
                       causal=call.causal, window=call.window, **kw)
    return {"output": out, "weights": w}


def fails(case, dtype: str, **kw) -> bool:
    """Does the tiled kernel (with ``kw``: tiles, bug) fail ``case`` at ``dtype``?"""
    call = case.call if hasattr(case, "call") else as_call(case)
    try:
        got = run(tiled_sdpa, call, dtype, **kw)
    except Exception:
        return True
    return judged(case, dtype, got).status != "pass"


def _ints(rng, shape, lo=-3, hi=3):
    return rng.integers(lo, hi + 1, size=shape).astype(np.float64)


def own_cases() -> list:
    """Inputs exact in every dtype (small integers and powers of two)."""
    rng = np.random.default_rng(21)
    t, s = 3, 5
    q = np.zeros((1, t, 4))
    q[..., 0] = 256
    q[0, :, 1] = [1, 0, 2]
    k = np.zeros((1, s, 4))
    k[..., 0] = -392  # 256 * -392 = -100352: every score within 4 of -1e5
    k[0, :, 1] = [0, 1, -1, 2, 1]
    k[0, :, 2] = [1, -2, 0, 1, 2]
    q[0, :, 2] = [1, 1, -1]
    v = _ints(rng, (1, s, 3))
    mask = np.array([[False, True, True, False, True], [True, False, True, True, False],
                     [False, False, True, True, True]])
    long_q, long_k, long_v = _ints(rng, (1, 2, 97, 8)), _ints(rng, (1, 2, 161, 8)), _ints(rng, (1, 2, 161, 5))
    gap = np.ones((97, 161), dtype=bool)
    gap[:, 64:128] = False
    gap[::3, 130:] = False
    cases = [
        own_case("own/below-sentinel", Call(q, k, v, scale=1.0), STRESS["below-sentinel"]),
        own_case("own/masked-above-kept", Call(q, k, v, mask, scale=1.0), STRESS["masked-above-kept"]),
        own_case("own/long-causal", Call(long_q, long_k, long_v, causal=True), STRESS["long-causal"]),
        own_case("own/masked-gap", Call(long_q, long_k, long_v, gap), STRESS["masked-gap"]),
    ]
    # |q k^T| overflows the dtype (2^(2e) times a sum of +-1), c = 2^(2 - 2e) brings it to
    # +-16: float16 e = 8, float32 and bfloat16 e = 64, float64 e = 512
    signs_q, signs_k, vv = _ints(rng, (1, 4, 4), -1, 1), _ints(rng, (1, 6, 4), -1, 1), _ints(rng, (1, 6, 3))
    signs_q[..., 0], signs_k[..., 0] = 1, 1
    for e, dtypes in ((8, ("float16",)), (64, ("float32", "bfloat16")), (512, ("float64",))):
        call = Call(signs_q * 2.0 ** e, signs_k * 2.0 ** e, vv, scale=2.0 ** (2 - 2 * e))
        cases.append(own_case(f"own/overflow-2^{e}", call, STRESS["overflow"], dtypes))
    return cases


def catch(bug: str, dtype: str, tiling: str, cases=None) -> tuple[list[str], list[str]]:
    """(ids of the vectors that reject ``bug``, ids of the own cases that do)."""
    bq, bk = TILINGS[tiling]
    kw = {"bug": bug, "block_q": bq, "block_k": bk}
    by_vectors = [v.id for v in value_vectors(max_elements=MAX_ELEMENTS)
                  if dtype in v.dtypes and fails(v, dtype, **kw)]
    own = [c.id for c in (cases if cases is not None else own_cases())
           if dtype in c.dtypes and fails(c, dtype, **kw)]
    return by_vectors, own


__all__ = ["ALL_DTYPES", "BUGS", "MAX_ELEMENTS", "TILINGS", "catch", "fails", "own_cases", "run"]
