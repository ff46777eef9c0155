"""Citations keep verifying: every 1.0.0 citation (file hashes, recomputed here from the
1.0.0 files in git), every current one (vector hashes), and nothing made up."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from attnspec.spec import SPEC_VERSION, citing
from attnspec.spec.vectors import content_hash, default_spec

from .test_cli import attnspec

ROOT = Path(__file__).parents[1]
COMMIT_1_0_0 = "34a53d9"  # the 1.0.0 release


def _git_show(path: str) -> bytes:
    p = subprocess.run(["git", "show", f"{COMMIT_1_0_0}:{path}"], cwd=ROOT, capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"the 1.0.0 commit {COMMIT_1_0_0} is not in this checkout (a shallow clone?): "
                    f"{p.stderr.decode().strip()[:200]}")
    return p.stdout


@pytest.fixture(scope="module")
def release_1_0_0():
    """{file name: (bytes, parsed)} of the 1.0.0 vector files, from git."""
    manifest = json.loads(_git_show("spec/vectors/MANIFEST.json"))
    assert manifest["spec_version"] == "1.0.0"
    return {name: _git_show(f"spec/vectors/{name}") for name in manifest["files"]}


def test_every_1_0_0_vector_citation_verifies(release_1_0_0):
    spec = default_spec()
    n = 0
    for name, data in release_1_0_0.items():
        sha = hashlib.sha256(data).hexdigest()
        for v in json.loads(data)["vectors"]:
            ok, line = citing.verify(f"attnspec 1.0.0 · {v['id']} · sha256:{sha[:12]}", spec)
            assert ok, line
            assert "unchanged" in line or "superseded" in line, line
            n += 1
        comp = name.removesuffix(".json")
        ok, line = citing.verify(f"attnspec 1.0.0 · {comp} · sha256:{sha[:12]}", spec)
        assert ok, line
    assert n == 400


def test_1_0_0_vectors_keep_their_content(release_1_0_0):
    """The canonical content of every 1.0.0 vector (with the file-level tolerances it
    used) is the content of the vector under that id today."""
    spec = default_spec()
    for data in release_1_0_0.values():
        doc = json.loads(data)
        for v in doc["vectors"]:
            assert content_hash(v, doc["tolerances"]) == spec.vector(v["id"]).sha256, v["id"]


def test_the_1_0_0_record_matches_git(release_1_0_0):
    record = citing.read_records()["1.0.0"]
    assert record["cites"] == "file"
    assert record["files"] == {n: hashlib.sha256(b).hexdigest() for n, b in release_1_0_0.items()}
    ids = [v["id"] for data in release_1_0_0.values() for v in json.loads(data)["vectors"]]
    assert sorted(record["vectors"]) == sorted(ids)
    for name, data in release_1_0_0.items():
        doc = json.loads(data)
        for v in doc["vectors"]:
            entry = record["vectors"][v["id"]]
            assert entry["file"] == name and entry["tolerances"] == doc["tolerances"], v["id"]
            assert entry["sha256"] == content_hash(v, doc["tolerances"]), v["id"]


def test_the_citation_printed_in_the_1_0_0_docs_verifies():
    spec = default_spec()
    for line in ("attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:78ec253a0fae",
                 "attnspec 1.0.0 · sdpa · sha256:78ec253a0fae", "attnspec 1.0.0"):
        ok, said = citing.verify(line, spec)
        assert ok and said.startswith("valid: "), said


def test_every_current_citation_verifies():
    spec = default_spec()
    for v in spec.vectors:
        ok, line = citing.verify(v.citation(), spec)
        assert ok and f"attnspec {SPEC_VERSION}" in line, line
    for comp in spec.components:
        ok, line = citing.verify(citing.cite(spec, comp), spec)
        assert ok and "unchanged" in line, line


@pytest.mark.parametrize("line,why", [
    ("attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:000000000000", "has sha256:78ec253a0fae"),
    ("attnspec 1.0.0 · sdpa · sha256:78ec253a0fa1", "component sdpa has sha256:78ec253a0fae"),
    ("attnspec 1.0.0 · sdpa/no-such-case-001 · sha256:78ec253a0fae", "has no vector"),
    ("attnspec 1.0.0 · nosuch · sha256:78ec253a0fae", "has no component"),
    ("attnspec 0.9.0 · sdpa/fully-masked-001 · sha256:78ec253a0fae", "not a known release"),
    ("attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:78ec", "too short"),
    ("sdpa/fully-masked-001", "not a citation"),
])
def test_a_made_up_citation_is_invalid(line, why):
    ok, said = citing.verify(line, default_spec())
    assert not ok and said.startswith("invalid: ") and why in said, said


def test_a_current_citation_with_another_hash_is_invalid():
    v = default_spec().vector("mha/padding-001")
    bad = v.citation()[:-12] + ("0" if v.sha256[0] != "0" else "1") + v.sha256[1:12]
    ok, said = citing.verify(bad, default_spec())
    assert not ok and v.sha256[:12] in said, said


def test_a_1_0_0_file_hash_is_not_a_1_1_0_vector_hash():
    """Each release is checked by what its own citations pinned."""
    ok, said = citing.verify(f"attnspec {SPEC_VERSION} · sdpa/fully-masked-001 · sha256:78ec253a0fae",
                             default_spec())
    assert not ok, said


def test_the_current_record_is_the_loaded_spec():
    on_disk = citing.read_records()[SPEC_VERSION]
    assert on_disk == citing.record_of_spec(default_spec())
    assert on_disk["cites"] == "vector"


def test_cite_verify_on_the_command_line():
    good = attnspec("cite", "--verify", "attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:78ec253a0fae")
    assert good.returncode == 0 and good.stdout.startswith("valid: "), good.stdout + good.stderr
    bad = attnspec("cite", "--verify", "attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:111111111111")
    assert bad.returncode == 1 and bad.stderr.startswith("invalid: ")
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert "--verify" in attnspec("cite", "--help", check=True).stdout
    none = attnspec("cite")
    assert none.returncode == 2 and "--verify" in none.stderr


def test_citing_md_shows_real_output():
    """Every `attnspec cite --verify` example in CITING.md prints what the page says, and
    every other citation on the page verifies."""
    import re

    text = (ROOT / "spec" / "CITING.md").read_text()
    spec = default_spec()
    examples = re.findall(r'^\$ attnspec cite --verify "([^"]+)"\n(.+)$', text, re.M)
    assert len(examples) >= 3
    for line, shown in examples:
        assert citing.verify(line, spec)[1] == shown, f"CITING.md is stale for {line!r}"
    shown_lines = {line for line, _ in examples}
    for line in re.findall(r"attnspec \d+\.\d+\.\d+ · [a-z0-9_/-]+ · sha256:[0-9a-f]{12}", text):
        if line not in shown_lines:
            ok, said = citing.verify(line, spec)
            assert ok, f"CITING.md cites {line!r}, which does not verify ({said}): update the example"
