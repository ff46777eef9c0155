"""Hostile inputs (issue 20, items 3-5): vector folders, release records, citations,
export, show --plot and the JAX backend's options. Each fault is one clear line and a
non-zero exit (2 for a fault in the input), naming the path or argument; never a
traceback, a hang, a memory blow-up, or a forged line on stdout.

Command-line tests run ``attnspec`` in a subprocess, as a user does.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from attnspec.spec import citing
from attnspec.spec.errors import VectorFileError
from attnspec.spec.vectors import MANIFEST, VECTORS_DIR, content_hash, default_spec

from .test_cli_faults import one_error_line

CLI = [sys.executable, "-m", "attnspec.conformance.cli"]


def attnspec(*args, cwd=None, timeout=60):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


# -- vector folders ----------------------------------------------------------------------


def _write(d: Path, name: str, text: str) -> None:
    """Write a file and list its hash in the manifest, as a forger would."""
    (d / name).write_text(text)
    manifest = json.loads((d / MANIFEST).read_text())
    manifest["files"][name] = hashlib.sha256(text.encode()).hexdigest()
    (d / MANIFEST).write_text(json.dumps(manifest))


def _rewrite(d: Path, name: str, edit, rehash: bool = True) -> None:
    """Edit a file's JSON, re-hash its vectors and the manifest: only the content is hostile."""
    doc = json.loads((d / name).read_text())
    edit(doc)
    if rehash:
        for v in doc["vectors"]:
            v["sha256"] = content_hash(v)
    _write(d, name, json.dumps(doc))


def _first(doc):
    return doc["vectors"][0]


def _list(d: Path):
    return attnspec("list", "--vectors-dir", str(d))


def test_a_depth_bomb_is_refused(vectors):
    _write(vectors, "softmax.json", "[" * 200_000 + "]" * 200_000)
    line = one_error_line(_list(vectors), "list")
    assert "softmax.json" in line and "nested too deeply" in line


def test_a_number_out_of_range_is_refused(vectors):
    doc = json.loads((vectors / "softmax.json").read_text())
    _first(doc)["inputs"]["x"]["data"][0] = "BIG"
    _write(vectors, "softmax.json", json.dumps(doc).replace('"BIG"', "1e400"))
    line = one_error_line(_list(vectors), "list")
    assert "softmax.json" in line and "softmax/basic-001" in line and "1e400" in line


def test_a_nan_literal_is_refused(vectors):
    doc = json.loads((vectors / "softmax.json").read_text())
    _first(doc)["inputs"]["x"]["data"][0] = "NAN"
    _write(vectors, "softmax.json", json.dumps(doc).replace('"NAN"', "NaN"))
    line = one_error_line(_list(vectors), "list")
    assert "softmax.json" in line and "NaN is not JSON" in line


def test_a_nan_tolerance_is_refused(vectors):
    _rewrite(vectors, "softmax.json", lambda doc: _first(doc)["tolerances"]["float32"].update(rtol="nan"))
    line = one_error_line(_list(vectors), "list")
    assert "softmax/basic-001" in line and "tolerances.float32.rtol" in line


def test_an_int64_overflow_is_refused(vectors):
    def edit(doc):
        v = next(v for v in doc["vectors"] if v["id"] == "masks/padding-001")
        v["inputs"]["ids"]["data"][0] = 2**70

    _rewrite(vectors, "masks.json", edit)
    line = one_error_line(_list(vectors), "list")
    assert "masks/padding-001" in line and "inputs.ids" in line


def test_a_link_to_dev_zero_is_not_read(vectors):
    (vectors / "masks.json").unlink()
    (vectors / "masks.json").symlink_to("/dev/zero")
    line = one_error_line(attnspec("list", "--vectors-dir", str(vectors), timeout=30), "list")
    assert str(vectors / "masks.json") in line and "not a regular file" in line


def test_a_fifo_manifest_does_not_hang(vectors):
    (vectors / MANIFEST).unlink()
    os.mkfifo(vectors / MANIFEST)
    line = one_error_line(attnspec("list", "--vectors-dir", str(vectors), timeout=30), "list")
    assert str(vectors / MANIFEST) in line and "not a regular file" in line


