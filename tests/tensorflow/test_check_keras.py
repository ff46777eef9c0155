"""`attnspec check` on a Keras layer (tests/check_examples/keras_student.py): weights built
in load_spec_params at the dtype under test, called through ``call`` with training=False."""

import re
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

import keras
from attnspec.conformance.cli import main

STUDENT = Path(__file__).parents[1] / "check_examples" / "keras_student.py"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_keras_layer_in_inference_with_the_dtype_under_test(capsys, dtype):
    before = keras.config.floatx(), keras.config.dtype_policy().name
    code = main(["check", f"{STUDENT}:FeedForward", "--component", "feedforward",
                 "--framework", "tensorflow", "--dtype", dtype])
    out = capsys.readouterr().out
    assert code == 0, out  # Dropout(0.5) with training=True would fail every vector
    ran = int(re.search(r"^(\d+) passed, 0 failed", out, re.M).group(1))  # grows with vectors
    assert ran >= 8
    seen = re.findall(r"^      \| seen (.*)$", out, re.M)  # what call printed, per vector
    assert seen == [f"training=False dtype={dtype}"] * ran
    assert (keras.config.floatx(), keras.config.dtype_policy().name) == before
