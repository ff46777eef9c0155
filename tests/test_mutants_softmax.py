"""Planted bugs in softmax that the vectors must catch at every dtype."""

import numpy as np
import pytest
from attnspec.backends.numpy import attention

from .mutants import assert_rejected, mutant


def naive(x, mask=None, *, axis=-1):
    """No max subtraction: overflows for logits around 1000."""
    e = np.exp(x) if mask is None else np.where(mask, np.exp(x), 0)
    return e / e.sum(axis=axis, keepdims=True)


def fill_minus_1e9(x, mask=None, *, axis=-1):
    """The Annotated Transformer's masked_fill(-1e9): a fully masked row becomes uniform."""
    if mask is not None:
        x = np.where(mask, x, -1e9)
    return attention.softmax(x, axis=axis)


def inverted_mask(x, mask=None, *, axis=-1):
    return attention.softmax(x, None if mask is None else ~np.asarray(mask), axis=axis)


def wrong_axis(x, mask=None, *, axis=-1):
    return attention.softmax(x, mask, axis=-1)


def framework_pos_inf(x, mask=None, *, axis=-1):
    """torch.softmax / tf.nn.softmax on masked_fill(-inf): a row holding +inf is NaN."""
    x = np.asarray(x)
    keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    x = np.where(keep, x, -np.inf)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isneginf(m), 0, m))
    total = e.sum(axis=axis, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def nan_as_masked(x, mask=None, *, axis=-1):
    """NaN entries dropped like masked ones (a nanmax/nansum implementation)."""
    x = np.asarray(x)
    keep = ~np.isnan(x) if mask is None else ~np.isnan(x) & np.asarray(mask)
    return attention.softmax(np.where(np.isnan(x), 0, x), keep, axis=axis)


@pytest.mark.parametrize("broken", [naive, fill_minus_1e9, inverted_mask, wrong_axis,
                                    framework_pos_inf, nan_as_masked],
                         ids=lambda f: f.__name__)
def test_softmax_mutant_is_rejected(broken):
    with np.errstate(all="ignore"):
        assert_rejected(mutant(softmax=broken), "softmax")


def test_correct_backend_is_not_rejected():
    from .mutants import rejections

    assert rejections(mutant(), "softmax") == dict.fromkeys(rejections(mutant(), "softmax"), 0)
