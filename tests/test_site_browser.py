"""The built site in headless Chromium (Debian's chromium and chromedriver, driven by Selenium),
served by a local http server: every page but the vector pages, a sample of those, loads
without console errors; equations render; each sampled vector URL, and the URL `attnspec
cite` prints, shows its vector, and its download is the record with its hash.

tox -e site builds the site first and names it in ATTNSPEC_SITE_DIR; without it the site is
built here. Needs attnspec[site]: the site environment requires it (ATTNSPEC_REQUIRE)."""

import functools
import json
import os
import random
import subprocess
import sys
import threading
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from attnspec.spec.vectors import content_hash, default_spec

webdriver = pytest.importorskip("selenium.webdriver")
pytest.importorskip("mkdocs")
from selenium.webdriver.common.by import By  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SAMPLE = 40  # vector pages loaded, beside one of each kind (value, error, gradient, stress)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if os.environ.get("ATTNSPEC_SITE_DIR"):
        return Path(os.environ["ATTNSPEC_SITE_DIR"])
    out = tmp_path_factory.mktemp("site") / "site"
    subprocess.run([sys.executable, "-m", "attnspec.conformance.site", "--config",
                    str(ROOT / "docs" / "site" / "mkdocs.yml"), "--out", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def server(site):
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"no {' or '.join(missing)}: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def load(browser, url: str):
    """Open ``url``; fails on a console error (a missing file, a script error)."""
    browser.get(url)
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{url}: console errors {errors}"
    assert "404 - Not found" not in browser.title, f"{url}: not found"


def pages(site: Path) -> list[str]:
    """Every page of the site but the vector pages."""
    version = default_spec().version
    return sorted(str(p.parent.relative_to(site)) for p in site.rglob("index.html")
                  if not p.relative_to(site).parts[0] == version)


def sampled_vectors() -> list:
    spec = default_spec()
    kinds = [next(v for v in spec.vectors if test(v)) for test in (
        lambda v: v.expect == "value" and "weights" in v.outputs, lambda v: v.expect == "error",
        lambda v: v.expect == "gradient", lambda v: v.file.startswith("stress"))]
    return kinds + random.Random(0).sample(spec.vectors, SAMPLE)


def test_every_page_loads_and_its_equations_render(site, server, browser):
    listed = pages(site)
    components = {p.stem for p in (ROOT / "spec" / "components").glob("*.md")}
    assert {f"components/{c}" for c in components} <= set(listed)
    rendered = 0
    for page in listed:
        load(browser, f"{server}/{'' if page == '.' else page + '/'}")
        raw = browser.execute_script("return document.querySelector('article').innerText.includes('$$')")
        assert not raw, f"{page}: raw $$ left"
        bad = [e.get_attribute("title") for e in browser.find_elements(By.CSS_SELECTOR, ".katex-error")]
        assert not bad, f"{page}: KaTeX errors {bad}"
        unrendered = browser.find_elements(By.CSS_SELECTOR, ".arithmatex:not(:has(.katex))")
        assert not unrendered, f"{page}: {len(unrendered)} equations not rendered"
        rendered += len(browser.find_elements(By.CSS_SELECTOR, ".arithmatex .katex"))
    assert rendered > 100  # the component pages are full of equations


def shows_vector(browser, url: str, v) -> None:
    load(browser, url)
    box = browser.find_element(By.CSS_SELECTOR, ".attnspec-vector")
    assert (box.get_attribute("data-id"), box.get_attribute("data-sha256")) == (v.id, v.sha256)
    assert browser.find_element(By.TAG_NAME, "h1").text.strip() == v.id
    link = box.find_element(By.CSS_SELECTOR, "a[href$='.json']").get_attribute("href")
    with urllib.request.urlopen(link) as r:
        record = json.loads(r.read())
    assert record["id"] == v.id and record["sha256"] == v.sha256
    if not v.file.startswith("stress"):  # a stress record is its recipes: its arrays are regenerated
        assert content_hash(record) == v.sha256


def test_each_sampled_vector_url_shows_its_vector(server, browser):
    version = default_spec().version
    for v in sampled_vectors():
        shows_vector(browser, f"{server}/{version}/vectors/{v.id}/", v)
        stress = v.file.startswith("stress")  # its page shows shapes and hashes, no arrays
        if v.expect == "value" and not stress and np.size(v.outputs.get("weights", ())):
            img = browser.find_element(By.CSS_SELECTOR, "img[src$='weights.svg']")
            assert browser.execute_script("return arguments[0].naturalWidth", img) > 0


def test_cite_urls_resolve_on_the_built_site(server, browser):
    for v in sampled_vectors()[:8]:
        out = subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "cite", v.id,
                              "--base-url", server], capture_output=True, text=True, check=True).stdout
        shows_vector(browser, out.splitlines()[1], v)


def test_a_missing_config_is_one_clear_error(tmp_path):
    p = subprocess.run([sys.executable, "-m", "attnspec.conformance.site", "--config",
                        str(tmp_path / "nope.yml"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "nope.yml: no such file" in p.stderr
