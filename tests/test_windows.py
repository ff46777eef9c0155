"""Planted bugs in local_window_mask (left, right) and chunked_mask that the masks vectors
must catch at every dtype (issue 22, item 5)."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant, rejections


def _grid(t, s, top_left=False):
    """(p, j): the queries' absolute positions (T, 1) and the key positions (1, S)."""
    p = np.arange(t)[:, None] + (0 if top_left else s - t)
    return p, np.arange(s)[None, :]


def _band(t, s, lo, hi, top_left=False):
    """Keys p - lo <= j <= p + hi, either bound None for unbounded."""
    p, j = _grid(t, s, top_left)
    keep = np.ones((t, s), dtype=bool)
    if lo is not None:
        keep &= j >= p - lo
    if hi is not None:
        keep &= j <= p + hi
    return keep


# -- local_window_mask -----------------------------------------------------------


def local_right_ignored(*, t, s, left, right):
    """right dropped: the causal band of flash-attn's window_size=(left, 0)."""
    return _band(t, s, left, 0)


def local_swapped(*, t, s, left, right):
    """window_size read as (right, left)."""
    return _band(t, s, right, left)


def local_left_exclusive(*, t, s, left, right):
    """j > p - left: the left bound read as exclusive (one key fewer)."""
    return _band(t, s, None if left is None else left - 1, right)


def local_left_plus_one(*, t, s, left, right):
    """j >= p - left - 1: one key too many on the left (Mistral's prefill counting)."""
    return _band(t, s, None if left is None else left + 1, right)


def local_right_exclusive(*, t, s, left, right):
    """j < p + right: the right bound read as exclusive."""
    return _band(t, s, left, None if right is None else right - 1)


def local_right_plus_one(*, t, s, left, right):
    return _band(t, s, left, None if right is None else right + 1)


def local_top_left(*, t, s, left, right):
    """p = i (jax.nn.dot_product_attention's local_window_size; ONNX without past_key)."""
    return _band(t, s, left, right, top_left=True)


def local_none_as_zero(*, t, s, left, right):
    """None (unbounded) read as 0."""
    return _band(t, s, left or 0, right or 0)


LOCAL_BUGS = [local_right_ignored, local_swapped, local_left_exclusive, local_left_plus_one,
              local_right_exclusive, local_right_plus_one, local_top_left, local_none_as_zero]


@pytest.mark.parametrize("broken", LOCAL_BUGS, ids=lambda f: f.__name__)
def test_local_window_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(local_window_mask=broken), "masks")


# -- chunked_mask ----------------------------------------------------------------


def _chunks(t, s, chunk, causal, shift=0, top_left=False, div=np.floor_divide):
    p, j = _grid(t, s, top_left)
    keep = div(j + shift, chunk) == div(p + shift, chunk)
    return keep & (j <= p) if causal else keep


def chunked_boundary_off_by_one(*, t, s, chunk, causal=True):
    """Chunks start at position C - 1 instead of 0 ((j + 1) // C)."""
    return _chunks(t, s, chunk, causal, shift=1)


def chunked_chunk_plus_one(*, t, s, chunk, causal=True):
    """Chunks of C + 1 positions."""
    return _chunks(t, s, chunk + 1, causal)


def chunked_not_causal(*, t, s, chunk, causal=True):
    """The causal part dropped: full blocks whatever `causal` says."""
    return _chunks(t, s, chunk, False)


def chunked_top_left(*, t, s, chunk, causal=True):
    """Query i at position i (top-left) when T != S."""
    return _chunks(t, s, chunk, causal, top_left=True)


def chunked_truncating_division(*, t, s, chunk, causal=True):
    """C-style division toward zero: position -1 lands in chunk 0 (T > S)."""
    return _chunks(t, s, chunk, causal, div=lambda a, b: np.trunc(a / b).astype(np.int64))


def chunked_default_not_causal(*, t, s, chunk, causal=False):
    """causal defaulting to False."""
    return _chunks(t, s, chunk, causal)


def chunked_sliding_window(*, t, s, chunk, causal=True):
    """A sliding window of C keys instead of fixed chunks."""
    return attention.sliding_window_mask(t=t, s=s, window=chunk)


CHUNKED_BUGS = [chunked_boundary_off_by_one, chunked_chunk_plus_one, chunked_not_causal,
                chunked_top_left, chunked_truncating_division, chunked_default_not_causal,
                chunked_sliding_window]


@pytest.mark.parametrize("broken", CHUNKED_BUGS, ids=lambda f: f.__name__)
def test_chunked_mask_mutant_is_rejected(broken):
    assert_rejected(mutant(chunked_mask=broken), "masks")


# -- the planted bugs are real masks, and the correct ones pass ------------------


@pytest.mark.parametrize("broken", LOCAL_BUGS, ids=lambda f: f.__name__)
def test_local_window_bug_returns_a_mask_of_the_right_shape(broken):
    """A mutant that crashed would count as rejected: each returns a (T, S) bool mask."""
    for left, right in ((2, 1), (None, 0), (0, None), (None, None)):
        out = broken(t=3, s=5, left=left, right=right)
        assert out.shape == (3, 5) and out.dtype == np.bool_


@pytest.mark.parametrize("broken", CHUNKED_BUGS, ids=lambda f: f.__name__)
def test_chunked_bug_returns_a_mask_of_the_right_shape(broken):
    for causal in (True, False):
        out = broken(t=5, s=3, chunk=2, causal=causal)
        assert out.shape == (5, 3) and out.dtype == np.bool_


def test_the_reference_masks_pass_every_masks_vector():
    """The same harness accepts correct re-implementations (it can say pass)."""
    def local(*, t, s, left, right):
        return _band(t, s, left, right)

    def chunked(*, t, s, chunk, causal=True):
        return _chunks(t, s, chunk, causal)
    fails = rejections(mutant(local_window_mask=local, chunked_mask=chunked), "masks")
    assert not any(fails.values()), fails


# -- attnspec check knows both functions ---------------------------------------------


USER_CODE = '''import numpy as np

def local(*, t, s, left, right):
    p, j = np.arange(t)[:, None] + s - t, np.arange(s)[None, :]
    keep = np.ones((t, s), dtype=bool)
    if left is not None:
        keep &= j >= p - left
    if right is not None:
        keep &= j <= p + right
    return keep

def local_top_left(*, t, s, left, right):
    p, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return (j >= p - (left if left is not None else t + s)) & (j <= p + (right if right is not None else s))

def chunked(*, t, s, chunk, causal=True):
    p, j = np.arange(t)[:, None] + s - t, np.arange(s)[None, :]
    keep = j // chunk == p // chunk
    return keep & (j <= p) if causal else keep
'''


@pytest.mark.parametrize("target,function,rc", [("local", "local_window_mask", 0),
                                                ("local_top_left", "local_window_mask", 1),
                                                ("chunked", "chunked_mask", 0)])
def test_attnspec_check_runs_the_window_and_chunk_vectors(tmp_path, capsys, target, function, rc):
    from attnspec.conformance.cli import main

    path = tmp_path / "user_masks.py"
    path.write_text(USER_CODE, encoding="utf-8")
    assert main(["check", f"{path}:{target}", "--component", "masks", "--function", function]) == rc
    out = capsys.readouterr().out
    assert ("masks/local-002" if function == "local_window_mask" else "masks/chunked-003") in out
