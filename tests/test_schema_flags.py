"""The flag registry: every flag used is described once (meaning, bug type, bug), FLAGS.md
and the schema's enumeration follow it, and the schema refuses what the format forbids."""

import copy
import hashlib
import json

import pytest
from attnspec.spec import SPEC_VERSION, schema
from attnspec.spec.vectors import VECTORS_DIR, default_spec

jsonschema = pytest.importorskip("jsonschema", reason="the schema checks need attnspec[oracle]")


def test_flags_md_and_the_schema_enum_follow_the_registry():
    assert schema.flag_problems() == []


def test_every_flag_in_use_is_registered_and_every_registered_flag_is_used():
    used = {f for v in default_spec().vectors for f in v.flags}
    registered = set(schema.registry()["flags"])
    assert used - registered == set()
    assert registered - used == set()


def test_every_flag_is_described():
    reg = schema.registry()
    for name, f in reg["flags"].items():
        assert f["bug_type"] in reg["bug_types"], name
        assert len(f["meaning"]) > 10 and len(f["bug"]) > 5, name
        assert f"| `{name}` |" in schema.FLAGS_MD.read_text()


def test_a_registry_change_is_noticed(monkeypatch):
    reg = schema.registry()
    reg["flags"]["brand-new"] = {"bug_type": "edge-case", "meaning": "Something new and odd.",
                                 "bug": "A bug."}
    monkeypatch.setattr(schema, "registry", lambda: reg)
    found = schema.flag_problems()
    assert any("FLAGS.md" in p for p in found) and any("flag enum" in p for p in found)


def _validator():
    return jsonschema.Draft202012Validator(json.loads(schema.SCHEMA.read_text()))


@pytest.fixture(scope="module")
def mha_doc():
    return json.loads((VECTORS_DIR / "mha.json").read_text())


def test_the_vector_files_are_valid():
    assert schema.problems() == []


@pytest.mark.parametrize("bad", ["1.0", None, [1.0], {"x": 1}, "NaN"])
def test_a_tensor_element_that_is_not_a_number_is_named(tmp_path, bad):
    """The elements are checked apart from the schema (for speed): still every one."""
    doc = json.loads((VECTORS_DIR / "softmax.json").read_text())
    live = _live(doc)
    live["inputs"]["x"]["data"][-1] = bad
    text = json.dumps(doc)
    (tmp_path / "softmax.json").write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    (tmp_path / "MANIFEST.json").write_text(json.dumps(
        {"spec_version": SPEC_VERSION, "files": {"softmax.json": sha}}))
    last = len(live["inputs"]["x"]["data"]) - 1
    found = schema.problems(tmp_path)
    assert [p for p in found if f"inputs/x/data/{last}: {bad!r} is not a number" in p], found


@pytest.mark.parametrize("edit,where", [
    (lambda v: v["flags"].append("no-such-flag"), "flags"),
    (lambda v: v.__setitem__("id", "mha/padding-001-r2"), "id"),
    (lambda v: v.__setitem__("supersedes", "mha/padding"), "supersedes"),
    (lambda v: v.pop("sha256"), "sha256"),
    (lambda v: v.pop("tolerances"), "tolerances"),
    (lambda v: v.__setitem__("superseded_by", "mha/padding-001r2"), "deprecated"),
])
def test_the_schema_refuses(mha_doc, edit, where):
    doc = copy.deepcopy(mha_doc)
    vector = _live(doc)
    edit(vector)
    doc["vectors"] = [vector]  # that vector alone: its file's other vectors are valid
    errors = list(_validator().iter_errors(doc))
    assert errors, where
    assert any(where in (e.message + "/".join(map(str, e.absolute_path))) for e in errors), \
        [e.message[:100] for e in errors]


def _live(doc: dict) -> dict:
    """The first vector neither superseded nor a revision (editing a deprecated one proves
    nothing, and a revision's id cannot take another r2)."""
    return next(v for v in doc["vectors"] if not v.get("deprecated") and "supersedes" not in v)


def test_the_schema_accepts_a_revision(mha_doc):
    doc = copy.deepcopy(mha_doc)
    old = _live(doc)
    new = copy.deepcopy(old)
    new.update(id=old["id"] + "r2", supersedes=old["id"])
    old.update(deprecated=True, superseded_by=new["id"])
    doc["vectors"].append(new)
    assert list(_validator().iter_errors(doc)) == []
