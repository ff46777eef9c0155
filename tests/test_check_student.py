"""`attnspec check` on student-style files (tests/check_examples): each behaviour a student
meets ends in one clear line and the right exit status."""

import re
from pathlib import Path

import pytest
from attnspec.conformance.cli import main
from attnspec.spec.vectors import VECTORS_DIR, load

EXAMPLES = Path(__file__).parent / "check_examples"
NUMPY = EXAMPLES / "numpy_student.py"


def check(capsys, target, *args):
    code = main(["check", str(target), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def live_values(component: str, dtype: str = "float64", **attributes) -> list:
    """The value vectors `check` runs for ``component`` (with these attribute values,
    a left-out attribute taking the function's default)."""
    spec = load(VECTORS_DIR)
    out = []
    for v in spec.vectors:
        if v.component != component or v.expect != "value" or v.deprecated or dtype not in v.dtypes:
            continue
        defaults = spec.functions[v.function].attributes
        if all({**defaults, **v.attributes}.get(k) == want for k, want in attributes.items()):
            out.append(v)
    return out


def line_of(out: str, vid: str) -> str:
    return next(ln for ln in out.splitlines() if re.match(rf"(PASS|FAIL|SKIP)  {vid} ", ln))


def test_float32_only_function_is_told_so(capsys):
    # the edge vectors (NaN, +inf, empty axes) that this textbook attention gets wrong at
    # every dtype are left out: the note is about the ones float32 alone explains
    edges = ("-k", "not nan and not pos-inf and not empty")
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_float32", "--component", "sdpa", *edges)
    assert code == 1
    assert "returned float32 for float64 inputs" in out
    assert re.search(r"note: the \d+ failing vector\(s\) that float32 has all pass at float32", out)
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_float32", "--component", "sdpa",
                         "--dtype", "float32", *edges)
    assert code == 0 and "note:" not in out


def test_a_right_float64_function_gets_no_float32_note(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_naive", "--component", "sdpa")
    assert code == 1 and "note:" not in out  # it fails at float32 too: not a dtype problem


def test_errors_require_the_spec_class(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_value_error", "--component", "sdpa",
                         "--errors", "-k", "key-width")
    assert code == 1
    assert "raised ValueError, but the spec raises ShapeError" in line_of(out, "sdpa/key-width-001")
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_shape_error", "--component", "sdpa",
                         "--errors", "-k", "key-width")
    assert code == 0 and "raised ShapeError" in line_of(out, "sdpa/key-width-001")


def test_nan_is_reported_as_nan(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_naive", "--component", "sdpa", "-k", "large")
    assert code == 1
    assert re.search(r"output 'output' is NaN at \d+ of \d+ element\(s\), first at index "
                     r"\(\d+, \d+\) \(the spec expects -?[0-9.]+ there\)", out)


def test_a_one_element_list_counts_as_the_single_output(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:positional_encoding_list", "--component",
                         "sinusoidal_pe")
    assert code == 0, out
    assert re.search(rf"^{len(live_values('sinusoidal_pe'))} passed, 0 failed", out, re.M)


def test_input_mutation_is_a_failure(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_in_place", "--component", "sdpa", "-k", "basic")
    assert code == 1
    assert "modified its input(s) q in place" in line_of(out, "sdpa/basic-001")


def test_sys_exit_is_caught_and_the_run_goes_on(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:sdpa_exits", "--component", "sdpa")
    assert code == 1
    assert "called sys.exit(3)" in line_of(out, "sdpa/mask-001")
    assert line_of(out, "sdpa/rank2-001").startswith("PASS")  # vectors after it still ran


def test_constructor_that_cannot_take_what_check_passes(capsys):
    code, out, err = check(capsys, f"{NUMPY}:NeedsWidth", "--component", "layer_norm")
    assert code == 2
    assert "FAIL" not in out and len(err.strip().splitlines()) == 1
    assert "cannot build NeedsWidth(width_of_it, eps=1e-05): missing a required argument: " \
           "'width_of_it'" in err
    assert "NeedsWidth(eps=1e-05)" in err and "load_spec_params(params)" in err
    assert "from_spec(cls, params, **attributes)" in err


def test_constructor_that_raises_is_explained_once(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:BrokenInit", "--component", "layer_norm")
    assert code == 1
    assert "constructing BrokenInit raised RuntimeError: TODO" in line_of(out, "layer_norm/basic-001")
    assert out.count("check builds it as BrokenInit(eps=") == 1
    failed = int(re.search(r"^0 passed, (\d+) failed", out, re.M)[1])
    assert failed == len(live_values("layer_norm", variant="canonical"))
    assert out.count("(as above)") == failed - 1


def test_from_spec_builds_the_class(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:FromSpec", "--component", "layer_norm",
                         "--variant", "canonical")
    assert code == 0, out
    n, total = len(live_values("layer_norm", variant="canonical")), len(live_values("layer_norm"))
    assert n < total
    assert f"{n} vectors (of {total}, selected by --variant canonical)" in out


def test_composite_names_the_first_diverging_intermediate(capsys):
    code, out, _ = check(capsys, EXAMPLES / "encoder_layer_student.py:encoder_layer",
                         "--component", "encoder_layer")
    assert code == 1
    # the student's 'gelu' is the tanh approximation: attention and residual 1 are right
    assert "first diverging intermediate: 'ffn.output'" in line_of(out, "encoder_layer/pre-001")
    # post-001 or its revision with re-derived tolerances (post-001r2)
    assert re.search(r"PASS  encoder_layer/post-001(r\d+)? +max abs err \S+, 5 intermediates",
                     out)


@pytest.mark.parametrize("source, expected", [
    ("def f(q, k, v):\n    return q @ k.T v\n", r"line 2: SyntaxError: invalid syntax"),
    ("import numpy\nimport no_such_module_xyz\n",
     r"importing .*bad\.py failed at line 2: ModuleNotFoundError: No module named "
     r"'no_such_module_xyz' \(is 'no_such_module_xyz' installed in this environment\?\)"),
    ("import sys\nsys.exit('usage: bad.py')\n",
     r"bad\.py at line 2 called sys\.exit\('usage: bad\.py'\) while being imported"),
    ("x = 1 / 0\n", r"failed at line 1: ZeroDivisionError: division by zero"),
])
def test_broken_files_are_one_message(capsys, tmp_path, source, expected):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    code, out, err = check(capsys, f"{bad}:f", "--component", "sdpa")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(expected, err), err


def test_selection_with_k_and_variant(capsys):
    code, out, _ = check(capsys, EXAMPLES.parent.parent / "examples/coursework/"
                         "attention_correct.py:scaled_dot_product_attention",
                         "--component", "sdpa", "-k", "mask-001 and not (fully or bias)")
    assert code == 0
    assert re.findall(r"^PASS  (\S+)", out, re.M) == ["sdpa/mask-001"]
    code, out, err = check(capsys, f"{NUMPY}:FromSpec", "--component", "layer_norm",
                           "--variant", "norm=pre")
    assert code == 2 and "layer_norm has no attribute 'norm'; its attributes: eps, variant" in err


def test_mostly_skipped_is_not_a_pass(capsys):
    code, out, _ = check(capsys, f"{NUMPY}:FromSpec", "--component", "layer_norm",
                         "--variant", "annotated")
    assert code == 1
    assert "0 passed, 0 failed, 3 skipped" in out
    assert "only 0 of 3 vectors ran" in out and "variant (3)" in out


def test_bad_dtype_is_rejected(capsys):
    code, _, err = check(capsys, f"{NUMPY}:sdpa_shape_error", "--component", "sdpa",
                         "--dtype", "float16")
    assert code == 2 and "--dtype 'float16': the numpy framework supports float64, float32" in err
    with pytest.raises(SystemExit) as exc:
        main(["check", f"{NUMPY}:sdpa_shape_error", "--component", "sdpa", "--dtype", "f32"])
    assert exc.value.code == 2 and "invalid choice: 'f32'" in capsys.readouterr().err


def test_unknown_component_suggests_one(capsys):
    code, _, err = check(capsys, f"{NUMPY}:sdpa_shape_error", "--component", "spda")
    assert code == 2 and "unknown component 'spda' (did you mean 'sdpa'?)" in err


def test_help_lists_components_and_explains_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    listed = out.split("components (")[1]
    for component in load(VECTORS_DIR).components:
        assert re.search(rf"\b{component}\b", listed), component
    for option, words in [("--component C", "component to check against"),
                          ("--function NAME", "which function"),
                          ("--framework NAME", "arrays your code takes"),
                          ("--dtype", "tolerance"), ("--errors", "spec's class"),
                          ("-k EXPR", "pytest's -k"), ("--variant KEY=VALUE", "attribute value")]:
        assert re.search(rf"{re.escape(option)}\s.*?{re.escape(words)}", out, re.S), option
    assert "load_spec_params" in out and "from_spec" in out and "Exit status" in out
