"""The oracle: the spec's equations evaluated in arbitrary precision (mpmath).

Written straight from the equations with loops over indices, for clarity, not
speed. It exists only to produce expected values for the vector files; no
backend imports it (the NumPy backend in particular, or the suite would compare
the oracle with itself). Run it inside ``with core.precision():`` (50 digits).
"""

import importlib
import pkgutil


def vjps() -> dict:
    """{spec function name: its VJP}, from the ``VJPS`` of every oracle module."""
    out: dict = {}
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        found = getattr(importlib.import_module(f"{__name__}.{m.name}"), "VJPS", {})
        twice = sorted(set(out) & set(found))
        if twice:
            raise RuntimeError(f"VJPs of {twice} defined twice (oracle/{m.name}.py)")
        out.update(found)
    return out