def test_a_duplicate_id_in_one_file_is_refused(vectors):
    _rewrite(vectors, "softmax.json", lambda doc: doc["vectors"].append(dict(_first(doc))))
    line = one_error_line(_list(vectors), "list")
    assert "duplicate vector id softmax/basic-001" in line and line.count("softmax.json") == 2


def test_a_component_in_two_files_is_refused_naming_both(vectors):
    _write(vectors, "softmax_copy.json", (vectors / "softmax.json").read_text())
    line = one_error_line(_list(vectors), "list")
    assert "softmax.json" in line and "softmax_copy.json" in line


@pytest.mark.parametrize("field,value", [
    ("id", "softmax/../../etc-001"),
    ("id", "softmax/basic-001\nsdpa/forged-001                               value"),
    ("superseded_by", "softmax/x\n-001"),
    ("error", "ShapeError\nsdpa/forged-001"),
])
def test_an_id_or_error_off_the_schema_is_refused_and_never_listed(vectors, field, value):
    _rewrite(vectors, "softmax.json", lambda doc: _first(doc).update({field: value}))
    p = _list(vectors)
    line = one_error_line(p, "list")
    assert f"field '{field}'" in line and "softmax.json" in line
    assert p.stdout == ""


def test_the_loader_stays_fast_on_the_package_vectors():
    """Not a timing test: the checks run on every vector the suite loads, so this only
    guards against a check that reads files twice or parses the schema per vector."""
    from attnspec.spec import vectors

    vectors.schema_rules.cache_clear()
    vectors.load(VECTORS_DIR)
    assert vectors.schema_rules.cache_info().misses == 1


# -- release records ---------------------------------------------------------------------


@pytest.fixture
def records(tmp_path) -> Path:
    d = tmp_path / "releases"
    shutil.copytree(citing.RELEASES_DIR, d)
    return d


LINE_1_0_0 = "attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:78ec253a0fae"


@pytest.mark.parametrize("text,says", [
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    (json.dumps({"spec_version": "1.0.0", "cites": "file", "files": {"a.json": "0" * 64},
                 "vectors": {"sdpa/a-001": {"file": "a.json", "sha256": "0" * 64, "deprecated": False,
                                            "tolerances": {"float64": {"rtol": "BIG", "atol": 0}}}}}
                ).replace('"BIG"', "1e400"), "out of range"),
    ('{"spec_version": "1.0.0", "cites": "file", "files": {"a.json": NaN}, "vectors": {}}',
     "NaN is not JSON"),
    ('{"spec_version": "1.0.0", "cites": "file", "files": {}}', "field 'vectors'"),
    ('{"spec_version": "1.0.0", "cites": "file", "files": {"a.json": 1}, "vectors": {}}',
     "files.a.json"),
    ('{"spec_version": "1.0.0", "cites": "file", "files": {}, "vectors": {"../x\\ny": {}}}',
     "id pattern"),
    ("\x00\xff garbage", "not valid JSON"),
])
def test_a_hostile_record_is_one_clear_fault(records, text, says):
    (records / "1.0.0.json").write_text(text, encoding="latin-1")
    with pytest.raises(VectorFileError, match="1.0.0.json") as info:
        citing.read_records(records)
    assert says is None or says in str(info.value)
    ok, said = citing.verify(LINE_1_0_0, default_spec(), records)
    assert not ok and said.startswith("invalid: ") and "1.0.0.json" in said, said


def test_a_garbage_future_record_is_refused_naming_it(records):
    (records / "9.9.9.json").write_bytes(b"\x89PNG garbage")
    with pytest.raises(VectorFileError, match="9.9.9.json"):
        citing.frozen_vectors(records)
    ok, said = citing.verify("attnspec 9.9.9 · sdpa/basic-001 · sha256:000000000000", default_spec(),
                             records)
    assert not ok and "9.9.9.json" in said, said


def test_the_shipped_records_match_the_hashes_in_code():
    assert set(citing.shipped_hashes()) == {p.stem for p in citing.RELEASES_DIR.glob("*.*.*.json")}
    for version, sha in citing.shipped_hashes().items():
        assert hashlib.sha256((citing.RELEASES_DIR / f"{version}.json").read_bytes()).hexdigest() == sha
    record = (citing.RELEASES_DIR / f"{default_spec().version}.json").read_bytes()
    assert citing.hashes_with(default_spec().version, record) == citing.HASHES_MODULE.read_text()


# -- citations ---------------------------------------------------------------------------


