"""learned_pe: absolute positions looked up in a learned (max_len, D) table."""

import numpy as np

from ..oracle.learned_pe import learned_pe as oracle
from ._build import Component, Fn, error, gradient, value

COMPONENT = Component("learned_pe", {
    "learned_pe": Fn(module="positional", inputs=["positions"], params=True,
                     returns=["pe"], oracle=oracle),
})


def cases(rng):
    yield value("learned_pe/basic-001", "learned_pe",
                "A (2, 5) batch of positions in [0, 8) looked up in an (8, 8) table.",
                inputs={"positions": rng.integers(0, 8, (2, 5))},
                params={"table": rng.weights((8, 8))}, flags=["basic", "off-by-one"])
    yield value("learned_pe/boundary-001", "learned_pe",
                "Positions 0 and max_len - 1 = 5 (both ends of the table) and the rows between.",
                inputs={"positions": np.array([[0, 5, 1, 4, 2, 3]])},
                params={"table": rng.weights((6, 10))}, flags=["boundary", "off-by-one"])
    yield value("learned_pe/arange-001", "learned_pe",
                "Positions 0..6 in order (the usual call), table (12, 16).",
                inputs={"positions": np.arange(7)[None, :]},
                params={"table": rng.weights((12, 16))}, flags=["basic", "off-by-one"])
    yield value("learned_pe/scalar-001", "learned_pe",
                "A rank-0 position gives one row of shape (D,).",
                inputs={"positions": np.array(3)},
                params={"table": rng.weights((5, 9))}, flags=["rank-0"])
    yield value("learned_pe/rank3-001", "learned_pe",
                "Positions of shape (2, 2, 3): any shape, D appended.",
                inputs={"positions": rng.integers(0, 10, (2, 2, 3))},
                params={"table": rng.weights((10, 8))}, flags=["batch", "rank-3"])
    yield value("learned_pe/repeat-001", "learned_pe",
                "Repeated positions read the same row each time.",
                inputs={"positions": np.array([[2, 2, 2], [7, 0, 7]])},
                params={"table": rng.weights((8, 12))}, flags=["repeat"])
    yield error("learned_pe/past-max-len-001", "learned_pe",
                "Position 8 in a table of max_len 8 (no silent clipping or wrap-around).",
                inputs={"positions": np.array([[0, 3, 8]])},
                params={"table": rng.weights((8, 8))},
                error="DomainError", mentions=["positions", "max_len"])
    yield error("learned_pe/negative-001", "learned_pe",
                "Position -1 (no Python-style indexing from the end).",
                inputs={"positions": np.array([[-1, 0, 1]])},
                params={"table": rng.weights((8, 8))},
                error="DomainError", mentions=["positions", "max_len"])
    yield error("learned_pe/float-positions-001", "learned_pe",
                "Float positions are refused: positions are integers.",
                inputs={"positions": np.array([[0.0, 1.0, 2.0]])},
                params={"table": rng.weights((8, 8))},
                error="DTypeError", mentions=["positions"])
    yield error("learned_pe/table-rank-001", "learned_pe",
                "A rank-3 table (1, 8, 8).",
                inputs={"positions": np.array([[0, 1, 2]])},
                params={"table": rng.weights((1, 8, 8))},
                error="ParameterError", mentions=["table"])
    yield error("learned_pe/missing-table-001", "learned_pe",
                "No `table` parameter.",
                inputs={"positions": np.array([[0, 1, 2]])}, params={"w": rng.weights((8, 8))},
                error="ParameterError", mentions=["table"])


def grad_cases(r):
    """Gradient vectors (issue 19's mutation study): a scatter-add into the table."""
    yield gradient("learned_pe/grad-001", "learned_pe",
                   "positions [[0, 3, 3], [3, 1, 0]] into a (5, 4) table: dtable[3] = dpe[0,1] + "
                   "dpe[0,2] + dpe[1,0] (repeated positions accumulate; overwriting keeps one), "
                   "rows 2 and 4, never read, get 0.",
                   inputs={"positions": np.array([[0, 3, 3], [3, 1, 0]])},
                   params={"table": r.weights((5, 4))}, cotangents={"pe": r.uniform((2, 3, 4))},
                   flags=["gradient", "repeat", "accumulation"])
    yield gradient("learned_pe/grad-002", "learned_pe",
                   "positions 0..5 in order (the usual call) from a (8, 6) table: rows 6 and 7 "
                   "get 0 (a gradient for the whole table, not just the rows read).",
                   inputs={"positions": np.arange(6)[None, :]},
                   params={"table": r.weights((8, 6))}, cotangents={"pe": r.uniform((1, 6, 6))},
                   flags=["gradient", "off-by-one"])
    yield gradient("learned_pe/grad-003", "learned_pe",
                   "One position (2) repeated 4 times in a (4,) batch: dtable[2] is the sum of "
                   "the four cotangent rows.",
                   inputs={"positions": np.array([2, 2, 2, 2])},
                   params={"table": r.weights((3, 5))}, cotangents={"pe": r.uniform((4, 5))},
                   flags=["gradient", "repeat", "accumulation"])
    yield gradient("learned_pe/grad-004", "learned_pe",
                   "positions of shape (2, 2, 3) with repeats, (6, 4) table: the scatter-add "
                   "runs over every leading axis.",
                   inputs={"positions": np.array([[[5, 0, 5], [1, 1, 2]], [[0, 5, 4], [2, 2, 2]]])},
                   params={"table": r.weights((6, 4))}, cotangents={"pe": r.uniform((2, 2, 3, 4))},
                   flags=["gradient", "repeat", "rank-3"])
