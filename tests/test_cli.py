"""The command line's machine-readable surfaces, run as a user runs them."""

import json
import shutil
import subprocess
import sys

import pytest
from attnspec.spec.vectors import VECTORS_DIR, default_spec


def attnspec(*args, check=False):
    p = subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", *args],
                       capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_list_json_has_every_vector():
    rows = json.loads(attnspec("list", "--json", check=True).stdout)
    assert {r["id"] for r in rows} == {v.id for v in default_spec().vectors}
    assert all({"id", "component", "expect"} <= set(r) for r in rows)
    assert {r["expect"] for r in rows} == {"value", "error", "gradient"}


def test_cite_prints_the_design_citation_line():
    v = default_spec().vectors[0]
    out = attnspec("cite", v.id, check=True).stdout.splitlines()[0]  # then its URL: test_site.py
    assert out == f"attnspec {default_spec().version} · {v.id} · sha256:{v.sha256[:12]}"
    bib = attnspec("cite", v.id, "--format", "bibtex", check=True).stdout
    assert bib.startswith("@misc{") and v.id in bib


def test_show_prints_inputs_and_outputs():
    out = attnspec("show", "softmax/mask-001", check=True).stdout
    assert "input x" in out and "output y" in out and "mask" in out


def test_unknown_id_is_a_clean_error():
    p = attnspec("show", "softmax/nope-001")
    assert p.returncode == 2 and "no such vector" in p.stderr


def test_verify_passes_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    p = attnspec("verify", "-k", "softmax", "--json", str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "softmax" in p.stdout and "max ULP" in p.stdout
    assert "cannot be rewritten" not in p.stdout + p.stderr  # no warning of our own making
    doc = json.loads(out.read_text())
    assert doc["backend"] == "numpy" and doc["device"] == "cpu"
    assert doc["results"] and all(r["status"] == "pass" for r in doc["results"])
    assert {"id", "dtype", "status", "max_abs_err", "max_ulp"} <= set(doc["results"][0])


def test_verify_fails_naming_a_tampered_file(tmp_path):
    d = tmp_path / "vectors"
    shutil.copytree(VECTORS_DIR, d)
    text = (d / "softmax.json").read_text().replace("0.13795154508908075", "0.13795154508908076")
    assert text != (VECTORS_DIR / "softmax.json").read_text()
    (d / "softmax.json").write_text(text)
    p = attnspec("verify", "-k", "softmax", "--vectors-dir", str(d))
    assert p.returncode != 0
    assert "softmax.json" in p.stdout + p.stderr


@pytest.mark.parametrize("backend", ["no-such-backend"])
def test_verify_with_an_unknown_backend_fails(backend):
    p = attnspec("verify", "--backend", backend, "-k", "completeness")
    assert p.returncode != 0 and "unknown backend" in p.stdout + p.stderr


def test_verify_sets_the_jax_compile_cache_only_for_jax(monkeypatch, tmp_path):
    from attnspec.conformance.cli import jax_compile_cache, verify_environment

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jax_compile_cache() == str(tmp_path / "attnspec" / "jax-compile")
    assert verify_environment("jax") == {"ATTNSPEC_JAX_COMPILE_CACHE": jax_compile_cache()}
    assert verify_environment("numpy") == {} and verify_environment("torch") == {}
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert jax_compile_cache() == str(tmp_path / ".cache" / "attnspec" / "jax-compile")
