"""`attnspec check` on PyTorch coursework (tests/check_examples/torch_student.py): the
--framework hint, nn.Modules called through their forward signature in eval and inference
mode, built with the dtype under test. Skipped (only) where torch is not installed."""

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from attnspec.conformance.cli import main  # noqa: E402
from attnspec.spec.vectors import default_spec  # noqa: E402

STUDENT = Path(__file__).parents[1] / "check_examples" / "torch_student.py"


def check(capsys, name, *args):
    code = main(["check", f"{STUDENT}:{name}", *args])
    return code, capsys.readouterr().out


NO_NAN = "not nan and not pos-inf"  # the edge vectors textbook attention gets wrong


def sdpa_vectors(*left_out: str) -> list:
    """The live sdpa value vectors at float64 whose id and flags contain none of the words
    (what ``-k "not w1 and not w2 ..."`` selects)."""
    return [v for v in default_spec().vectors
            if v.component == "sdpa" and v.expect == "value" and not v.deprecated
            and "float64" in v.dtypes
            and not any(w in v.id or any(w in f for f in v.flags) for w in left_out)]


def needing(vectors: list, *names: str) -> list:
    """The vectors that state one of the attributes, or take one of the inputs."""
    return [v for v in vectors if any(v.attributes.get(n) is not None or n in v.inputs
                                      for n in names)]


def test_torch_code_under_numpy_gets_the_framework_hint(capsys):
    code, out = check(capsys, "scaled_dot_product_attention", "--component", "sdpa",
                      "-k", "basic", "--framework", "numpy")
    assert code == 1
    assert re.search(r"FAIL  sdpa/basic-001 +raised TypeError", out)
    assert out.rstrip().endswith("torch_student.py uses torch, but the inputs were numpy "
                                 "arrays; run it with --framework torch")


def test_torch_function_passes_with_framework_torch(capsys):
    # F.scaled_dot_product_attention leaks masked NaN and gives NaN for +inf (pytorch.md):
    # those vectors are left out here, where the check's mechanics are under test
    code, out = check(capsys, "scaled_dot_product_attention", "--component", "sdpa",
                      "--framework", "torch", "-k", NO_NAN)
    assert code == 0, out
    ran = sdpa_vectors("nan", "pos-inf")
    skipped = needing(ran, "softcap", "num_kv_heads")
    assert len(ran) - len(skipped) >= 24
    assert f"{len(ran) - len(skipped)} passed, 0 failed" in out and "hint" not in out
    # the function takes no softcap: the softcap vectors are skipped, not run
    assert f"softcap ({len(needing(ran, 'softcap'))})" in out


def test_module_is_called_with_its_forward_signature(capsys):
    # forward(q, k, v, mask=None): bias and scale vectors are skipped, not fed to forward
    code, out = check(capsys, "Attention", "--component", "sdpa", "--framework", "torch",
                      "-k", f"{NO_NAN} and not softcap")
    assert code == 0, out
    assert re.search(r"SKIP  sdpa/bias-001 +needs input bias", out)
    assert re.search(r"SKIP  sdpa/scale-001 +needs scale=1.0", out)
    ran = sdpa_vectors("nan", "pos-inf", "softcap")
    skipped = needing(ran, "bias", "scale", "num_kv_heads")
    assert len(ran) - len(skipped) >= 17
    assert re.search(rf"^{len(ran) - len(skipped)} passed, 0 failed, {len(skipped)} skipped", out, re.M)
    # forward takes no num_kv_heads: the grouped-query vectors are skipped, not run
    assert f"num_kv_heads ({len(needing(ran, 'num_kv_heads'))})" in out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_module_in_eval_and_inference_mode_with_the_dtype_under_test(capsys, dtype):
    before = torch.get_default_dtype()
    code, out = check(capsys, "FeedForward", "--component", "feedforward", "--framework",
                      "torch", "--dtype", dtype)
    assert code == 0, out  # dropout(0.5) in training mode would fail every vector
    seen = re.findall(r"^      \| seen (.*)$", out, re.M)  # what forward printed, per vector
    ran = int(re.search(r"^(\d+) passed, 0 failed", out, re.M).group(1))  # grows with vectors
    assert ran >= 8 and seen == [f"training=False inference=True dtype=torch.{dtype}"] * ran
    assert torch.get_default_dtype() == before


def test_numpy_code_under_torch_gets_the_hint_back(capsys):
    target = (Path(__file__).parents[2] / "examples" / "coursework" / "attention_correct.py")
    code = main(["check", f"{target}:scaled_dot_product_attention", "--component", "sdpa",
                 "--framework", "torch", "-k", "basic"])
    out = capsys.readouterr().out
    assert code == 1
    assert re.search(r"FAIL  sdpa/basic-001 +raised TypeError: .*\n(       +\S.*\n)+", out)
    assert out.rstrip().endswith("attention_correct.py uses numpy, but the inputs were torch "
                                 "arrays; run it with --framework numpy")
