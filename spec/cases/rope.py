"""rope: rotary position embedding, interleaved and half-split conventions."""

import numpy as np

from ..oracle.rope import rope as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("rope", {
    "rope": Fn(module="positional", inputs=["x"],
               attributes={"offset": 0, "base": 10000.0, "convention": "interleaved"},
               returns=["y"], oracle=oracle),
})


def cases(rng):
    yield value("rope/interleaved-001", "rope",
                "x (1, 6, 8), positions 0..5, pairs (2i, 2i+1) (RoFormer, GPT-J).",
                inputs={"x": rng.uniform((1, 6, 8))}, flags=["basic", "interleaved"])
    yield value("rope/half-001", "rope",
                "x (1, 6, 8), positions 0..5, pairs (i, i + K/2) (GPT-NeoX, HF rotate_half).",
                inputs={"x": rng.uniform((1, 6, 8))}, attributes={"convention": "half"},
                flags=["basic", "half"])
    yield value("rope/offset-001", "rope",
                "x (2, 5, 12), positions 37..41 (offset 37), interleaved: ignoring the offset, "
                "a flipped angle sign or the other pairing fails.",
                inputs={"x": rng.uniform((2, 5, 12))}, attributes={"offset": 37},
                flags=["offset", "interleaved", "sign"])
    yield value("rope/offset-002", "rope",
                "x (2, 4, 16), positions 37..40, half convention.",
                inputs={"x": rng.uniform((2, 4, 16))},
                attributes={"offset": 37, "convention": "half"}, flags=["offset", "half", "sign"])
    yield value("rope/heads-001", "rope",
                "x (1, 2, 7, 8) = (B, H, T, K): the position is the second-to-last axis; "
                "offset 3.",
                inputs={"x": rng.uniform((1, 2, 7, 8))}, attributes={"offset": 3},
                flags=["batch", "heads", "position-axis"])
    yield value("rope/base-001", "rope",
                "base 500 instead of 10000 (theta_i = 500^(-2i/K)), x (1, 4, 10), half.",
                inputs={"x": rng.uniform((1, 4, 10))},
                attributes={"base": 500.0, "convention": "half", "offset": 5},
                flags=["base", "half"])
    yield value("rope/rank2-001", "rope",
                "A rank-2 x (7, 8): rows are positions 0..6.",
                inputs={"x": rng.uniform((7, 8))}, flags=["rank-2"])
    yield value("rope/pair-001", "rope",
                "K = 2 (a single pair, theta_0 = 1), positions 37..39: both conventions agree.",
                inputs={"x": rng.uniform((3, 2))}, attributes={"offset": 37},
                flags=["minimal"])
    yield value("rope/large-offset-001", "rope",
                "Positions 8192..8194: float32 angles (pos * theta in float32) are off by 2.4e-5 "
                "to 7.3e-5 and the values by 2.2e-5 to 1.3e-4, beyond the float32 tolerance; "
                "compute angles in float64, round cos and sin.",
                inputs={"x": rng.uniform((1, 3, 8))}, attributes={"offset": 8192},
                flags=["precision", "offset"])
    yield error("rope/odd-width-001", "rope", "K = 7 is odd: features cannot be paired.",
                inputs={"x": rng.uniform((1, 4, 7))}, error="ShapeError", mentions=["x", "7"])
    yield error("rope/convention-001", "rope", "convention = 'neox' is not a spec name.",
                inputs={"x": rng.uniform((1, 4, 8))}, attributes={"convention": "neox"},
                error="ConfigError", mentions=["convention"])
    yield error("rope/negative-offset-001", "rope", "offset = -1.",
                inputs={"x": rng.uniform((1, 4, 8))}, attributes={"offset": -1},
                error="ConfigError", mentions=["offset"])
    yield error("rope/bad-base-001", "rope", "base = 0 (theta would be infinite).",
                inputs={"x": rng.uniform((1, 4, 8))}, attributes={"base": 0.0},
                error="ConfigError", mentions=["base"])
    yield error("rope/rank1-001", "rope", "A rank-1 x has no position axis.",
                inputs={"x": rng.uniform((8,))}, error="ShapeError", mentions=["x"])
    yield from defaults_cases()
    yield from _edges(Rng(f"{COMPONENT.id}/edges"))
    yield from study_cases(Rng(f"{COMPONENT.id}/study"))


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("rope/defaults-001", "rope",
                "offset, base and convention left out (0, 10000, interleaved): x (1, 8, 8), "
                "positions 0..7; offset 1, base 500000 (Llama 3) or the half convention "
                "(GPT-NeoX) all fail.",
                inputs={"x": rd.uniform((1, 8, 8))}, flags=["defaults"], omit_defaults=True)


