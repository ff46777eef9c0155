"""`attnspec check FILE.py:NAME --component C` on the coursework examples."""

import re
from pathlib import Path

import pytest
from attnspec.conformance.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples" / "coursework"


def check(capsys, target: str, component: str, *extra: str) -> tuple[int, str]:
    code = main(["check", str(EXAMPLES / target), "--component", component, *extra])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("target, component", [
    ("attention_correct.py:scaled_dot_product_attention", "sdpa"),
    ("pe_correct.py:positional_encoding", "sinusoidal_pe"),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_functions_pass(capsys, target, component, dtype):
    code, out = check(capsys, target, component, "--dtype", dtype)
    assert code == 0, out
    assert "FAIL" not in out and " 0 failed" in out
    assert re.search(r"PASS  \S+ +max abs err", out)


def test_wrong_attention_fails_and_shows_the_expected_value(capsys):
    code, out = check(capsys, "attention_wrong.py:scaled_dot_product_attention", "sdpa")
    assert code == 1
    # masked_fill(-1e9): the fully masked row is the uniform average, not zeros
    # row 1 of each batch is fully masked: the spec expects zeros there
    assert re.search(r"FAIL  sdpa/fully-masked-001 +differs from the spec \(rtol=1e-10, "
                     r"atol=1e-12\)\n +output 'output': max abs err [0-9.]+, max ULP \S+, worst "
                     r"at index \(\d, 1, \d\): expected 0\.0, got -?[0-9.]+", out)
    # the scale uses V instead of K
    assert re.search(r"FAIL  sdpa/kv-width-001 .*\n.*worst at index \(.*\): expected -?[0-9.]+",
                     out)
    assert "PASS  sdpa/basic-001" in out  # right where K == V and nothing is masked
    # no `bias` or `scale` argument: those vectors are skipped, not failed
    assert "SKIP  sdpa/bias-001" in out and "needs input bias" in out
    assert "SKIP  sdpa/scale-001" in out and "needs scale=1.0" in out


def test_wrong_positional_encoding_fails(capsys):
    code, out = check(capsys, "pe_wrong.py:positional_encoding", "sinusoidal_pe")
    assert code == 1
    assert re.search(r"FAIL  sinusoidal_pe/basic-001 +differs from the spec .*\n +output 'pe': "
                     r"max abs err [0-9.]+, .* expected -?[0-9.]+", out)


def test_class_target_with_load_spec_params(capsys):
    code, out = check(capsys, "layer_norm_class.py:LayerNorm", "layer_norm")
    assert code == 0, out
    assert "PASS  layer_norm/basic-001" in out
    assert "SKIP  layer_norm/annotated-001" in out  # variant='annotated' is not taken


def test_error_vectors_with_errors_flag(capsys):
    code, out = check(capsys, "attention_correct.py:scaled_dot_product_attention", "sdpa",
                      "--errors")
    assert code == 1  # the student's function accepts an integer mask silently
    assert re.search(r"FAIL  sdpa/mask-dtype-001 +raised nothing; the spec raises DTypeError", out)
    # NumPy's own matmul error is a ValueError, not the spec's ShapeError
    assert re.search(r"FAIL  sdpa/key-width-001 +raised ValueError, but the spec raises "
                     r"ShapeError \(ValueError: matmul", out)


def test_bad_target_is_a_clear_error(capsys):
    assert main(["check", "nowhere.py:f", "--component", "sdpa"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["check", str(EXAMPLES / "pe_correct.py:nothing"), "--component",
                 "sinusoidal_pe"]) == 2
    assert "defines no 'nothing'" in capsys.readouterr().err


