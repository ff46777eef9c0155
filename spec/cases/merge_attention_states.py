"""merge_attention_states: attention over all keys from the (output, lse) of each part of a
split of the keys (split-KV decoding, cascade / prefix attention, ring attention)."""

import numpy as np

from ..oracle.merge_attention_states import merge_attention_states as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("merge_attention_states", {
    "merge_attention_states": Fn(module="attention", inputs=["outputs", "lses"],
                                 returns=["output", "lse"], oracle=oracle),
})

NAME = "merge_attention_states"


def states(rng, shape, v_width, lo=-4.0, hi=4.0):
    """outputs (*shape, V) and lses (*shape), shape = (N, ...)."""
    step = 2.0 ** -6 if max(-lo, hi) <= 4 else 2.0 ** -4  # exact in bfloat16
    return {"outputs": rng.uniform(shape + (v_width,)), "lses": rng.uniform(shape, lo, hi, step)}


def cases(rng):
    yield value(f"{NAME}/basic-001", NAME,
                "Two parts (N = 2) of a (2, 3) batch of rows, V = 4, lses in [-4, 4]: "
                "output = sum_n softmax(lse)_n o_n, lse = ln sum_n exp(lse_n).",
                inputs=states(rng, (2, 2, 3), 4), flags=["basic"])
    yield value(f"{NAME}/parts-4-001", NAME,
                "Four parts with lses in [-8, 8] over (B, H, T) = (1, 2, 3), V = 3: weights "
                "far from equal; a merge of the first two parts only differs.",
                inputs=states(rng, (4, 1, 2, 3), 3, -8.0, 8.0), flags=["accumulation", "batch"])
    s = states(rng, (3, 5), 4, -2.0, 2.0)
    s["lses"][:] = s["lses"][:1]
    yield value(f"{NAME}/equal-lse-001", NAME,
                "Three parts with equal lses in every row: the output is the mean of the "
                "three outputs and lse = lse_0 + ln 3; the unnormalised sum exp(lse_n - m) o_n "
                "is three times the mean.",
                inputs=s, flags=["unnormalised", "value-term"])
    big = np.array([[1024.0, 1016.0, 1020.0], [-1024.0, -1020.0, -1032.0]])
    yield value(f"{NAME}/large-001", NAME,
                "lses around +1024 (row 0) and -1024 (row 1), differences up to 12: exp(lse_n) "
                "without the maximum subtracted overflows (inf / inf = NaN) or underflows "
                "(0 / 0 = NaN) at every dtype.",
                inputs={"outputs": rng.uniform((3, 2, 2)), "lses": big.T.copy()},
                flags=["overflow", "underflow", "stability"])
    s = states(rng, (3, 2, 4), 3)
    s["lses"][1, 0] = -np.inf     # part 1 empty in batch 0's rows
    s["lses"][2, 1, :2] = -np.inf  # part 2 empty in two rows of batch 1
    s["outputs"][1, 0] = 0.0       # what a kernel writes for an empty part
    yield value(f"{NAME}/empty-part-001", NAME,
                "Fully masked parts (lse = -inf, output 0) among others: they get weight 0 "
                "and the others keep their weights, as if the part were not there.",
                inputs=s, flags=["fully-masked"])
    s = states(rng, (2, 4), 3)
    s["lses"][:, [1, 3]] = -np.inf
    yield value(f"{NAME}/all-empty-001", NAME,
                "Rows 1 and 3 have every part fully masked (lse = -inf): their output is 0 "
                "and their lse -inf, sdpa's convention for a row with nothing to attend "
                "(subtracting the maximum -inf gives NaN).",
                inputs=s, flags=["fully-masked", "edge"])
    s = states(rng, (2, 3), 4)
    s["lses"][1, :2] = -np.inf
    s["outputs"][1, 0] = np.nan
    s["outputs"][1, 1] = [np.inf, -np.inf, np.nan, 1.0]
    yield value(f"{NAME}/empty-part-nan-001", NAME,
                "An empty part (lse = -inf) whose output holds NaN and inf (left uninitialised): "
                "a weight of 0 leaves it out, so every merged output is finite (0 * NaN = NaN "
                "otherwise).",
                inputs=s, flags=["masked-nan", "non-finite"])
    s = states(rng, (1, 2, 3), 4)
    s["lses"][0, 1, 2] = -np.inf
    yield value(f"{NAME}/single-part-001", NAME,
                "N = 1: the merge is the part itself, except its fully masked row (lse = -inf), "
                "whose output is 0.",
                inputs=s, flags=["edge", "fully-masked"])
    yield value(f"{NAME}/rank-2-001", NAME,
                "No row dims at all: outputs (3, 5) and lses (3,) give output (5,) and a "
                "rank-0 lse.",
                inputs=states(rng, (3,), 5), flags=["rank-2", "edge"])
    yield value(f"{NAME}/defaults-001", NAME,
                "The function has no attributes: two parts of (2, 2) rows, V = 3.",
                inputs=states(Rng(f"{NAME}/defaults"), (2, 2, 2), 3), flags=["defaults"],
                omit_defaults=True)

    s = states(rng, (2, 3), 4)
    yield error(f"{NAME}/lses-shape-001", NAME,
                "lses (2, 4) for outputs (2, 3, 4): lses must be outputs.shape[:-1].",
                inputs={**s, "lses": rng.uniform((2, 4))}, error="ShapeError",
                mentions=["lses", "(2, 4)", "(2, 3, 4)"])
    yield error(f"{NAME}/outputs-rank-001", NAME,
                "outputs of rank 1 has no parts axis.",
                inputs={"outputs": rng.uniform((4,)), "lses": rng.uniform(())},
                error="ShapeError", mentions=["outputs", "(4,)"])
    yield error(f"{NAME}/no-parts-001", NAME,
                "N = 0 parts: outputs (0, 3, 4).",
                inputs={"outputs": np.zeros((0, 3, 4)), "lses": np.zeros((0, 3))},
                error="ShapeError", mentions=["outputs", "(0, 3, 4)"])
    yield error(f"{NAME}/lses-dtype-001", NAME,
                "Integer lses are refused.",
                inputs={**s, "lses": np.zeros((2, 3), dtype=np.int64)}, error="DTypeError",
                mentions=["lses"])


