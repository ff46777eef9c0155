"""embedding: token embedding scaled by sqrt(D), and lm_head, the output projection
(untied W, or tied to the embedding table)."""

import numpy as np

from ..oracle.embedding import embedding as oracle_embedding
from ..oracle.embedding import lm_head as oracle_lm_head
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("embedding", {
    "embedding": Fn(module="embedding", inputs=["ids"], attributes={"scale": True},
                    params=True, returns=["y"], oracle=oracle_embedding),
    "lm_head": Fn(module="embedding", inputs=["x"], attributes={"tied": False},
                  params=True, returns=["logits"], oracle=oracle_lm_head),
})


def cases(rng):
    yield value("embedding/scaled-001", "embedding",
                "ids (2, 3) into a (10, 6) table, scale=True: rows times sqrt(6) (Vaswani et "
                "al. §3.4); a missing scale, or D instead of sqrt(D), fails.",
                inputs={"ids": np.array([[0, 3, 9], [3, 1, 7]])},
                params={"table": rng.weights((10, 6))}, flags=["basic", "sqrt-d-scale"])
    yield value("embedding/scaled-002", "embedding",
                "ids (4,) with repeats into a (5, 4) table, scale=True (factor 2).",
                inputs={"ids": np.array([4, 4, 0, 2])},
                params={"table": rng.weights((5, 4))}, flags=["basic", "repeat"])
    yield value("embedding/unscaled-001", "embedding",
                "scale=False: y is exactly the table rows.",
                inputs={"ids": np.array([[1, 0], [2, 5]])}, attributes={"scale": False},
                params={"table": rng.weights((6, 5))}, flags=["unscaled"])
    yield value("embedding/scalar-id-001", "embedding",
                "A rank-0 id gives one row of shape (D,).",
                inputs={"ids": np.array(2)}, params={"table": rng.weights((3, 8))},
                flags=["rank-0", "edge"])
    yield value("embedding/lm-head-001", "lm_head",
                "logits = x W + b for x (2, 3, 4), W (4, 10), b (10,).",
                inputs={"x": rng.uniform((2, 3, 4))},
                params={"w": rng.weights((4, 10)), "b": rng.weights((10,))},
                flags=["basic", "lm-head"])
    yield value("embedding/lm-head-002", "lm_head",
                "No bias: b is optional; logits = x W for x (3, 4), W (4, 7).",
                inputs={"x": rng.uniform((3, 4))}, params={"w": rng.weights((4, 7))},
                flags=["lm-head", "no-bias"])
    yield value("embedding/tied-001", "lm_head",
                "tied=True: logits = x table^T with table (9, 4) (L = 9, D = 4).",
                inputs={"x": rng.uniform((2, 3, 4))}, attributes={"tied": True},
                params={"table": rng.weights((9, 4))}, flags=["tied-embeddings", "lm-head"])
    yield value("embedding/tied-002", "lm_head",
                "tied=True with a square (4, 4) table and a bias: using the table without "
                "transposing it gives wrong values rather than a shape error.",
                inputs={"x": rng.uniform((3, 4))}, attributes={"tied": True},
                params={"table": rng.weights((4, 4)), "b": rng.weights((4,))},
                flags=["tied-embeddings", "transpose", "lm-head"])

    table = rng.weights((5, 4))
    yield error("embedding/out-of-range-001", "embedding", "id 5 in a vocabulary of L = 5.",
                inputs={"ids": np.array([[0, 5]])}, params={"table": table},
                error="DomainError", mentions=["ids", "L=5"])
    yield error("embedding/negative-001", "embedding",
                "id -1 is refused (no Python-style wrap-around to the last row).",
                inputs={"ids": np.array([1, -1])}, params={"table": table},
                error="DomainError", mentions=["ids", "L=5"])
    yield error("embedding/float-ids-001", "embedding", "Float ids are refused.",
                inputs={"ids": np.array([0.0, 1.0])}, params={"table": table},
                error="DTypeError", mentions=["ids"])
    yield error("embedding/lm-head-shape-001", "lm_head", "W of shape (5, 7) for D = 4.",
                inputs={"x": rng.uniform((2, 4))}, params={"w": np.zeros((5, 7))},
                error="ParameterError", mentions=["w", "(5, 7)"])
    yield error("embedding/tied-missing-001", "lm_head",
                "tied=True but no table in params (a W is not used when tied).",
                inputs={"x": rng.uniform((2, 4))}, attributes={"tied": True},
                params={"w": np.zeros((4, 7))}, error="ParameterError", mentions=["table"])
    yield from defaults_cases()
    yield from missed_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("embedding/defaults-001", "embedding",
                "scale left out (default True): rows times sqrt(6).",
                inputs={"ids": rd.integers(0, 8, (2, 3))}, params={"table": rd.weights((8, 6))},
                flags=["defaults"], omit_defaults=True)
    yield value("embedding/defaults-002", "lm_head",
                "tied left out (default False): logits = x w + b with w (4, 6).",
                inputs={"x": rd.uniform((2, 3, 4))},
                params={"w": rd.weights((4, 6)), "b": rd.weights((6,), 0.5)},
                flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    yield value("embedding/lm-head-rank1-001", "lm_head",
                "A rank-1 x (D = 4,) gives logits of shape (L = 6,) (x @ w + b, no batch axes).",
                inputs={"x": rd.uniform((4,))},
                params={"w": rd.weights((4, 6)), "b": rd.weights((6,), 0.5)},
                flags=["edge", "rank"])


def grad_cases(r):
    yield gradient("embedding/grad-001", "embedding",
                   "ids (2, 3) = [[1, 4, 1], [1, 0, 4]] into a (6, 4) table, scale=True: a "
                   "scatter-add, dtable[1] = 2 (dy[0,0] + dy[0,2] + dy[1,0]); writing each row's "
                   "gradient over the last one (table[ids] = dy) instead of accumulating fails, "
                   "and rows 2, 3, 5 (never looked up) get 0. The ids get no gradient.",
                   inputs={"ids": np.array([[1, 4, 1], [1, 0, 4]])},
                   params={"table": r.weights((6, 4))}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "repeat", "accumulation", "sqrt-d-scale"])
    yield gradient("embedding/grad-002", "embedding",
                   "scale=False, ids (5,) = [2, 2, 2, 0, 3] into a (4, 3) table: dtable[2] is "
                   "the sum of three cotangent rows, no sqrt(D) factor.",
                   inputs={"ids": np.array([2, 2, 2, 0, 3])}, attributes={"scale": False},
                   params={"table": r.weights((4, 3))}, cotangents={"y": r.uniform((5, 3))},
                   flags=["gradient", "repeat", "unscaled"])
    yield gradient("embedding/grad-003", "lm_head",
                   "logits = x W + b for x (2, 3, 4), W (4, 7): dW = x^T dlogits and db = sum "
                   "dlogits over all 6 tokens, dx = dlogits W^T.",
                   inputs={"x": r.uniform((2, 3, 4))},
                   params={"w": r.weights((4, 7)), "b": r.weights((7,))},
                   cotangents={"logits": r.uniform((2, 3, 7))}, flags=["gradient", "lm-head"])
    yield gradient("embedding/grad-004", "lm_head",
                   "tied=True, table (9, 4), no bias: dtable = dlogits^T x of shape (L, D) = "
                   "(9, 4), the transpose of the untied dW; dx = dlogits table.",
                   inputs={"x": r.uniform((2, 3, 4))}, attributes={"tied": True},
                   params={"table": r.weights((9, 4))},
                   cotangents={"logits": r.uniform((2, 3, 9))},
                   flags=["gradient", "tied-embeddings", "lm-head", "no-bias"])
    yield gradient("embedding/grad-005", "lm_head",
                   "tied=True with a square (4, 4) table and a bias: dtable = dlogits^T x; the "
                   "untied layout x^T dlogits has the same shape and wrong values.",
                   inputs={"x": r.uniform((3, 4))}, attributes={"tied": True},
                   params={"table": r.weights((4, 4)), "b": r.weights((4,))},
                   cotangents={"logits": r.uniform((3, 4))},
                   flags=["gradient", "tied-embeddings", "transpose", "lm-head"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def grad_study_cases(r):
    yield gradient("embedding/grad-006", "embedding",
                   "scale left out (True: sqrt(D) = 2 for D = 4), ids [[3, 0, 3], [1, 3, 2]]: "
                   "dtable[3] = 2 (dy[0,0] + dy[0,2] + dy[1,1]); an unscaled default fails.",
                   inputs={"ids": np.array([[3, 0, 3], [1, 3, 2]])},
                   params={"table": r.weights((5, 4))}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "defaults", "repeat"], omit_defaults=True)
    yield gradient("embedding/grad-007", "lm_head",
                   "tied left out (False): W (4, 6) and b; a tied default has no table.",
                   inputs={"x": r.uniform((2, 4))},
                   params={"w": r.weights((4, 6)), "b": r.weights((6,))},
                   cotangents={"logits": r.uniform((2, 6))}, flags=["gradient", "defaults"],
                   omit_defaults=True)
