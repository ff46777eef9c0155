"""The site's pages as generated from the vector files (conformance/site.py) and the URL
`attnspec cite` prints. The built site in a browser: tests/test_site_browser.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from attnspec.conformance.sitepages import SITE_URL, heatmap_svg, vector_page, vector_url
from attnspec.spec.vectors import content_hash, default_spec

ROOT = Path(__file__).resolve().parent.parent


def cite(*args, env=None):
    return subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "cite", *args],
                          capture_output=True, text=True, check=True, env=env).stdout


def test_cite_prints_the_vectors_page_under_the_release():
    spec = default_spec()
    lines = cite("sdpa/basic-001", "--base-url", "http://127.0.0.1:8000/").splitlines()
    sha = spec.vector("sdpa/basic-001").sha256
    assert lines == [f"attnspec {spec.version} · sdpa/basic-001 · sha256:{sha[:12]}",
                     f"http://127.0.0.1:8000/{spec.version}/vectors/sdpa/basic-001/"]


def test_cite_defaults_to_the_published_site_and_bibtex_carries_the_url():
    spec = default_spec()
    assert cite("mha").splitlines()[1] == f"{SITE_URL}/components/mha/"
    bib = cite("sdpa/basic-001", "--format", "bibtex")
    assert f"url          = {{{SITE_URL}/{spec.version}/vectors/sdpa/basic-001/}}\n}}" in bib


def test_the_site_url_is_the_packages_documentation_url():
    urls = re.findall(r'^Documentation = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert urls == [SITE_URL]


def test_a_vector_page_shows_its_record_and_the_download_is_the_exact_record():
    v = default_spec().vector("sdpa/basic-001")
    text, files = vector_page(v, "9.9.9")
    record = json.loads(files["basic-001.json"])
    assert record == v.raw and content_hash(record) == v.sha256
    assert f'data-id="{v.id}" data-sha256="{v.sha256}"' in text
    assert "](basic-001.json)" in text and "weights.svg" in files
    q = v.inputs["q"].reshape(-1)  # small arrays are printed whole
    assert f"{q[0]:.6f}".rstrip("0") in text and f"{q[-1]:.6f}".rstrip("0") in text
    for name in ("q", "k", "v", "output", "weights"):
        assert f"### `{name}`" in text


def test_a_large_array_is_summarised_and_an_error_vector_names_its_error():
    spec = default_spec()
    big = next(v for v in spec.vectors if v.expect == "value" and not v.file.startswith("stress")
               and max(map(np.size, v.inputs.values()), default=0) > 200)
    text, _ = vector_page(big, spec.version)
    a = max(big.inputs.values(), key=np.size)
    assert f"{a.size} elements: min {a.min():.6g}, max {a.max():.6g}" in text
    bad = next(v for v in spec.vectors if v.expect == "error")
    assert f"`{bad.error}`" in vector_page(bad, spec.version)[0]


def test_a_stress_page_shows_shapes_and_digests():
    spec = default_spec()
    v = next(v for v in spec.vectors if v.file.startswith("stress"))
    text, files = vector_page(v, spec.version)
    assert json.loads(next(iter(files.values())))["sha256"] == v.sha256
    for name, digest in v.raw["digests"].items():
        assert f"`{name}`" in text and digest in text


def test_the_heatmap_draws_each_weight_in_its_cell():
    w = np.array([[[1.0, 0.0], [0.25, 0.75]]])  # (H, T, S)
    svg = heatmap_svg(w, "w")
    cells = re.findall(r'<rect x="(\d+)" y="(\d+)" [^>]*fill="rgb\((\d+),(\d+),255\)"', svg)
    assert [c[2] for c in cells] == ["0", "255", "191", "63"]  # red falls as the weight rises
    assert len({(c[0], c[1]) for c in cells}) == 4


def test_vector_urls_keep_the_ids_slash():
    assert vector_url("mha/padding-001", "1.4.0", "http://h/x/") == "http://h/x/1.4.0/vectors/mha/padding-001/"
