"""The shared composites (backends/composite/): written against each backend's ops module
and spec functions only, and overridable per backend."""

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
from attnspec.backends.composite import OPS, Kernels
from attnspec.backends.composite.layers import Layers

COMPOSITE = Path(importlib.import_module("attnspec.backends.composite").__file__).parent


def test_the_composites_import_no_framework():
    """Only the standard library, attnspec.spec and the shared checks: every array op goes
    through a backend's ops module."""
    allowed = ("__future__", "importlib", "typing", "attnspec.spec")
    for path in sorted(COMPOSITE.glob("*.py")):
        if path.name == "tape.py":  # the reverse mode over NumPy arrays (hand-written VJPs)
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            bad = [n for n in names if not n.startswith(allowed)]
            assert not bad, f"{path.name} imports {bad}"


def test_numpy_ops_provide_the_whole_surface():
    ops = importlib.import_module("attnspec.backends.numpy.ops")
    assert [name for name in OPS if not callable(getattr(ops, name, None))] == []


def _params(d=4, f=6, layers=2):
    rng = np.random.default_rng(0)
    p = {}
    for i in range(layers):
        for w in ("w_q", "w_k", "w_v", "w_o"):
            p[f"layers.{i}.self_attn.{w}"] = rng.normal(size=(d, d))
        p[f"layers.{i}.ffn.w1"], p[f"layers.{i}.ffn.b1"] = rng.normal(size=(d, f)), np.zeros(f)
        p[f"layers.{i}.ffn.w2"], p[f"layers.{i}.ffn.b2"] = rng.normal(size=(f, d)), np.zeros(d)
        for n in ("norm1", "norm2"):
            p[f"layers.{i}.{n}.gamma"], p[f"layers.{i}.{n}.beta"] = np.ones(d), np.zeros(d)
    return p


def test_a_backend_override_is_used_by_the_composites_above_it(monkeypatch):
    """A backend that defines its own encoder_layer in its layers module (here one that
    counts its calls) gets it called by the shared encoder stack."""
    import attnspec.backends.numpy.layers as np_layers

    shared_layer = np_layers.encoder_layer
    calls = []

    def own_encoder_layer(x, mask=None, **kw):
        calls.append(kw["params"].prefix)
        return shared_layer(x, mask, **kw)

    monkeypatch.setattr(np_layers, "encoder_layer", own_encoder_layer)
    layers = Layers(Kernels("attnspec.backends.numpy"))  # as a backend binds them
    x = np.random.default_rng(1).normal(size=(1, 3, 4))
    y = layers.encoder(x, num_layers=2, num_heads=2, params=_params())
    assert calls == ["layers.0.", "layers.1."]
    monkeypatch.undo()
    np.testing.assert_array_equal(y, np_layers.encoder(x, num_layers=2, num_heads=2,
                                                        params=_params()))


def test_kernels_refuse_a_name_no_composite_calls():
    with pytest.raises(AttributeError, match="no spec function 'softmax_typo'"):
        Kernels("attnspec.backends.numpy").softmax_typo  # noqa: B018


def test_the_tape_is_the_only_composite_module_on_numpy():
    """tape.py holds NumPy arrays (a backend's hand-written VJPs are NumPy code); it imports
    NumPy and the standard library only, and no composite imports it."""
    tape = (COMPOSITE / "tape.py").read_text()
    mods = {n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(ast.parse(tape)) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}
    assert not {m for m in mods if m and m.split(".")[0] in ("torch", "tensorflow", "keras")}
    for path in sorted(COMPOSITE.glob("*.py")):
        if path.name != "tape.py":
            assert "tape" not in path.read_text().replace("tape.py", ""), path.name
