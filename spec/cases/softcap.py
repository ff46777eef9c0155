"""softcap: y = cap tanh(x / cap), elementwise (Gemma 2's attention and final-logit capping)."""

import numpy as np

from ..oracle.softcap import softcap as oracle
from ._build import Component, Fn, error, gradient, value

COMPONENT = Component("softcap", {
    "softcap": Fn(required=["cap"], module="attention", inputs=["x"], attributes={},
                  returns=["y"], oracle=oracle),
})


def cases(rng):
    yield value("softcap/gemma-attn-001", "softcap",
                "cap = 50 (Gemma 2's attention logits) on integer logits in [-128, 128]: from "
                "the near-linear middle to saturation; a hard clip to [-50, 50] differs by up "
                "to 12.",
                inputs={"x": rng.uniform((3, 8), -128, 128, step=1.0)}, attributes={"cap": 50.0},
                flags=["basic", "softcap"])
    yield value("softcap/gemma-final-001", "softcap",
                "cap = 30 (Gemma 2's final logits) on a (2, 2, 5) input in [-64, 64].",
                inputs={"x": rng.uniform((2, 2, 5), -64, 64, step=0.5)},
                attributes={"cap": 30.0}, flags=["basic", "softcap", "batch"])
    yield value("softcap/small-001", "softcap",
                "cap = 8 with |x| <= 2: close to the identity (y = x - x^3 / 192 + ...): "
                "cap tanh(x) without the division saturates, tanh(x / cap) is 8 times too small.",
                inputs={"x": rng.uniform((4, 4), -2, 2)}, attributes={"cap": 8.0},
                flags=["softcap"])
    yield value("softcap/cap-1-001", "softcap",
                "cap = 1: y = tanh(x), x in [-3, 3].",
                inputs={"x": rng.uniform((6,), -3, 3)}, attributes={"cap": 1.0},
                flags=["softcap", "edge"])
    yield value("softcap/saturated-001", "softcap",
                "|x| up to 49152 with cap = 2.5: y = +-2.5 within rounding (tanh saturates; "
                "computing tanh through exp(2x) overflows).",
                inputs={"x": np.array([32768.0, -49152.0, 4096.0, -8.0, 0.0, 2.5])},
                attributes={"cap": 2.5}, flags=["softcap", "overflow"])
    yield value("softcap/scalar-001", "softcap",
                "A rank-0 input (softcap is elementwise): x = -20, cap = 16.",
                inputs={"x": np.array(-20.0)}, attributes={"cap": 16.0}, flags=["softcap", "edge"])

    x = rng.uniform((2, 3))
    yield error("softcap/cap-zero-001", "softcap", "cap = 0 (x / cap is undefined).",
                inputs={"x": x}, attributes={"cap": 0.0}, error="ConfigError", mentions=["cap"])
    yield error("softcap/cap-negative-001", "softcap", "A negative cap = -30.",
                inputs={"x": x}, attributes={"cap": -30.0}, error="ConfigError", mentions=["cap"])
    yield error("softcap/cap-string-001", "softcap", "cap given as a string '50'.",
                inputs={"x": x}, attributes={"cap": "50"}, error="ConfigError", mentions=["cap"])
    yield error("softcap/int-input-001", "softcap", "Integer logits are refused.",
                inputs={"x": np.array([[1, 2, 3]], dtype=np.int64)}, attributes={"cap": 50.0},
                error="DTypeError", mentions=["x"])


def grad_cases(r):
    yield gradient("softcap/grad-001", "softcap",
                   "cap = 8, x in [-32, 32]: dx = dy (1 - tanh^2(x / cap)), near 0 where "
                   "saturated; forgetting the 1/cap inside tanh's argument fails.",
                   inputs={"x": r.uniform((3, 5), -32, 32, 0.25)}, attributes={"cap": 8.0},
                   cotangents={"y": r.uniform((3, 5))}, flags=["gradient", "softcap",
                                                              "saturation"])
    yield gradient("softcap/grad-002", "softcap",
                   "cap = 50 (Gemma 2), x in [-128, 128] on a (2, 2, 4) input.",
                   inputs={"x": r.uniform((2, 2, 4), -128, 128, 1.0)}, attributes={"cap": 50.0},
                   cotangents={"y": r.uniform((2, 2, 4))}, flags=["gradient", "softcap"])
    yield gradient("softcap/grad-003", "softcap",
                   "cap = 1, |x| <= 2: dx = dy (1 - tanh^2 x).",
                   inputs={"x": r.uniform((4, 3))}, attributes={"cap": 1.0},
                   cotangents={"y": r.uniform((4, 3))}, flags=["gradient", "softcap"])
    yield gradient("softcap/grad-004", "softcap",
                   "cap = 30, a rank-1 x of width 8 in [-64, 64].",
                   inputs={"x": r.uniform((8,), -64, 64, 0.5)}, attributes={"cap": 30.0},
                   cotangents={"y": r.uniform((8,))}, flags=["gradient", "softcap", "rank-1"])
