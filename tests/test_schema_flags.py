"""The flag registry: every flag used is described once (meaning, bug type, bug), FLAGS.md
and the schema's enumeration follow it, and the schema refuses what the format forbids."""

import copy
import json

import pytest
from attnspec.spec import schema
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
    edit(_live(doc))
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
