"""A torch LayerNorm straight from a notebook (issue 24, item 3): nn.Parameter gamma/beta,
no from_spec or load_spec_params, built with d_model from the input's shape; check maps the
spec's parameters onto its state_dict by name and shape and says so once."""

import re
import textwrap

import pytest

pytest.importorskip("torch")

from attnspec.conformance.cli import main

SOURCE = """
import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.gamma * (x - mu) / torch.sqrt(var + self.eps) + self.beta


"""


def test_a_notebook_layer_norm_with_gamma_and_beta(capsys, tmp_path):
    path = tmp_path / "nb.py"
    path.write_text(textwrap.dedent(SOURCE))
    code = main(["check", f"{path}:LayerNorm", "--component", "layer_norm", "--variant",
                 "canonical"])  # --framework torch: from the file's imports
    out = capsys.readouterr().out
    assert code == 0, out
    assert "(torch from its imports" in out
    assert out.count("parameters mapped by name and shape: gamma -> gamma, beta -> beta") == 1
    assert re.search(r"built LayerNorm with d_model=\d+ \(from the input's shape\)", out)
