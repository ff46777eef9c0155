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
