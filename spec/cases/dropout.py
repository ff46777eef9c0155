"""dropout: inverted dropout with an explicit keep mask (the deterministic form)."""

import numpy as np

from ..oracle.dropout import dropout as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("dropout", {
    "dropout": Fn(required=["p"], module="feedforward", inputs=["x", "keep_mask"],
                  optional=["keep_mask"], attributes={"seed": None}, returns=["y"], oracle=oracle),
})


def cases(rng):
    yield value("dropout/mask-001", "dropout",
                "p = 0.25 with a (3, 4) keep mask: kept entries are x / 0.75, dropped ones 0; "
                "scaling by 0.75 instead, or inverting the mask, fails.",
                inputs={"x": rng.uniform((3, 4)), "keep_mask": rng.bools((3, 4), 0.75)},
                attributes={"p": 0.25}, flags=["basic", "inverted-dropout", "mask-polarity"])
    yield value("dropout/half-001", "dropout",
                "p = 0.5 on a (2, 3, 4) input: kept entries are doubled.",
                inputs={"x": rng.uniform((2, 3, 4)), "keep_mask": rng.bools((2, 3, 4), 0.5)},
                attributes={"p": 0.5}, flags=["basic", "batch"])
    yield value("dropout/p-tenth-001", "dropout",
                "p = 0.1 (not a dyadic number): kept entries are x / 0.9.",
                inputs={"x": rng.uniform((4, 5)), "keep_mask": rng.bools((4, 5), 0.9)},
                attributes={"p": 0.1}, flags=["basic", "scale"])
    yield value("dropout/broadcast-001", "dropout",
                "A (1, 5) keep mask broadcast over the 3 rows of x (the same features dropped "
                "at every position), p = 0.375.",
                inputs={"x": rng.uniform((3, 5)),
                        "keep_mask": np.array([[True, False, True, True, False]])},
                attributes={"p": 0.375}, flags=["broadcast", "mask-polarity"])
    yield value("dropout/p-zero-001", "dropout",
                "p = 0 is the identity: the keep mask (here with False entries) is ignored, "
                "as a Bernoulli(1) draw never drops anything.",
                inputs={"x": rng.uniform((2, 4)),
                        "keep_mask": np.array([[True, False, True, False],
                                               [False, True, True, True]])},
                attributes={"p": 0.0}, flags=["p-zero", "identity"])
    yield value("dropout/p-zero-002", "dropout",
                "p = 0 without a keep mask: the identity, deterministic whatever the seed.",
                inputs={"x": rng.uniform((3, 3))}, attributes={"p": 0.0, "seed": 7},
                flags=["p-zero", "identity", "no-mask"])
    yield value("dropout/all-dropped-001", "dropout",
                "Every entry dropped (mask all False), p = 0.75: y is all zeros.",
                inputs={"x": rng.uniform((2, 3)), "keep_mask": np.zeros((2, 3), dtype=bool)},
                attributes={"p": 0.75}, flags=["edge", "all-dropped"])
    yield value("dropout/all-kept-001", "dropout",
                "Every entry kept (mask all True), p = 0.5: y = 2x (the scale applies even "
                "when nothing is dropped).",
                inputs={"x": rng.uniform((2, 3)), "keep_mask": np.ones((2, 3), dtype=bool)},
                attributes={"p": 0.5}, flags=["edge", "inverted-dropout"])

    x = rng.uniform((2, 3))
    keep = np.ones((2, 3), dtype=bool)
    yield error("dropout/p-one-001", "dropout", "p = 1 would divide by zero; p must be < 1.",
                inputs={"x": x, "keep_mask": keep}, attributes={"p": 1.0},
                error="ConfigError", mentions=["p"])
    yield error("dropout/p-negative-001", "dropout", "p = -0.1 is outside [0, 1).",
                inputs={"x": x, "keep_mask": keep}, attributes={"p": -0.1},
                error="ConfigError", mentions=["p"])
    yield error("dropout/int-mask-001", "dropout",
                "An integer 0/1 keep mask is refused: masks are boolean, True = keep.",
                inputs={"x": x, "keep_mask": np.ones((2, 3), dtype=np.int64)},
                attributes={"p": 0.5}, error="DTypeError", mentions=["keep_mask"])
    yield error("dropout/mask-shape-001", "dropout",
                "A (2, 4) keep mask for a (2, 3) input.",
                inputs={"x": x, "keep_mask": np.ones((2, 4), dtype=bool)},
                attributes={"p": 0.5}, error="ShapeError", mentions=["keep_mask", "(2, 4)"])
    yield from defaults_cases()
    yield from missed_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    yield value("dropout/defaults-001", "dropout",
                "seed left out (default None) with an explicit keep mask, p = 0.5: the mask, "
                "not a seed, decides.",
                inputs={"x": rd.uniform((3, 4)), "keep_mask": rd.bools((3, 4), 0.5)},
                attributes={"p": 0.5}, flags=["defaults"], omit_defaults=True)


# -- missed bugs (issue 9): cases that kill mutation-testing survivors ---------------------

def missed_cases():
    rd = Rng(f"{COMPONENT.id}/missed")
    x, keep = rd.uniform((2, 3)), rd.bools((2, 3), 0.5)
    for n, (p, what) in enumerate([("0.5", "a string"), (False, "a bool (float(False) is a "
                                                        "valid p = 0)")], 1):
        yield error(f"dropout/p-type-00{n}", "dropout", f"p given as {what} is refused.",
                    inputs={"x": x, "keep_mask": keep}, attributes={"p": p},
                    error="ConfigError", mentions=["p"])


def grad_cases(r):
    yield gradient("dropout/grad-001", "dropout",
                   "p = 0.25 with a (3, 4) keep mask: dx = dy / 0.75 where kept, 0 where "
                   "dropped; the gradient uses the forward pass's mask, not a fresh one.",
                   inputs={"x": r.uniform((3, 4)), "keep_mask": r.bools((3, 4), 0.75)},
                   attributes={"p": 0.25}, cotangents={"y": r.uniform((3, 4))},
                   flags=["gradient", "inverted-dropout", "mask-polarity"])
    yield gradient("dropout/grad-002", "dropout",
                   "p = 0.5 on a (2, 3, 4) input: kept gradients are doubled.",
                   inputs={"x": r.uniform((2, 3, 4)), "keep_mask": r.bools((2, 3, 4), 0.5)},
                   attributes={"p": 0.5}, cotangents={"y": r.uniform((2, 3, 4))},
                   flags=["gradient", "inverted-dropout"])
    yield gradient("dropout/grad-003", "dropout",
                   "A (1, 5) keep mask broadcast over 3 rows, p = 0.375.",
                   inputs={"x": r.uniform((3, 5)), "keep_mask": r.bools((1, 5), 0.6)},
                   attributes={"p": 0.375}, cotangents={"y": r.uniform((3, 5))},
                   flags=["gradient", "broadcast"])
    yield gradient("dropout/grad-004", "dropout",
                   "p = 0 (the identity): dx = dy whatever the mask.",
                   inputs={"x": r.uniform((2, 4)), "keep_mask": r.bools((2, 4), 0.5)},
                   attributes={"p": 0.0}, cotangents={"y": r.uniform((2, 4))},
                   flags=["gradient", "p-zero"])
