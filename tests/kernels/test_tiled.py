"""The tiled online-softmax kernel (tests/kernels/tiled.py) passes every sdpa value vector
at every dtype it is run in (float16/bfloat16 for real, with float32 accumulation), at
several tilings, and the inputs built for the planted bugs; its log-sum-exp is the
float64 one."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")  # the kernels extra; ATTNSPEC_REQUIRE makes it an error there

from attnspec.backends.numpy import attention as npa

from .planted import MAX_ELEMENTS, TILINGS, fails, own_cases, run
from .tiled import tiled_sdpa
from .vectors import as_call, value_vectors

TILES = {**TILINGS, "1x1": (1, 1), "3x2": (3, 2)}
# the degenerate and odd tilings (one-query tiles; tiles that divide no length) run on the
# vectors of up to 4096 scores (every vector but 15 stress ones, whose loops over 1 x 1
# tiles take most of a minute); 2x2 and 64x64, the planted bugs' tilings, run on all
MAX_SCORES = {"1x1": 1 << 12, "3x2": 1 << 12}


@pytest.mark.parametrize("tiling", sorted(TILES))
def test_tiled_kernel_passes_every_sdpa_vector_at_every_dtype(tiling):
    bq, bk = TILES[tiling]
    vectors = value_vectors(max_elements=MAX_SCORES.get(tiling, MAX_ELEMENTS))
    failed = [(v.id, d) for v in vectors for d in v.dtypes
              if fails(v, d, block_q=bq, block_k=bk)]
    assert not failed, f"the correct tiled kernel fails {failed}"


@pytest.mark.parametrize("tiling", sorted(TILINGS))
def test_tiled_kernel_passes_the_inputs_built_for_the_planted_bugs(tiling):
    bq, bk = TILINGS[tiling]
    failed = [(c.id, d) for c in own_cases() for d in c.dtypes
              if fails(c, d, block_q=bq, block_k=bk)]
    assert not failed, f"the correct tiled kernel fails {failed}"


def _kept_scores(c):
    """float64 c q k^T (capped) + bias with -inf where the mask (causal included) drops."""
    q, k = c.q, c.k
    if c.num_kv_heads is not None:
        k = np.repeat(k, q.shape[-3] // c.num_kv_heads, axis=-3)
    scale = 1 / np.sqrt(q.shape[-1]) if c.scale is None else c.scale
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if c.softcap is not None:
        s = c.softcap * np.tanh(s / c.softcap)
    s = s + (0 if c.bias is None else c.bias)
    keep = np.ones(s.shape, bool) if c.mask is None else np.broadcast_to(c.mask, s.shape)
    if c.causal:
        keep = keep & npa.causal_mask(t=c.t, s=c.s)
    if c.window is not None:
        keep = keep & npa.sliding_window_mask(t=c.t, s=c.s, window=c.window)
    return np.where(keep, s, -np.inf)


def test_tiled_kernel_lse_is_the_float64_log_sum_exp_of_the_kept_scores():
    checked = 0
    for v in value_vectors():
        c = as_call(v)
        arrays = [a for a in (c.q, c.k, c.v, c.bias) if a is not None]
        if not all(np.isfinite(a).all() for a in arrays) or c.s == 0 or c.t == 0:
            continue
        _, _, lse = tiled_sdpa(c.q, c.k, c.v, c.mask, c.bias, scale=c.scale, softcap=c.softcap,
                               num_kv_heads=c.num_kv_heads, causal=c.causal, window=c.window,
                               block_q=2, block_k=2)
        s = _kept_scores(c)
        m = np.max(s, axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            want = np.where(np.isfinite(m), m + np.log(np.sum(np.exp(s - m), -1, keepdims=True)),
                            -np.inf)[..., 0]
        np.testing.assert_allclose(lse, want, rtol=1e-12, atol=1e-12, err_msg=v.id)
        checked += 1
    assert checked >= 20


def test_tiled_kernel_fully_masked_row_has_zero_weights_zero_output_and_lse_minus_inf():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 70, 4)), rng.normal(size=(2, 70, 3))
    mask = np.ones((3, 70), bool)
    mask[1] = False
    out, w, lse = tiled_sdpa(q, k, v, mask, block_q=2, block_k=64)
    assert (out[:, 1] == 0).all() and (w[:, 1] == 0).all() and (lse[:, 1] == -np.inf).all()
    assert np.isfinite(out).all() and np.isfinite(lse[:, [0, 2]]).all()


def test_tiled_kernel_refuses_an_unknown_bug_and_bad_input_with_the_spec_errors():
    from attnspec.spec.errors import ConfigError, ShapeError

    q = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match="bug must be one of"):
        tiled_sdpa(q, q, q, bug="nope")
    with pytest.raises(ShapeError):
        tiled_sdpa(q, np.zeros((2, 3, 5)), q)
    with pytest.raises(ConfigError):
        tiled_sdpa(q, q, q, scale="0.5")
    assert run(tiled_sdpa, as_call(value_vectors()[0]), "bfloat16")["output"].dtype.name == "bfloat16"
