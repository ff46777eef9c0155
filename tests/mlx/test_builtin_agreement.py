"""MLX's built-ins judged against the golden vectors (backends/mlx/extras_builtins.py):
each agreement check compares at least one vector and passes on the installed mlx, and an
agreement check can fail (a built-in off by a little is caught)."""

import numpy as np
import pytest
from attnspec.backends.mlx import extras_builtins as extras
from attnspec.spec.vectors import default_spec

SPEC = default_spec()
CHECKS = dict(extras.all_builtin_checks("cpu"))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_extra_passes_on_the_installed_mlx(name):
    CHECKS[name](SPEC)


def test_the_names_are_kind_slash_subject():
    assert all(n.split("/")[0] in ("agree", "pinned") and "/" in n for n in CHECKS)
    assert {"agree/mx.fast.scaled_dot_product_attention", "agree/mx.softmax", "agree/nn.RoPE",
            "agree/mx.fast.layer_norm", "agree/nn.LayerNorm", "agree/mx.fast.rms_norm",
            "agree/nn.RMSNorm", "agree/mx.fast.rope", "agree/nn.MultiHeadAttention"} <= set(CHECKS)


def test_the_added_checks_are_new_names():
    added = [n for n, _ in extras.builtin_checks("cpu")]
    assert len(set(added)) == len(added) and "agree/mx.fast.scaled_dot_product_attention" not in added


def test_an_agreement_check_fails_on_a_wrong_built_in(monkeypatch):
    real = extras.mx.softmax
    monkeypatch.setattr(extras.mx, "softmax", lambda x, **kw: real(x, **kw) * (1 + 1e-3))
    with pytest.raises(AssertionError, match="mx.softmax"):
        dict(extras.builtin_checks("cpu"))["agree/mx.softmax"](SPEC)


def test_the_agreement_compares_the_vectors_it_can_express():
    """sdpa's left-out vectors are the ones mlx.md names (non-finite, empty rows, softcap)."""
    kept = [v for v in extras._values(SPEC, "sdpa") if extras._sdpa_expressible(SPEC, v)]
    assert len(kept) >= 10
    assert all(np.all(np.isfinite(np.asarray(v.inputs["q"]))) for v in kept)