def test_an_edited_shipped_record_is_detected(records):
    """A forger edits 1.0.0.json to make a forged line verify: refused by the hashes in code."""
    forged = "attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:111111111111"
    text = (records / "1.0.0.json").read_text()
    real = citing.read_records(records)["1.0.0"]["files"]["sdpa.json"]
    (records / "1.0.0.json").write_text(text.replace(real, "1" * 64))
    assert citing.verify(forged, default_spec(), records)[0]  # an unchecked folder trusts it
    ok, said = citing.verify(forged, default_spec(), records, trusted=citing.shipped_hashes())
    assert not ok and "1.0.0.json" in said and "not the one attnspec shipped" in said, said
    ok, said = citing.verify(LINE_1_0_0, default_spec())
    assert ok and "shipped release record 1.0.0.json" in said, said


def test_a_forged_vector_folder_cannot_make_a_citation_valid(vectors):
    """The forger adds a vector and changes another, recomputing every hash: the loaded
    vectors are consistent, but the shipped 1.1.0 record knows neither."""
    def edit(doc):
        new = dict(_first(doc), id="softmax/forged-001")
        doc["vectors"].append(new)
        _first(doc)["tolerances"]["float16"]["rtol"] = 0.5

    _rewrite(vectors, "softmax.json", edit)
    doc = json.loads((vectors / "softmax.json").read_text())
    version = default_spec().version
    for v in (_first(doc), doc["vectors"][-1]):
        line = f"attnspec {version} · {v['id']} · sha256:{v['sha256'][:12]}"
        p = attnspec("cite", "--verify", line, "--vectors-dir", str(vectors))
        said = one_error_line(p, "cite", code=1)
        assert said.startswith("invalid: ") and f"release record {version}.json" in said, said


def test_cite_id_verify_checks_the_lines_id():
    p = attnspec("cite", "sdpa/basic-001", "--verify", LINE_1_0_0)
    said = one_error_line(p, "cite", code=1)
    assert "sdpa/fully-masked-001" in said and "sdpa/basic-001" in said
    ok = attnspec("cite", "sdpa/fully-masked-001", "--verify", LINE_1_0_0)
    assert ok.returncode == 0 and ok.stdout.startswith("valid: "), ok.stderr


def test_cite_of_a_deprecated_vector_names_its_successor():
    v = next(v for v in default_spec().vectors if v.deprecated and v.superseded_by)
    p = attnspec("cite", v.id)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines[0] == v.citation(), p.stdout + p.stderr
    assert len(lines) == 2 and lines[1].endswith(f"/vectors/{v.id}/"), lines  # its page on the site
    assert v.superseded_by in p.stderr and "deprecated" in p.stderr


def test_a_hash_of_the_wrong_length_says_so():
    sha = "78ec253a0fae" * 5 + "aaaaaa"  # 66 hex digits
    p = attnspec("cite", "--verify", f"attnspec 1.0.0 · sdpa/fully-masked-001 · sha256:{sha}")
    said = one_error_line(p, "cite", code=1)
    assert "66 hex digits" in said and "64" in said, said


# -- export and show --plot --------------------------------------------------------------


def test_export_refuses_a_format_its_file_name_contradicts(tmp_path):
    line = one_error_line(attnspec("export", "sdpa/basic-001", "--format", "json", "--out",
                                   str(tmp_path / "x.npz")), "export")
    assert "--out" in line and "x.npz" in line and ".json" in line
    assert not (tmp_path / "x.npz").exists()


def test_export_takes_the_format_from_the_file_name(tmp_path):
    p = attnspec("export", "sdpa/basic-001", "--out", str(tmp_path / "x.json"))
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "x.json").read_text())["vector"]["id"] == "sdpa/basic-001"


def test_show_plot_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "existing.png"
    out.write_bytes(b"precious")
    line = one_error_line(attnspec("show", "sdpa/basic-001", "--plot", str(out)), "show")
    assert str(out) in line and "--force" in line
    assert out.read_bytes() == b"precious"


def test_show_plot_with_an_unknown_extension_names_the_supported_ones(tmp_path):
    out = tmp_path / "x.jpgz"
    line = one_error_line(attnspec("show", "sdpa/basic-001", "--plot", str(out)), "show")
    assert str(out) in line and ".png" in line and ".svg" in line
    assert not out.exists()
