"""Classes straight from a notebook (issue 24, item 3): no from_spec or load_spec_params,
built with the common argument aliases and sizes read from the input's shape, parameters
mapped by name and shape where unambiguous (the mapping printed once), else one clear line."""

import re
import textwrap

from attnspec.conformance.check_state import ParamMapping, match
from attnspec.conformance.cli import main

LAYER_NORM = """
import numpy as np


class LayerNorm:
    def __init__(self, {size}, epsilon=1e-5):
        self.{g} = np.ones({first})
        self.{b} = np.zeros({first})
        self.epsilon = epsilon

    def __call__(self, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return self.{g} * (x - mu) / np.sqrt(var + self.epsilon) + self.{b}
"""


def run(capsys, tmp_path, source: str, component="layer_norm", *args):
    path = tmp_path / "nb.py"
    path.write_text(textwrap.dedent(source))
    code = main(["check", f"{path}:LayerNorm", "--component", component, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_aliases_sizes_and_parameters_by_name(capsys, tmp_path):
    code, out, _ = run(capsys, tmp_path, LAYER_NORM.format(size="features", first="features",
                                                         g="gamma", b="beta"))
    assert code == 0, out
    assert re.search(r"built LayerNorm with epsilon for eps, features=\d+ \(from the input's "
                     r"shape\)", out)
    assert out.count("built LayerNorm with") == 1  # once, whatever the width
    assert out.count("parameters mapped by name and shape: gamma -> gamma, beta -> beta") == 1
    assert "SKIP  layer_norm/basic-001" not in out


def test_weight_and_bias_names_map_to_gamma_and_beta(capsys, tmp_path):
    code, out, _ = run(capsys, tmp_path, LAYER_NORM.format(size="d_model", first="d_model",
                                                         g="weight", b="bias"))
    assert code == 0, out
    assert "gamma -> weight, beta -> bias" in out


def test_an_ambiguous_mapping_is_one_clear_failure(capsys, tmp_path):
    code, out, _ = run(capsys, tmp_path, LAYER_NORM.format(size="dim", first="dim", g="p1",
                                                         b="p2"))
    assert code == 1
    assert re.search(r"constructing LayerNorm raised ParamMapping: the spec's 'gamma' could be "
                     r"'p1' or 'p2' \(same shape\); define from_spec", out), out
    assert out.count("could be 'p1' or 'p2'") == 1  # later vectors: (as above)


def test_match_by_shape_and_transposed_torch_weights():
    class A:
        def __init__(self, shape):
            self.shape = shape

    theirs = {"W_q.weight": A((3, 4)), "W_q.bias": A((3,)), "W_k.weight": A((3, 4)),
              "W_k.bias": A((3,))}
    got = match({"w_q": A((4, 3)).shape and __import__("numpy").zeros((4, 3)),
                 "b_q": __import__("numpy").zeros(3), "w_k": __import__("numpy").zeros((4, 3)),
                 "b_k": __import__("numpy").zeros(3)}, theirs, "torch")
    assert got == {"w_q": ("W_q.weight", True), "b_q": ("W_q.bias", False),
                   "w_k": ("W_k.weight", True), "b_k": ("W_k.bias", False)}
    try:
        match({"w_q": __import__("numpy").zeros((5, 5))}, theirs, "torch")
    except ParamMapping as exc:
        assert "no parameter of shape (5, 5)" in str(exc)
    else:
        raise AssertionError("no match must be said")
