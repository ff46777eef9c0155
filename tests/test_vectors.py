"""The vector files: hashes, encoding, representability, the loader's refusals."""

import json
import shutil

import numpy as np
import pytest
from attnspec.spec import tensor
from attnspec.spec.errors import VectorFileError
from attnspec.spec.vectors import VECTORS_DIR, default_spec, load


def test_every_listed_file_loads_and_ids_are_unique():
    spec = default_spec()
    ids = [v.id for v in spec.vectors]
    assert len(ids) == len(set(ids))
    assert all(v.id.startswith(v.component + "/") for v in spec.vectors)


@pytest.fixture
def vectors_copy(tmp_path):
    d = tmp_path / "vectors"
    shutil.copytree(VECTORS_DIR, d)
    return d


def test_a_tampered_number_is_refused_naming_the_file(vectors_copy):
    path = vectors_copy / "softmax.json"
    doc = json.loads(path.read_text())
    doc["vectors"][0]["outputs"]["y"]["data"][0] += 1e-3
    path.write_text(json.dumps(doc))
    with pytest.raises(VectorFileError, match="softmax.json"):
        load(vectors_copy)


def test_a_one_character_edit_is_refused(vectors_copy):
    path = vectors_copy / "softmax.json"
    text = path.read_text()
    i = text.index('"data": [') + len('"data": [')
    digit = text[i + 1]
    path.write_text(text[: i + 1] + ("7" if digit != "7" else "3") + text[i + 2:])
    with pytest.raises(VectorFileError, match="does not match the manifest"):
        load(vectors_copy)


def test_a_missing_file_is_refused(vectors_copy):
    (vectors_copy / "softmax.json").unlink()
    with pytest.raises(VectorFileError, match="softmax.json"):
        load(vectors_copy)


def test_loader_never_unpickles():
    import attnspec.spec.vectors as mod

    source = open(mod.__file__).read()
    for forbidden in ("import pickle", "np.load", "allow_pickle", "eval(", "exec("):
        assert forbidden not in source


def test_encode_decode_round_trip_is_exact():
    x = np.array([[0.1, -2.5e-300, np.inf], [-np.inf, np.nan, 1 / 3]])
    y = tensor.decode(json.loads(json.dumps(tensor.encode(x))))
    assert np.array_equal(x, y, equal_nan=True)
    ids = np.array([[1, 0, 23]])
    assert tensor.decode(tensor.encode(ids)).dtype == np.int64
    assert tensor.decode(tensor.encode(np.array([True, False]))).dtype == np.bool_


@pytest.mark.parametrize("value,bf16", [(1.0 + 2**-8, 1.0), (1.0 + 3 * 2**-8, 1.0 + 2**-6),
                                        (1000.0, 1000.0), (999.0, 1000.0), (-3.0, -3.0)])
def test_bfloat16_rounding_is_nearest_even(value, bf16):
    assert tensor.round_bfloat16(np.array([value]))[0] == bf16


def test_every_float_input_is_exact_in_every_dtype_it_lists():
    for v in default_spec().vectors:
        if v.expect != "value":
            continue
        for name, a in {**v.inputs, **v.params}.items():
            if a.dtype.kind == "f":
                for d in v.dtypes:
                    assert tensor.representable(a, d), (v.id, name, d)


def test_every_component_has_enough_vectors():
    spec = default_spec()
    for comp, vs in spec.by_component().items():
        live = [v for v in vs if not v.deprecated]
        assert sum(v.expect == "value" for v in live) >= 6, comp
        assert sum(v.expect == "error" for v in live) >= 3, comp


def test_restricted_vectors_say_why():
    for v in default_spec().vectors:
        if len(v.dtypes) < 4:
            assert v.dtype_note, v.id


