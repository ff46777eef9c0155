"""rope: rotary position embedding, interleaved and half-split conventions."""

import numpy as np

from ..oracle.rope import rope as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("rope", {
    "rope": Fn(module="positional", inputs=["x"],
               attributes={"offset": 0, "base": 10000.0, "convention": "interleaved"},
               added={"rotary_dim": None, "scaling": None}, returns=["y"], oracle=oracle),
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
    yield from scaling_cases(Rng(f"{COMPONENT.id}/scaling"))


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
    yield from grad_scaling_cases(Rng(f"{COMPONENT.id}/grad-scaling"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("rope/grad-005", "rope",
                   "offset, base and convention left out (0, 10000, interleaved): x (1, 6, 8); "
                   "the half convention or base 500000 fails.",
                   inputs={"x": r.uniform((1, 6, 8))}, cotangents={"y": r.uniform((1, 6, 8))},
                   flags=["gradient", "defaults"], omit_defaults=True)


# -- partial rotary and scaled frequencies (issue 25 item 1) --------------------------------

L0 = 16  # a small original context, so that the scaling rules act at positions <= 40
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 4 * L0}
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": L0}


def scaling_cases(r):
    yield value("rope/rotary-dim-001", "rope",
                "rotary_dim 4 of K = 12, half convention, offset 2 (GPT-NeoX's rotary_pct): pairs "
                "(i, i + 2) of the first 4 features with theta_i = 10000^(-2i/4); features 4..11 "
                "pass through; rotating the last 4, or every feature, or theta from K fails.",
                inputs={"x": r.uniform((1, 5, 12))},
                attributes={"offset": 2, "convention": "half", "rotary_dim": 4},
                flags=["rotary-dim", "half"])
    yield value("rope/rotary-dim-002", "rope",
                "rotary_dim 8 of K = 16, interleaved, offset 3 (GPT-J's rotary_dim 64 of 256): "
                "pairs (2i, 2i + 1) of the first 8 features.",
                inputs={"x": r.uniform((2, 4, 16))}, attributes={"offset": 3, "rotary_dim": 8},
                flags=["rotary-dim", "interleaved"])
    yield value("rope/linear-001", "rope",
                "scaling linear, factor 4, positions 5..10, half: theta_i / 4 (position "
                "interpolation); dividing both the positions and the frequencies fails.",
                inputs={"x": r.uniform((1, 6, 8))},
                attributes={"offset": 5, "convention": "half",
                            "scaling": {"rope_type": "linear", "factor": 4.0}},
                flags=["rope-scaling", "half"])
    yield value("rope/llama3-001", "rope",
                "scaling llama3 (factor 8, low 1, high 4, L0 64), K = 12, positions 30..34, half: "
                "pair 0 kept (w = 6.3 < 64/4), pair 1 in the band (w = 29.2), pairs 2..5 (w > 64) "
                "divided by 8; swapping the band edges fails.",
                inputs={"x": r.uniform((1, 5, 12))},
                attributes={"offset": 30, "convention": "half", "scaling": LLAMA3},
                flags=["rope-scaling", "half"])
    yield value("rope/yarn-001", "rope",
                "scaling yarn (factor 8, L0 16), K = 8, positions 20..25: the ramped frequencies "
                "and the attention factor m = 0.1 ln 8 + 1 = 1.208 multiplying cos and sin; "
                "dropping m fails.",
                inputs={"x": r.uniform((1, 6, 8))}, attributes={"offset": 20, "scaling": YARN},
                flags=["rope-scaling", "attention-factor"])
    yield value("rope/dynamic-001", "rope",
                "scaling dynamic (factor 2, max_position_embeddings 8), positions 6..11: seq_len = "
                "offset + T = 12 > 8, base' = 10000 (2 * 12 / 8 - 1)^(8/6); the exponent "
                "K/(K-1) fails.",
                inputs={"x": r.uniform((1, 6, 8))},
                attributes={"offset": 6, "scaling": {"rope_type": "dynamic", "factor": 2.0,
                                                     "max_position_embeddings": 8}},
                flags=["rope-scaling"])
    yield value("rope/longrope-001", "rope",
                "scaling longrope with rotary_dim 6 of K = 8 (Phi-4-mini: partial rotary with "
                "longrope), positions 14..17: seq_len = offset + T = 18 > L0 = 16 picks the long "
                "factors for every row; m = sqrt(1 + ln 4 / ln 16).",
                inputs={"x": r.uniform((1, 4, 8))},
                attributes={"offset": 14, "convention": "half", "rotary_dim": 6,
                            "scaling": {"rope_type": "longrope", "original_max_position_embeddings": L0,
                                        "max_position_embeddings": 4 * L0,
                                        "short_factor": [1.0, 1.5, 2.0],
                                        "long_factor": [1.0, 4.0, 16.0]}},
                flags=["rope-scaling", "rotary-dim", "attention-factor"])
    yield value("rope/scaling-defaults-001", "rope",
                "Only scaling = yarn (factor 4, L0 16) given: offset 0, base 10000, interleaved, "
                "rotary_dim = K and yarn's own defaults (beta_fast 32, beta_slow 1, truncate) "
                "left out, x (1, 6, 8).",
                inputs={"x": r.uniform((1, 6, 8))},
                attributes={"scaling": {"rope_type": "yarn", "factor": 4.0,
                                        "original_max_position_embeddings": L0}},
                flags=["defaults", "rope-scaling"], omit_defaults=True)
    yield error("rope/rotary-dim-odd-001", "rope", "rotary_dim = 5 is odd.",
                inputs={"x": r.uniform((1, 4, 8))}, attributes={"rotary_dim": 5},
                error="ConfigError", mentions=["rotary_dim", "5"])
    yield error("rope/rotary-dim-wide-001", "rope", "rotary_dim = 16 > K = 8.",
                inputs={"x": r.uniform((1, 4, 8))}, attributes={"rotary_dim": 16},
                error="ConfigError", mentions=["rotary_dim", "16"])
    yield error("rope/scaling-key-001", "rope",
                "scaling = {'type': 'linear', 'factor': 2}: 'type' is transformers' old spelling of "
                "rope_type, not a spec key.",
                inputs={"x": r.uniform((1, 4, 8))},
                attributes={"scaling": {"type": "linear", "factor": 2.0}},
                error="ConfigError", mentions=["type"])
    yield error("rope/scaling-type-001", "rope", "scaling rope_type = 'ntk'.",
                inputs={"x": r.uniform((1, 4, 8))},
                attributes={"scaling": {"rope_type": "ntk", "factor": 2.0}},
                error="ConfigError", mentions=["rope_type"])


def grad_scaling_cases(r):
    yield gradient("rope/grad-006", "rope",
                   "rotary_dim 4 of K = 8, half, offset 3: dx = R^T dy on the first 4 features, "
                   "dx = dy on the pass-through features.",
                   inputs={"x": r.uniform((1, 4, 8))},
                   attributes={"offset": 3, "convention": "half", "rotary_dim": 4},
                   cotangents={"y": r.uniform((1, 4, 8))}, flags=["gradient", "rotary-dim"])
    yield gradient("rope/grad-007", "rope",
                   "scaling yarn (factor 8, L0 16), offset 20: dx = m R^T dy, m = 1.208.",
                   inputs={"x": r.uniform((1, 4, 8))}, attributes={"offset": 20, "scaling": YARN},
                   cotangents={"y": r.uniform((1, 4, 8))},
                   flags=["gradient", "rope-scaling", "attention-factor"])
    yield gradient("rope/grad-008", "rope",
                   "scaling llama3 (factor 8, L0 64), rotary_dim 8 of K = 12, interleaved, "
                   "offset 30.",
                   inputs={"x": r.uniform((1, 3, 12))},
                   attributes={"offset": 30, "rotary_dim": 8, "scaling": LLAMA3},
                   cotangents={"y": r.uniform((1, 3, 12))},
                   flags=["gradient", "rope-scaling", "rotary-dim"])
    yield gradient("rope/grad-009", "rope",
                   "Only rotary_dim = 4 given (offset 0, base 10000, interleaved, no scaling), "
                   "x (1, 5, 6): the last 2 features' gradient is dy.",
                   inputs={"x": r.uniform((1, 5, 6))}, attributes={"rotary_dim": 4},
                   cotangents={"y": r.uniform((1, 5, 6))},
                   flags=["gradient", "defaults", "rotary-dim"], omit_defaults=True)
