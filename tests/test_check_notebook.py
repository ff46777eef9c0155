"""`attnspec check hw3.ipynb:attention` (issue 24, item 1): the code cells run in order in a
fresh namespace, magics and shell lines skipped, nothing but the notebook's own code run,
a failing cell one line."""

import json
import re
from pathlib import Path

import pytest
from attnspec.conformance.cli import main

SOFTMAX = """import numpy as np

def softmax(s):
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    t = e.sum(axis=-1, keepdims=True)
    return np.divide(e, t, out=np.zeros_like(e), where=t > 0)
"""
ATTENTION = """from helpers import softmax

def attention(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = softmax(s)
    return w @ v, w
"""


def notebook(path: Path, *cells: str) -> Path:
    """A notebook whose code cells are ``cells`` (a markdown cell first, as a course has)."""
    doc = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
           "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Homework 3"]}] +
                    [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                      "source": c.splitlines(True)} for c in cells]}
    path.write_text(json.dumps(doc))
    return path


def check(capsys, target, *args):
    code = main(["check", str(target), "--component", "sdpa", "-k", "basic-001 or mask-001",
                 *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_notebook_with_magics_shell_lines_and_writefile(capsys, tmp_path):
    marker = tmp_path / "shell-ran"
    nb = notebook(tmp_path / "hw3.ipynb",
                  "%matplotlib inline\n!pip install numpy\nimport numpy as np\nfiles = !ls\n"
                  "get_ipython().run_line_magic('load_ext', 'autoreload')\nnp.zeros?\n",
                  "%%writefile helpers.py\n" + SOFTMAX,
                  f"%%bash\ntouch {marker}\n",
                  ATTENTION,
                  "%%time\nout, w = attention(np.ones((1, 2, 4)), np.ones((1, 3, 4)), "
                  "np.ones((1, 3, 4)))\ndisplay(out.shape)\n")
    code, out, err = check(capsys, f"{nb}:attention")
    assert code == 0, out + err
    assert re.search(r"^2 passed, 0 failed", out, re.M), out
    assert "      | (1, 2, 4)" in out  # what the cells printed, shown under the header
    assert not marker.exists()  # %%bash is not the notebook's Python: never run
    assert not (tmp_path / "helpers.py").exists()  # %%writefile: a module, not a file


def test_cells_run_in_order_in_a_fresh_namespace(capsys, tmp_path):
    nb = notebook(tmp_path / "hw.ipynb",
                  "import numpy as np\n" + SOFTMAX.replace("def softmax", "def first_softmax"),
                  "def attention(q, k, v, mask=None):\n    return None\n",
                  # the student's fix, in a later cell, is the one checked
                  "def attention(q, k, v, mask=None):\n"
                  "    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])\n"
                  "    if mask is not None:\n        s = np.where(mask, s, -np.inf)\n"
                  "    w = first_softmax(s)\n    return w @ v, w\n")
    code, out, _ = check(capsys, f"{nb}:attention")
    assert code == 0, out


def test_a_failing_cell_is_one_line(capsys, tmp_path):
    nb = notebook(tmp_path / "hw.ipynb", "import numpy as np\n", "x = 1\ny = undefined + 1\n",
                  "def attention(q, k, v):\n    return q\n")
    code, out, err = check(capsys, f"{nb}:attention")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.search(r"hw\.ipynb, code cell 2, line 2 failed: NameError: name 'undefined' is not "
                     r"defined \(the code cells run in order", err), err


@pytest.mark.parametrize("content, message", [
    ('{"cells": 3}', "is not a notebook: no list of 'cells'"),
    ("[[[[", "is not a notebook (not JSON"),
    ('{"cells": [{"cell_type": "code", "source": 7}]}', "code cell 1's 'source' is not text"),
    ("[" * 100_000 + "]" * 100_000, "is not a notebook (not JSON"),
])
def test_a_malformed_notebook_is_one_line(capsys, tmp_path, content, message):
    nb = tmp_path / "bad.ipynb"
    nb.write_text(content)
    code, _, err = check(capsys, f"{nb}:attention")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_huge_notebook_is_refused_without_reading_it_all(capsys, tmp_path, monkeypatch):
    import attnspec.conformance.notebook as nbmod

    monkeypatch.setattr(nbmod, "MAX_NOTEBOOK", 1000)
    nb = notebook(tmp_path / "big.ipynb", "x = 1\n" * 1000)
    with pytest.raises(nbmod.CheckError, match="is over 0 MiB"):
        nbmod.read_cells(nb)


def test_the_framework_is_read_from_the_notebooks_imports(tmp_path):
    from attnspec.conformance.check import infer_framework

    nb = notebook(tmp_path / "hw.ipynb", "!pip install torch\nimport torch.nn as nn\n",
                  "def attention(q, k, v):\n    return q\n")
    assert infer_framework(f"{nb}:attention")[0] == "torch"
