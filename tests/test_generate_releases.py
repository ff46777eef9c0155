"""The generator against release records: released vectors never change in place,
derived tolerances become revisions that supersede, new vectors leave the others'
citations alone, and every flag and id is checked. Uses the softmax component
(fast to build) with its case module patched in this process (jobs=1)."""

import json
import shutil

import numpy as np
import pytest
from attnspec.spec import citing, generate
from attnspec.spec.cases import _build
from attnspec.spec.cases import softmax as softmax_cases
from attnspec.spec.generate import GenerationError, build_component
from attnspec.spec.vectors import VECTORS_DIR, content_hash, default_spec, load

RELEASED = citing.frozen_vectors()  # every vector of 1.0.0 (and of any later frozen release)


def _frozen(component, records=None):
    """The component's released vectors that its case module builds (the stress family's
    are built and checked by spec/stress/build.py, as `generate` does)."""
    records = RELEASED if records is None else records
    return {k: e for k, e in records.items() if k.split("/")[0] == component and "/stress-" not in k}


def _patched(monkeypatch, edit):
    """Replace softmax's cases by ``edit(list of its cases)``."""
    original = softmax_cases.cases
    monkeypatch.setattr(softmax_cases, "cases", lambda rng: edit(list(original(rng))))


def _extra_case():
    return _build.value("softmax/extra-001", "softmax", "An extra case added after a release.",
                        inputs={"x": np.array([[0.5, -0.25, 1.0]])}, flags=["basic"])


def _by_id(vectors):
    return {v["id"]: v for v in vectors}


def test_the_released_softmax_regenerates_unchanged():
    _, _, entries = build_component("softmax", _frozen("softmax"))
    built = {e["id"]: e["sha256"] for e in entries}  # released vectors, and any added since
    for vid, record in _frozen("softmax").items():
        assert built.get(vid) == record["sha256"], vid


def test_adding_a_vector_keeps_every_other_citation(tmp_path, monkeypatch):
    d = tmp_path / "vectors"
    shutil.copytree(VECTORS_DIR, d)
    _patched(monkeypatch, lambda cases: cases + [_extra_case()])
    changed = generate.generate(d, jobs=1, only=["softmax"], releases_dir=tmp_path / "rel",
                                tolerances=None)
    assert "softmax.json" in changed
    grown, before = load(d), default_spec()
    old = [v for v in before.vectors if v.component == "softmax"]
    for v in old:
        assert grown.vector(v.id).citation() == v.citation()
    assert grown.vector("softmax/extra-001").sha256
    assert grown.component_hash("softmax") != before.component_hash("softmax")
    # the old citations, 1.0.0 ones included, still verify against the grown vectors
    for v in old:
        ok, line = citing.verify(v.citation(), grown)
        assert ok and "unchanged" in line, line
    file_sha = citing.read_records()["1.0.0"]["files"]["softmax.json"]
    for line in (f"attnspec 1.0.0 · softmax · sha256:{file_sha[:12]}",
                 f"attnspec 1.0.0 · softmax/basic-001 · sha256:{file_sha[:12]}"):
        ok, said = citing.verify(line, grown)
        assert ok, said
    in_1_0 = [k for k, e in _frozen("softmax").items() if e["released"] == "1.0.0"]
    added = len(old) + 1 - len(in_1_0)  # the extra case and any added since 1.0.0
    assert f"{added} vector(s) added" in citing.verify(
        f"attnspec 1.0.0 · softmax · sha256:{file_sha[:12]}", grown)[1]


def test_an_editorial_change_keeps_the_hash(monkeypatch):
    def edit(cases):
        cases[0].description += " Reworded."
        cases[0].flags = ["basic", "batch"]
        return cases

    _patched(monkeypatch, edit)
    _, _, entries = build_component("softmax", _frozen("softmax"))
    assert _by_id(entries)["softmax/basic-001"]["sha256"] == RELEASED["softmax/basic-001"]["sha256"]


def test_a_released_vector_changed_in_place_is_refused_naming_it(monkeypatch):
    def edit(cases):
        cases[1].inputs["x"] = cases[1].inputs["x"] * 2
        return cases

    _patched(monkeypatch, edit)
    with pytest.raises(GenerationError, match="softmax/axis-001: its content would change"):
        build_component("softmax", _frozen("softmax"))