def grad_cases(r):
    yield gradient(f"{NAME}/grad-001", NAME,
                   "Two parts, cotangents on the output and the lse: do_n = w_n dO, dlse_n = "
                   "w_n (dO . (o_n - O) + dL).",
                   inputs=states(r, (2, 2, 3), 4),
                   cotangents={"output": r.uniform((2, 3, 4)), "lse": r.uniform((2, 3))},
                   flags=["gradient", "basic"])
    s = states(r, (3, 4), 3)
    s["lses"][2, 1] = -np.inf
    s["lses"][:, 3] = -np.inf
    yield gradient(f"{NAME}/grad-002", NAME,
                   "Three parts, part 2 empty in row 1 and every part empty in row 3: no "
                   "gradient reaches an empty part, never NaN.",
                   inputs=s, cotangents={"output": r.uniform((4, 3)), "lse": r.uniform((4,))},
                   flags=["gradient", "fully-masked"])
    yield gradient(f"{NAME}/grad-003", NAME,
                   "A cotangent on the output only, four parts with lses in [-8, 8]: dlse_n = "
                   "w_n dO . (o_n - O); leaving out the - O fails.",
                   inputs=states(r, (4, 2, 2), 3, -8.0, 8.0),
                   cotangents={"output": r.uniform((2, 2, 3))}, flags=["gradient", "accumulation"])
    yield gradient(f"{NAME}/grad-004", NAME,
                   "A cotangent on the lse only (no attributes to leave out): dlse_n = w_n dL, "
                   "doutputs = 0.",
                   inputs=states(r, (2, 3), 2), cotangents={"lse": r.uniform((3,))},
                   flags=["gradient", "defaults"], omit_defaults=True)
