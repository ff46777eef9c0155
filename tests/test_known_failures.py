"""Known-failure files: a matching failure is reported as known (exit 0), a stale
pattern is itself a failure, and without the file the same failure fails."""

import hashlib
import json
import shutil

from attnspec.spec.vectors import MANIFEST, VECTORS_DIR, content_hash

from .test_cli import attnspec


def _vectors_with_a_wrong_expectation(tmp_path):
    """A copy of the vectors where softmax/basic-001 expects a wrong value, re-hashed (the
    vector and its file), so the correct NumPy backend fails exactly that vector."""
    d = tmp_path / "vectors"
    shutil.copytree(VECTORS_DIR, d)
    doc = json.loads((d / "softmax.json").read_text())
    vec = next(v for v in doc["vectors"] if v["id"] == "softmax/basic-001")
    vec["outputs"]["y"]["data"][0] += 0.125
    vec["sha256"] = content_hash(vec)
    (d / "softmax.json").write_text(json.dumps(doc))
    manifest = json.loads((d / MANIFEST).read_text())
    manifest["files"]["softmax.json"] = hashlib.sha256((d / "softmax.json").read_bytes()).hexdigest()
    (d / MANIFEST).write_text(json.dumps(manifest))
    return d


def _verify(tmp_path, vectors, known_text=None):
    args = ["verify", "-k", "softmax or completeness", "--vectors-dir", str(vectors),
            "--json", str(tmp_path / "r.json")]
    if known_text is not None:
        known = tmp_path / "known.txt"
        known.write_text(known_text)
        args += ["--known-failures", str(known)]
    p = attnspec(*args)
    return p, json.loads((tmp_path / "r.json").read_text())


def test_an_unlisted_failure_fails(tmp_path):
    p, doc = _verify(tmp_path, _vectors_with_a_wrong_expectation(tmp_path))
    assert p.returncode != 0
    assert {r["status"] for r in doc["results"] if r["id"] == "softmax/basic-001"} == {"fail"}


def test_a_listed_failure_is_known_not_passed(tmp_path):
    p, doc = _verify(tmp_path, _vectors_with_a_wrong_expectation(tmp_path),
                     "softmax/basic-001[float*]   # a planted wrong expectation\n")
    assert p.returncode == 0, p.stdout[-2000:]
    rows = [r for r in doc["results"] if r["id"] == "softmax/basic-001"]
    assert rows and all(r["status"] == "fail" and r["known_failure"] for r in rows)
    assert "known" in p.stdout


def test_a_pattern_that_matches_no_vector_is_reported(tmp_path):
    p, _ = _verify(tmp_path, VECTORS_DIR, "softmax/no-such-case-*   # stale\n")
    assert p.returncode != 0
    assert "softmax/no-such-case-*" in p.stdout + p.stderr