def test_a_released_vector_left_out_is_refused(monkeypatch):
    _patched(monkeypatch, lambda cases: cases[1:])
    with pytest.raises(GenerationError, match="softmax/basic-001: released in attnspec 1.0.0"):
        build_component("softmax", _frozen("softmax"))


def test_a_released_tolerance_is_frozen_even_if_the_component_default_moves(monkeypatch):
    loose = {d: {"rtol": 0.5, "atol": 0.5} for d in ("float64", "float32", "float16", "bfloat16")}
    monkeypatch.setattr(softmax_cases.COMPONENT, "tolerances", loose)
    _patched(monkeypatch, lambda cases: cases + [_extra_case()])
    _, text, entries = build_component("softmax", _frozen("softmax"))
    got = _by_id(entries)
    assert got["softmax/basic-001"]["tolerances"]["float16"] == {"rtol": 0.01, "atol": 0.002}
    assert got["softmax/extra-001"]["tolerances"]["float16"] == {"rtol": 0.5, "atol": 0.5}
    assert json.loads(text)["tolerances"]["float16"] == {"rtol": 0.5, "atol": 0.5}


def _derived(tmp_path, table):
    path = tmp_path / "tolerances.json"
    path.write_text(json.dumps(table))
    return generate.read_derived(path)


def test_a_derived_tolerance_supersedes_a_released_vector(tmp_path):
    derived = _derived(tmp_path, {
        "softmax/basic-001": {"float16": {"rtol": 0.03, "atol": 0.002}},
        "softmax/axis-001": {"float16": {"rtol": 0.01, "atol": 0.002}},  # the same as released
        "_default": {"softmax": {"bfloat16": {"rtol": 0.08, "atol": 0.02}}},
    })
    _, text, _ = build_component("softmax", _frozen("softmax"), derived)
    doc = json.loads(text)
    vs = _by_id(doc["vectors"])
    old, new = vs["softmax/basic-001"], vs["softmax/basic-001r2"]
    assert old["sha256"] == content_hash(old) == RELEASED["softmax/basic-001"]["sha256"]
    assert old["deprecated"] is True and old["superseded_by"] == "softmax/basic-001r2"
    assert new["supersedes"] == "softmax/basic-001" and "deprecated" not in new
    assert new["tolerances"]["float16"] == {"rtol": 0.03, "atol": 0.002}
    assert new["tolerances"]["float32"] == old["tolerances"]["float32"]
    assert new["inputs"] == old["inputs"] and new["outputs"] == old["outputs"]
    assert "softmax/axis-001r2" not in vs and "deprecated" not in vs["softmax/axis-001"]
    # _default moves the file's default (for new vectors), not a released vector
    assert doc["tolerances"]["bfloat16"] == {"rtol": 0.08, "atol": 0.02}
    assert vs["softmax/axis-001"]["tolerances"]["bfloat16"] == {"rtol": 0.04, "atol": 0.01}


def _write_spec(tmp_path, derived, frozen_dir=citing.RELEASES_DIR):
    d = tmp_path / "vectors"
    if not d.exists():
        shutil.copytree(VECTORS_DIR, d)
    table = tmp_path / "tolerances.json"
    table.write_text(json.dumps(derived))
    generate.generate(d, jobs=1, only=["softmax"], releases_dir=tmp_path / "rel",
                      frozen_dir=frozen_dir, tolerances=table)
    return load(d)


def test_a_superseded_citation_says_by_what_and_why(tmp_path):
    spec = _write_spec(tmp_path, {"softmax/basic-001": {"float16": {"rtol": 0.03, "atol": 0.002}}})
    v = spec.vector("softmax/basic-001")
    assert v.deprecated and v.superseded_by == "softmax/basic-001r2"
    ok, line = citing.verify(v.citation(), spec)
    assert ok and "superseded" in line and "softmax/basic-001r2" in line, line
    assert "float16 rtol 0.01 -> 0.03" in line
    # a vector new in this version is valid once the record written beside it says so
    ok, line = citing.verify(spec.vector("softmax/basic-001r2").citation(), spec, tmp_path / "rel")
    assert ok and "unchanged" in line, line


