"""Attributes are checked alike by every component that takes them (spec/NOTATION.md,
"Attributes"): ``eps`` is a finite real number > 0 and ``scale`` a finite real number
or None; a bool, a string, inf or NaN is refused with the spec's ConfigError naming
the attribute, whichever component it is given to."""

import math

import numpy as np
import pytest
from attnspec.spec.errors import ConfigError

pytestmark = pytest.mark.properties


def _x(*shape):
    """Multiples of 2**-6 in [-1, 1]: exact at every dtype."""
    return (np.arange(int(np.prod(shape))).reshape(shape) % 129 - 64) / 64.0


def _qkv():
    return {"q": _x(1, 3, 4), "k": _x(1, 4, 4) / 2, "v": _x(1, 4, 2)}


TAKERS = {
    "layer_norm": ("eps", lambda ops, **a: ops.layer_norm(
        x=_x(2, 4), params={"gamma": np.ones(4), "beta": np.zeros(4)}, **a)),
    "rms_norm": ("eps", lambda ops, **a: ops.rms_norm(x=_x(2, 4), params={"gamma": np.ones(4)},
                                                      **a)),
    "sdpa": ("scale", lambda ops, **a: ops.sdpa(**_qkv(), **a)),
    "topk_attention": ("scale", lambda ops, **a: ops.topk_attention(**_qkv(), top_k=2, **a)),
    "relative_attention": ("scale", lambda ops, **a: ops.relative_attention(
        **_qkv(), max_distance=1, params={"rel_k": _x(3, 4), "rel_v": _x(3, 2)}, **a)),
    "self_attention": ("scale", lambda ops, **a: ops.self_attention(
        x=_x(1, 3, 4), params={"w_q": _x(4, 4) / 2, "w_k": _x(4, 4), "w_v": _x(4, 2)}, **a)),
}
BAD = {"eps": [True, "1e-5", 0.0, -0.25, math.inf, math.nan],
       "scale": [True, False, "0.5", math.inf, -math.inf, math.nan]}
GOOD = {"eps": [0.25, 1e-5, 3], "scale": [None, 0.1, -0.5, 0, 2]}


def _cases(table):
    return [pytest.param(name, value, id=f"{name}-{TAKERS[name][0]}={value!r}")
            for name, (attr, _) in TAKERS.items() for value in table[attr]]


@pytest.mark.parametrize("name, value", _cases(BAD))
def test_every_component_refuses_a_bad_eps_or_scale_with_a_config_error_naming_it(
        ops, name, value):
    attr, run = TAKERS[name]
    with pytest.raises(ConfigError, match=attr):
        run(ops, **{attr: value})


@pytest.mark.parametrize("name, value", _cases(GOOD))
def test_every_component_takes_any_finite_eps_above_zero_or_finite_scale(ops, name, value):
    attr, run = TAKERS[name]
    out = run(ops, **{attr: value})
    out = out if isinstance(out, tuple) else (out,)
    assert all(np.all(np.isfinite(o)) for o in out)
