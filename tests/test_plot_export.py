"""`attnspec show ID --plot` and `attnspec export ID`."""

import json
import sys

import numpy as np
import pytest
from attnspec.conformance.cli import main
from attnspec.spec.vectors import VECTORS_DIR, load


@pytest.fixture(scope="module")
def spec():
    return load(VECTORS_DIR)


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "w.png"
    assert main(["show", "sdpa/basic-001", "--plot", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "attnspec[plot]" in err
    assert not out.exists()


def test_panels_per_head_and_positional(spec):
    from attnspec.conformance.plot import panels

    v = spec.vector("mha/self-001")
    items = panels(v)
    w = v.outputs.get("weights", v.intermediates.get("weights"))
    titles = [t for t, *_ in items]
    assert any("head 1" in t for t in titles), titles
    title, m, rows, cols = items[0]
    assert m.ndim == 2 and rows[0].startswith("q0") and cols[0].startswith("k0")
    assert w is None or m.shape == w.shape[-2:]
    (title, m, _, _), = panels(spec.vector("sinusoidal_pe/basic-001"))
    assert "positional" in title and m.shape == spec.vector("sinusoidal_pe/basic-001").outputs[
        "pe"].shape
    titles = [t for t, *_ in panels(spec.vector("layer_norm/basic-001"))]
    assert any(t.startswith("input x") for t in titles) and any(
        t.startswith("expected y") for t in titles)


@pytest.mark.parametrize("vid", ["sdpa/heads-001", "sinusoidal_pe/basic-001",
                                 "layer_norm/basic-001"])
def test_plot_draws_a_png(tmp_path, capsys, vid):
    pytest.importorskip("matplotlib")
    out = tmp_path / "v.png"
    assert main(["show", vid, "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out}" in capsys.readouterr().out


def test_export_npz_has_no_pickled_objects(tmp_path, spec, capsys):
    out = tmp_path / "v.npz"
    assert main(["export", "sdpa/basic-001", "--out", str(out)]) == 0
    v = spec.vector("sdpa/basic-001")
    with np.load(out, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
        np.testing.assert_array_equal(z["inputs/q"], v.inputs["q"])
        np.testing.assert_array_equal(z["outputs/weights"], v.outputs["weights"])
        meta = json.loads(str(z["meta"]))
    assert meta["id"] == "sdpa/basic-001" and meta["citation"].startswith("attnspec ")
    assert meta["tolerances"]["float32"]["rtol"] > 0


def test_export_json_round_trips(tmp_path, spec):
    out = tmp_path / "v.json"
    assert main(["export", "sinusoidal_pe/basic-001", "--format", "json", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["vector"]["id"] == "sinusoidal_pe/basic-001"
    assert "sinusoidal_pe" in doc["functions"]
    assert doc["citation"] == spec.vector("sinusoidal_pe/basic-001").citation(spec.version)


def test_export_unknown_id(capsys):
    assert main(["export", "sdpa/nope-001"]) == 2
    assert "no such vector" in capsys.readouterr().err
