"""sinusoidal_pe: the fixed sin/cos table of Vaswani et al., interleaved columns."""

from ..oracle.sinusoidal_pe import sinusoidal_pe as oracle
from ._build import Component, Fn, Rng, error, value

COMPONENT = Component("sinusoidal_pe", {
    "sinusoidal_pe": Fn(required=["length", "d_model"], module="positional", inputs=[],
                        attributes={"offset": 0}, returns=["pe"], oracle=oracle),
})


def cases(rng):
    yield value("sinusoidal_pe/basic-001", "sinusoidal_pe",
                "Positions 0..6, D = 8: sin in even columns, cos in odd columns.",
                inputs={}, attributes={"length": 7, "d_model": 8}, flags=["basic"])
    yield value("sinusoidal_pe/offset-001", "sinusoidal_pe",
                "Positions 37..41, D = 12: an implementation that ignores `offset` (or uses "
                "base 1000, or exponent i/D) differs by far more than any tolerance.",
                inputs={}, attributes={"length": 5, "d_model": 12, "offset": 37},
                flags=["offset", "wrong-base", "wrong-exponent"])
    yield value("sinusoidal_pe/wide-001", "sinusoidal_pe",
                "Positions 11..16, D = 16: sin and cos swapped, or all sin columns followed by "
                "all cos columns (concatenated, as some tutorials do), fail.",
                inputs={}, attributes={"length": 6, "d_model": 16, "offset": 11},
                flags=["sin-cos-order"])
    yield value("sinusoidal_pe/odd-001", "sinusoidal_pe",
                "Odd D = 9, positions 5..8: column c uses exponent 2*(c//2)/9 with the actual "
                "D; the last column is a sin with no cos partner (a table built for D = 10 and "
                "cut to 9 columns fails).",
                inputs={}, attributes={"length": 4, "d_model": 9, "offset": 5},
                flags=["odd-width"])
    yield value("sinusoidal_pe/odd-002", "sinusoidal_pe",
                "Odd D = 15, positions 37..39.",
                inputs={}, attributes={"length": 3, "d_model": 15, "offset": 37},
                flags=["odd-width", "offset"])
    yield value("sinusoidal_pe/single-001", "sinusoidal_pe",
                "D = 1, one row at position 3: the single column is sin(3).",
                inputs={}, attributes={"length": 1, "d_model": 1, "offset": 3},
                flags=["odd-width", "minimal"])
    yield value("sinusoidal_pe/empty-001", "sinusoidal_pe",
                "length = 0 gives an empty (0, 8) table, not an error.",
                inputs={}, attributes={"length": 0, "d_model": 8}, flags=["empty"])
    yield value("sinusoidal_pe/large-offset-001", "sinusoidal_pe",
                "Positions 8192..8194, D = 8: angles up to 8194 rad. Computing pos * "
                "10000^(-2i/D) in float32 puts the angles off by up to 2.4e-5 (7.3e-5 through "
                "the Annotated Transformer's exp form) and the values by up to 2.1e-5 (5.8e-5), "
                "beyond the float32 tolerance; compute the angle in float64 and round the "
                "result.",
                inputs={}, attributes={"length": 3, "d_model": 8, "offset": 8192},
                flags=["precision", "offset"])
    yield error("sinusoidal_pe/negative-length-001", "sinusoidal_pe", "length = -1.",
                inputs={}, attributes={"length": -1, "d_model": 8},
                error="ConfigError", mentions=["length"])
    yield error("sinusoidal_pe/zero-width-001", "sinusoidal_pe", "d_model = 0.",
                inputs={}, attributes={"length": 4, "d_model": 0},
                error="ConfigError", mentions=["d_model"])
    yield error("sinusoidal_pe/negative-offset-001", "sinusoidal_pe", "offset = -1.",
                inputs={}, attributes={"length": 4, "d_model": 8, "offset": -1},
                error="ConfigError", mentions=["offset"])
    yield error("sinusoidal_pe/fractional-length-001", "sinusoidal_pe",
                "length = 2.5 is not an integer.",
                inputs={}, attributes={"length": 2.5, "d_model": 8},
                error="ConfigError", mentions=["length"])
    yield from defaults_cases()


# -- defaults (issue 9): vectors that leave every defaulted attribute out ------------------

def defaults_cases():
    Rng(f"{COMPONENT.id}/defaults")  # no random inputs
    yield value("sinusoidal_pe/defaults-001", "sinusoidal_pe",
                "offset left out (default 0): positions 0..4, D = 6.",
                inputs={}, attributes={"length": 5, "d_model": 6}, flags=["defaults"],
                omit_defaults=True)
