"""Window and chunk bugs at kernel sizes: sdpa/stress-local-001 (T = 97, S = 1025, left 64,
right 32) and sdpa/stress-chunked-001 (T = S = 257, chunks of 128) fed the mask a kernel
with the bug would build; each must fail at every dtype the vector lists (a float64 output
judged with each dtype's tolerance, as tests/mutants.py does)."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention
from attnspec.spec.compare import compare
from attnspec.spec.vectors import default_spec

SPEC = default_spec()


def band(t, s, left, right, top_left=False):
    p = np.arange(t)[:, None] + (0 if top_left else s - t)  # (T, 1)
    j = np.arange(s)[None, :]  # (1, S)
    return (j >= p - left) & (j <= p + right)


def chunks(t, s, chunk, causal=True, shift=0):
    p, j = np.arange(t)[:, None] + (s - t), np.arange(s)[None, :]
    keep = (j + shift) // chunk == (p + shift) // chunk
    return keep & (j <= p) if causal else keep


LOCAL = {  # (T, S) = (97, 1025), left 64, right 32
    "right_ignored": lambda t, s: band(t, s, 64, 0),
    "left_exclusive": lambda t, s: band(t, s, 63, 32),
    "left_plus_one": lambda t, s: band(t, s, 65, 32),
    "right_exclusive": lambda t, s: band(t, s, 64, 31),
    "right_plus_one": lambda t, s: band(t, s, 64, 33),
    "top_left": lambda t, s: band(t, s, 64, 32, top_left=True),
    "swapped": lambda t, s: band(t, s, 32, 64),
}
CHUNKED = {  # T = S = 257, chunk 128, causal
    "boundary_off_by_one": lambda t, s: chunks(t, s, 128, shift=1),
    "chunk_plus_one": lambda t, s: chunks(t, s, 129),
    "not_causal": lambda t, s: chunks(t, s, 128, causal=False),
    "sliding_window": lambda t, s: attention.sliding_window_mask(t=t, s=s, window=128),
}


def failing_dtypes(vid: str, broken) -> dict:
    """Per dtype of the vector: does sdpa with the broken mask fail it?"""
    v = SPEC.vector(vid)
    x = v.inputs
    t, s = x["q"].shape[-2], x["k"].shape[-2]
    mask = broken(t, s)
    assert mask.shape == (t, s) and not np.array_equal(mask, x["mask"])
    out, w = attention.sdpa(x["q"], x["k"], x["v"], mask, **v.attributes)
    return {d: not (compare(out, v.outputs["output"], d, v.tolerances[d]).ok
                    and compare(w, v.outputs["weights"], d, v.tolerances[d]).ok)
            for d in v.dtypes}


def test_the_right_masks_pass():
    """The harness can pass: the vectors' own masks rebuilt here agree at every dtype."""
    for vid, right in (("sdpa/stress-local-001", lambda t, s: band(t, s, 64, 32)),
                       ("sdpa/stress-chunked-001", lambda t, s: chunks(t, s, 128))):
        v = SPEC.vector(vid)
        x = v.inputs
        assert np.array_equal(right(x["q"].shape[-2], x["k"].shape[-2]), x["mask"])
        out, w = attention.sdpa(x["q"], x["k"], x["v"], x["mask"], **v.attributes)
        for d in v.dtypes:
            assert compare(out, v.outputs["output"], d, v.tolerances[d]).ok, d


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_window_bug_is_caught_at_kernel_size(name):
    fails = failing_dtypes("sdpa/stress-local-001", LOCAL[name])
    assert all(fails.values()), fails


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_chunked_bug_is_caught_at_kernel_size(name):
    fails = failing_dtypes("sdpa/stress-chunked-001", CHUNKED[name])
    assert all(fails.values()), fails