def _rehash_file(d, name):
    """Re-hash a file in the manifest, as someone editing it by hand would."""
    import hashlib

    from attnspec.spec.vectors import MANIFEST

    manifest = json.loads((d / MANIFEST).read_text())
    manifest["files"][name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    (d / MANIFEST).write_text(json.dumps(manifest))


def _edit_vector(d, vid, edit):
    path = d / f"{vid.split('/')[0]}.json"
    doc = json.loads(path.read_text())
    edit(next(v for v in doc["vectors"] if v["id"] == vid))
    path.write_text(json.dumps(doc))
    _rehash_file(d, path.name)


@pytest.mark.parametrize("edit", [
    lambda v: v["outputs"]["y"]["data"].__setitem__(0, v["outputs"]["y"]["data"][0] + 1e-3),
    lambda v: v["tolerances"]["float16"].__setitem__("rtol", 0.5),
    lambda v: v["attributes"].__setitem__("axis", 0),
    lambda v: v.__setitem__("dtypes", ["float64"]),
])
def test_a_vector_whose_content_does_not_match_its_hash_is_refused_naming_it(vectors_copy, edit):
    _edit_vector(vectors_copy, "softmax/basic-001", edit)
    with pytest.raises(VectorFileError, match="vector softmax/basic-001 in softmax.json does not match "
                                              "its own sha256"):
        load(vectors_copy)


def test_a_vector_without_a_hash_is_refused(vectors_copy):
    _edit_vector(vectors_copy, "softmax/mask-001", lambda v: v.pop("sha256"))
    with pytest.raises(VectorFileError, match="softmax/mask-001 .* has no sha256"):
        load(vectors_copy)


def test_editorial_fields_are_outside_the_hash(vectors_copy):
    def edit(v):
        v["description"] = "Reworded, but the same case."
        v["flags"] = ["basic", "batch"]

    _edit_vector(vectors_copy, "softmax/basic-001", edit)
    v = load(vectors_copy).vector("softmax/basic-001")
    assert v.description == "Reworded, but the same case."
    assert v.sha256 == default_spec().vector("softmax/basic-001").sha256


def test_the_content_hash_is_of_the_canonical_fields():
    """Recomputed here from the raw vector, independently of the loader."""
    import hashlib

    fields = ("id", "function", "dtypes", "expect", "attributes", "inputs", "params", "outputs",
              "intermediates", "cotangents", "gradients", "error", "error_mentions", "tolerances")
    every = [v for v in default_spec().vectors if "stress" not in v.flags]  # test_stress.py
    for v in every[::17] + [v for v in every if v.expect == "gradient"]:
        content = {k: v.raw[k] for k in fields if k in v.raw}
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(text.encode()).hexdigest() == v.sha256, v.id


def test_every_vector_carries_its_own_tolerances():
    for v in default_spec().vectors:
        assert set(v.raw["tolerances"]) == {"float64", "float32", "float16", "bfloat16"}, v.id
        assert v.tolerances is v.raw["tolerances"]


def test_supersede_links_point_both_ways():
    spec = default_spec()
    for v in spec.vectors:
        if v.superseded_by:
            assert v.deprecated and spec.vector(v.superseded_by).supersedes == v.id, v.id
        if v.supersedes:
            assert spec.vector(v.supersedes).superseded_by == v.id, v.id


def test_the_shipped_files_load_without_rehashing_each_vector(monkeypatch):
    """The loader's fast path (its time is benchmarks/bench_spec.py's): files whose bytes
    are the shipped release record's are not re-hashed vector by vector; a file that is not
    is (so an edited vector is refused: test_a_vector_whose_content_does_not_match_its_hash_...)."""
    from attnspec.spec import vectors as vmod
    from attnspec.spec.vectors import VECTORS_DIR as d

    hashed = []
    real = vmod.content_hash
    monkeypatch.setattr(vmod, "content_hash", lambda v, *a: hashed.append(v["id"]) or real(v, *a))
    spec = load(d)
    assert len(spec.vectors) > 500 and hashed == []
    monkeypatch.setattr(vmod, "shipped_files", lambda version: {})  # nothing shipped
    load(d)
    assert len(hashed) >= len([v for v in spec.vectors if "stress" not in v.flags])
