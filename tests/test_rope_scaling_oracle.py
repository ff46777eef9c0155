"""The rope_frequencies oracle's own identities at 50 digits (factor 1, dynamic below L0, llama3's
band edges) and the NumPy backend's errors; transformers' values are in
tests/hf/test_rope_frequencies_hf.py."""

import numpy as np
import pytest
from attnspec.spec.oracle.rope_frequencies import rope_frequencies

K, BASE, L0 = 16, 10000.0, 64


def test_factor_one_equals_default():
    d = rope_frequencies(head_dim=K)["inv_freq"]
    for rope_type, kw in [("linear", {}), ("dynamic", {"seq_len": L0}),
                          ("yarn", {}), ("llama3", {"low_freq_factor": 1, "high_freq_factor": 4})]:
        out = rope_frequencies(head_dim=K, rope_type=rope_type, factor=1.0,
                               original_max_position_embeddings=L0, max_position_embeddings=L0, **kw)
        np.testing.assert_allclose(np.array(out["inv_freq"], float), np.array(d, float), rtol=1e-15)


def test_dynamic_below_original_length_equals_default_at_any_factor():
    d = np.array(rope_frequencies(head_dim=K)["inv_freq"], float)
    out = rope_frequencies(head_dim=K, rope_type="dynamic", factor=4.0, seq_len=L0 // 2,
                           original_max_position_embeddings=L0, max_position_embeddings=L0)
    np.testing.assert_allclose(np.array(out["inv_freq"], float), d, rtol=1e-15)


def test_dynamic_factor_one_beyond_original_length_is_not_default():
    """b' = b (L / L0)^(K/(K-2)) when factor = 1: NTK scaling still grows the base past L0."""
    d = np.array(rope_frequencies(head_dim=K)["inv_freq"], float)
    out = rope_frequencies(head_dim=K, rope_type="dynamic", factor=1.0, seq_len=4 * L0,
                           original_max_position_embeddings=L0, max_position_embeddings=L0)
    assert np.all(np.array(out["inv_freq"], float)[1:] < d[1:] * 0.9)


@pytest.mark.parametrize("edge", ["high", "low"])
def test_llama3_band_edges_are_continuous(edge):
    """L0 chosen so that pair 2's wavelength sits exactly on a band edge (50 digits): sigma = 1
    at w = L0 / high gives theta, sigma = 0 at w = L0 / low gives theta / factor."""
    import mpmath
    with mpmath.workdps(50):
        _llama3_edge(edge, mpmath)


def _llama3_edge(edge, mpmath):
    theta = mpmath.power(mpmath.mpf(BASE), -mpmath.mpf(4) / K)
    w = 2 * mpmath.pi / theta
    l0 = w * (4 if edge == "high" else 1)
    out = rope_frequencies(head_dim=K, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=l0)
    want = theta if edge == "high" else theta / 8
    assert abs(out["inv_freq"][2] - want) < mpmath.mpf(10) ** -40 * want


@pytest.mark.parametrize("kw,err,mention", [
    ({"head_dim": 7}, "ConfigError", "head_dim"),
    ({"head_dim": 8, "rope_type": "ntk"}, "ConfigError", "rope_type"),
    ({"head_dim": 8, "rope_type": "linear", "factor": 0.0}, "ConfigError", "factor"),
    ({"head_dim": 8, "rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64,
      "low_freq_factor": 4.0, "high_freq_factor": 1.0}, "ConfigError", "high_freq_factor"),
    ({"head_dim": 8, "rope_type": "yarn", "factor": 8.0}, "ConfigError",
     "original_max_position_embeddings"),
])
def test_numpy_errors(kw, err, mention):
    from attnspec.backends.numpy.positional import rope_frequencies as np_rope_frequencies
    from attnspec.spec import errors
    with pytest.raises(getattr(errors, err), match=mention):
        np_rope_frequencies(**kw)
