"""Partial code is not a failure (issue 24, item 4): a right function that takes only some of
the spec's arguments exits 0 with one line on what was not applicable (--strict for the
old rule); --framework comes from the file's imports; an error repeated word for word is
printed once with a count."""

import re
import textwrap
from pathlib import Path

import pytest
from attnspec.conformance.check import infer_framework
from attnspec.conformance.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples" / "coursework"

UNMASKED = """
import numpy as np


def attention(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return w @ v, w
"""


def check(capsys, *args) -> tuple[int, str]:
    code = main(["check", *map(str, args)])
    return code, capsys.readouterr().out


def test_a_right_unmasked_attention_exits_0(capsys, tmp_path):
    path = tmp_path / "unmasked.py"
    path.write_text(UNMASKED)
    code, out = check(capsys, f"{path}:attention", "--component", "sdpa", "-k", "not empty")
    passed, skipped = (int(re.search(rf"(\d+) {w}", out)[1]) for w in ("passed", "skipped"))
    assert skipped > passed > 0 and " 0 failed" in out  # most vectors need a mask, bias...
    assert code == 0, out
    line = re.search(r"^not applicable: (\d+) of (\d+) vectors need what your code does not "
                     r"take: (.*) \(not a failure; --strict makes it one\)$", out, re.M)
    assert line and int(line[1]) == skipped, out
    assert "input mask" in line[3] and "input bias" in line[3]
    assert "only " not in out


def test_strict_keeps_the_old_rule(capsys, tmp_path):
    path = tmp_path / "unmasked.py"
    path.write_text(UNMASKED)
    code, out = check(capsys, f"{path}:attention", "--component", "sdpa", "-k", "not empty",
                      "--strict")
    assert code == 1
    assert re.search(r"only \d+ of \d+ vectors ran: add those arguments", out)


def test_nothing_run_is_still_a_failure(capsys):
    code, out = check(capsys, EXAMPLES / "layer_norm_class.py:LayerNorm", "--component",
                      "layer_norm", "--variant", "annotated")
    assert code == 1 and "only 0 of" in out


def _file(tmp_path, source: str) -> str:
    path = tmp_path / "f.py"
    path.write_text(textwrap.dedent(source))
    return f"{path}:f"


@pytest.mark.parametrize("source, framework", [
    ("import numpy as np\n", "numpy"),
    ("import torch.nn as nn\nimport numpy as np\n", "torch"),
    ("from keras import layers\n", "tensorflow"),
    ("import tensorflow as tf\n", "tensorflow"),
    ("import jax.numpy as jnp\n", "jax"),
    ("def f(x):\n    import torch\n    return torch.relu(x)\n", "torch"),
    ("from . import sibling\nimport math\n", "numpy"),
])
def test_the_framework_comes_from_the_imports(tmp_path, source, framework):
    assert infer_framework(_file(tmp_path, source))[0] == framework


def test_two_frameworks_ask_for_a_choice(tmp_path):
    name, how = infer_framework(_file(tmp_path, "import torch\nimport tensorflow as tf\n"))
    assert name == "numpy" and "imports tensorflow and torch: choose one with --framework" in how


def test_inferring_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    target = _file(tmp_path, f"open({str(marker)!r}, 'w')\nimport torch\n")
    assert infer_framework(target)[0] == "torch"
    assert not marker.exists()


def test_the_header_says_where_the_framework_came_from(capsys, tmp_path):
    target = _file(tmp_path, """
        import torch  # noqa: F401 - never run by the inference


        def f(x, axis=-1):
            return x
        """)
    from attnspec.conformance import check as check_module

    assert check_module.infer_framework(target) == ("torch", " from its imports; --framework "
                                                             "to choose")


def test_a_repeated_error_is_printed_once_with_a_count(capsys, tmp_path):
    path = tmp_path / "raises.py"
    path.write_text("def attention(q, k, v, mask=None):\n    raise TypeError('not yet')\n")
    code, out = check(capsys, f"{path}:attention", "--component", "sdpa")
    assert code == 1
    fails = re.findall(r"^FAIL  (\S+) +raised TypeError: not yet$", out, re.M)
    assert len(fails) == 1, out
    more = re.search(rf"^FAIL  (\d+) more vector\(s\) with the same error as {fails[0]}: (.*)$",
                     out, re.M)
    failed = int(re.search(r"^0 passed, (\d+) failed", out, re.M)[1])
    assert more and int(more[1]) == failed - 1, out
    named = more[2].removesuffix(" ...").split(", ")
    if more[2].endswith(" ..."):  # a long list is shortened to one line of 400 characters
        assert len(more[2]) <= 400 and len(named) < failed - 1
    else:
        assert len(named) == failed - 1


def test_different_errors_are_each_printed(capsys, tmp_path):
    path = tmp_path / "raises.py"
    path.write_text("def attention(q, k, v, mask=None):\n    raise ValueError(str(q.shape))\n")
    code, out = check(capsys, f"{path}:attention", "--component", "sdpa", "-k", "basic or rank2")
    assert len(re.findall(r"^FAIL  \S+ +raised ValueError", out, re.M)) == 2
    assert "more vector(s) with the same error" not in out