def _edges(rng):
    """K = 0 (its own number stream)."""
    yield value("rope/empty-width-001", "rope",
                "K = 0: no feature pairs to rotate, so the identity on an empty vector: x "
                "(2, 3, 0) gives y (2, 3, 0) (0 is even; not an error).",
                inputs={"x": np.zeros((2, 3, 0))}, attributes={"offset": 2},
                flags=["empty-axis", "edge"])


def study_cases(rng):
    """Asked for by the mutation study (issue 19): a base that is not a number."""
    yield error("rope/bad-base-002", "rope",
                "base = True: a bool is not a number here (Python's True == 1 would give "
                "theta = 1 for every pair).",
                inputs={"x": rng.uniform((1, 4, 8))}, attributes={"base": True},
                error="ConfigError", mentions=["base"])
    yield error("rope/bad-base-003", "rope", "base = '10000', a string.",
                inputs={"x": rng.uniform((1, 4, 8))}, attributes={"base": "10000"},
                error="ConfigError", mentions=["base"])


def grad_cases(r):
    yield gradient("rope/grad-001", "rope",
                   "interleaved, x (1, 5, 8), offset 3: dx = R^T dy, the rotation by the "
                   "opposite angle (dx_a = dy_a cos + dy_b sin, dx_b = -dy_a sin + dy_b cos); "
                   "rotating dy forward (R dy) fails.",
                   inputs={"x": r.uniform((1, 5, 8))}, attributes={"offset": 3},
                   cotangents={"y": r.uniform((1, 5, 8))},
                   flags=["gradient", "interleaved", "offset", "sign"])
    yield gradient("rope/grad-002", "rope",
                   "half convention, x (2, 4, 8), offset 5: the pairs (i, i + K/2) in the "
                   "backward pass too.",
                   inputs={"x": r.uniform((2, 4, 8))},
                   attributes={"offset": 5, "convention": "half"},
                   cotangents={"y": r.uniform((2, 4, 8))}, flags=["gradient", "half", "offset"])
    yield gradient("rope/grad-003", "rope",
                   "x (1, 2, 4, 6) = (B, H, T, K), base 500, interleaved, offset 0: row 0 is "
                   "not rotated, so its gradient is dy itself.",
                   inputs={"x": r.uniform((1, 2, 4, 6))}, attributes={"base": 500.0},
                   cotangents={"y": r.uniform((1, 2, 4, 6))},
                   flags=["gradient", "heads", "base", "interleaved"])
    yield gradient("rope/grad-004", "rope",
                   "half convention, base 100, offset 37, rank-2 x (3, 10).",
                   inputs={"x": r.uniform((3, 10))},
                   attributes={"offset": 37, "base": 100.0, "convention": "half"},
                   cotangents={"y": r.uniform((3, 10))},
                   flags=["gradient", "half", "base", "rank-2"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("rope/grad-005", "rope",
                   "offset, base and convention left out (0, 10000, interleaved): x (1, 6, 8); "
                   "the half convention or base 500000 fails.",
                   inputs={"x": r.uniform((1, 6, 8))}, cotangents={"y": r.uniform((1, 6, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)