def test_a_supersede_chain_over_two_releases(tmp_path):
    """1.0.0 has basic-001; a later release added basic-001r2 (float16 rtol 0.03); now the
    derived tolerance moves again: r2 is kept unchanged and superseded by r3."""
    first = _write_spec(tmp_path, {"softmax/basic-001": {"float16": {"rtol": 0.03, "atol": 0.002}}})
    frozen_dir = tmp_path / "frozen"
    shutil.copytree(citing.RELEASES_DIR, frozen_dir)
    record = citing.record_of_spec(first)
    record["spec_version"] = "1.0.5"
    (frozen_dir / "1.0.5.json").write_text(citing.dump_record(record))
    (frozen_dir / "1.1.0.json").unlink(missing_ok=True)
    r2_citation = first.vector("softmax/basic-001r2").citation("1.0.5")

    spec = _write_spec(tmp_path, {"softmax/basic-001": {"float16": {"rtol": 0.05, "atol": 0.002}}},
                       frozen_dir)
    r2, r3 = spec.vector("softmax/basic-001r2"), spec.vector("softmax/basic-001r3")
    assert r2.sha256 == first.vector("softmax/basic-001r2").sha256
    assert r2.deprecated and r2.superseded_by == r3.id and r3.supersedes == r2.id
    assert r3.tolerances["float16"]["rtol"] == 0.05
    file_sha = citing.read_records()["1.0.0"]["files"]["softmax.json"]
    ok, line = citing.verify(f"attnspec 1.0.0 · softmax/basic-001 · sha256:{file_sha[:12]}", spec)
    assert ok and "softmax/basic-001r2" in line and "then softmax/basic-001r3" in line, line
    ok, line = citing.verify(r2_citation, spec, frozen_dir)
    assert ok and "superseded" in line and "softmax/basic-001r3" in line, line


def test_a_hand_written_correction_supersedes(monkeypatch):
    def edit(cases):
        fixed = _build.value("softmax/basic-001r2", "softmax", "basic-001 with a corrected input.",
                             inputs={"x": cases[0].inputs["x"] + 0.5}, flags=["basic"],
                             supersedes="softmax/basic-001")
        return cases[:1] + [fixed] + cases[1:]

    _patched(monkeypatch, edit)
    _, text, _ = build_component("softmax", _frozen("softmax"))
    vs = _by_id(json.loads(text)["vectors"])
    assert vs["softmax/basic-001"]["superseded_by"] == "softmax/basic-001r2"
    assert vs["softmax/basic-001"]["sha256"] == RELEASED["softmax/basic-001"]["sha256"]


def test_a_revision_must_supersede_its_predecessor(monkeypatch):
    _patched(monkeypatch, lambda cases: cases + [_build.value(
        "softmax/basic-001r2", "softmax", "A revision that says nothing of what it revises.",
        inputs={"x": np.array([1.0, 2.0])}, flags=["basic"])])
    with pytest.raises(GenerationError, match="softmax/basic-001r2: a revision supersedes"):
        build_component("softmax", _frozen("softmax"))


def test_an_unknown_flag_is_refused_naming_the_vector(monkeypatch):
    def edit(cases):
        cases[2].flags = ["overflow", "no-such-flag"]
        return cases

    _patched(monkeypatch, edit)
    with pytest.raises(GenerationError, match=r"softmax/large-001: unknown flag\(s\) \['no-such-flag'\]"):
        build_component("softmax", _frozen("softmax"))


@pytest.mark.parametrize("vid,ok", [
    ("mha/padding-001", True), ("mha/padding-001r2", True), ("mha/padding-001r13", True),
    ("mha/padding-001r", False), ("mha/padding-01", False), ("mha/padding-001-r2", False),
    ("mha/padding-002R2", False), ("MHA/padding-001", False)])
def test_the_id_pattern(vid, ok):
    assert bool(generate.ID_RE.match(vid)) is ok


def test_generation_works_without_a_tolerances_file(tmp_path):
    assert generate.read_derived(tmp_path / "absent.json") == {}
    _, _, entries = build_component("softmax", _frozen("softmax"), {})
    assert len(entries) == len([v for v in default_spec().vectors if v.component == "softmax"
                                and "stress" not in v.flags])  # spec/stress/ builds those


def test_a_stale_derived_tolerance_is_refused():
    with pytest.raises(GenerationError, match="softmax/gone-001"):
        generate._check_derived({"softmax/gone-001": {}}, [{"id": "softmax/basic-001"}], ["softmax"])
    with pytest.raises(GenerationError, match="_default.nosuch"):
        generate._check_derived({"_default": {"nosuch": {}}}, [], ["softmax"])
    generate._check_derived({"softmax/basic-001": {}, "_default": {"softmax": {}}},
                            [{"id": "softmax/basic-001"}], ["softmax"])
