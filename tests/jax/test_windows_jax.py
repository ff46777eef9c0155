"""jax.nn.dot_product_attention's `local_window_size=(l, r)` against local_window_mask
(masks.md, "Local windows (left, right)"): the same band when T = S, top-left (query i at
position i, not i + S - T) when T != S: the difference is asserted on the vectors that
catch it, so the page goes stale loudly when JAX changes."""

import jax
import numpy as np
import pytest
from attnspec.spec.vectors import default_spec

jax.config.update("jax_enable_x64", True)
SPEC = default_spec()


def jax_mask(t: int, s: int, left, right) -> np.ndarray:
    """Q = K = 0, V = I_S: output row i is uniform over the keys it sees. (B, T, N, H) layout."""
    q, k = np.zeros((1, t, 1, s)), np.zeros((1, s, 1, s))  # jax wants one head width
    v = np.eye(s)[None, :, None, :]  # (1, S, 1, S)
    out = jax.nn.dot_product_attention(q, k, v, local_window_size=(left, right), implementation="xla")
    return np.asarray(out)[0, :, 0, :] > 0


def _bounded(v) -> bool:
    a = v.attributes
    return v.function == "local_window_mask" and v.expect == "value" and not v.deprecated \
        and a["left"] is not None and a["right"] is not None and a["t"] > 0


@pytest.mark.parametrize("v", [v for v in SPEC.vectors if _bounded(v)], ids=lambda v: v.id)
def test_local_window_size_is_top_left(v):
    a = v.attributes
    t, s, left, right = a["t"], a["s"], a["left"], a["right"]
    got = jax_mask(t, s, left, right)
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    top_left = (j >= i - left) & (j <= i + right)
    empty = ~top_left.any(axis=-1)  # rows that keep nothing: jax's own fully-masked convention
    assert np.array_equal(got[~empty], top_left[~empty])
    if t == s:  # no offset: jax's band is the spec's
        assert np.array_equal(got, v.outputs["mask"])


@pytest.mark.parametrize("vid", ["masks/local-002", "masks/local-008"])
def test_local_window_size_fails_the_bottom_right_vectors(vid):
    v = SPEC.vector(vid)
    a = v.attributes
    assert not np.array_equal(jax_mask(a["t"], a["s"], a["left"], a["right"]), v.outputs["mask"])
