"""Load the spec's parameters into a class built straight from a notebook, one with neither
``from_spec`` nor ``load_spec_params``: each spec path is matched to one of the instance's
parameters (a torch module's ``state_dict``, or the NumPy arrays among a plain object's
attributes) by shape, the names breaking ties. Only an unambiguous one-to-one match is
used; otherwise ``ParamMapping`` says what could not be told apart.

A 2-D spec weight is ``y = x @ W`` (in, out); a torch ``nn.Linear`` holds (out, in), so a
torch entry of the transposed shape matches too, and is loaded transposed.
"""

from __future__ import annotations

import difflib
import re
import sys

import numpy as np

# the names a notebook gives a spec parameter (its last path part), besides its own
SYNONYMS = {"gamma": ("weight", "scale", "g", "a_2", "alpha", "ln.weight"),
            "beta": ("bias", "shift", "b", "b_2")}


class ParamMapping(Exception):
    """The spec's parameters cannot be matched to the instance's unambiguously."""


def _words(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).strip()


def _similarity(path: str, name: str) -> float:
    last = path.rsplit(".", 1)[-1]
    names = (path, last, *SYNONYMS.get(last, ()))
    w = last.removeprefix("w_").removeprefix("b_")  # w_q -> q (q_proj.weight, W_q.weight)
    kind = "weight" if last.startswith("w") else "bias" if last.startswith("b") else ""
    score = max(difflib.SequenceMatcher(None, _words(n), _words(name)).ratio() for n in names)
    if kind and kind in name.lower() and re.search(rf"(^|[._]){re.escape(w)}([._]|proj|$)",
                                                   name.lower()):
        score += 1.0
    return score


def candidates(instance, kind: str) -> dict:
    """{name: array-like} of the instance's parameters."""
    if kind == "torch":
        return dict(instance.state_dict())
    return {k: a for k, a in vars(instance).items() if isinstance(a, np.ndarray)}


def match(spec_params: dict, theirs: dict, kind: str) -> dict:
    """{spec path: (their name, transposed)}, or ParamMapping."""
    out, taken = {}, set()
    for path, value in spec_params.items():
        shape = tuple(np.shape(value))
        fits = [(n, False) for n, a in theirs.items() if tuple(a.shape) == shape]
        if kind == "torch" and len(shape) == 2 and shape[0] != shape[1]:
            fits += [(n, True) for n, a in theirs.items() if tuple(a.shape) == shape[::-1]]
        elif kind == "torch" and len(shape) == 2:
            fits = [(n, True) for n, _ in fits]  # square: nn.Linear's (out, in) all the same
        fits = [f for f in fits if f[0] not in taken]
        if not fits:
            raise ParamMapping(f"no parameter of shape {shape} for the spec's {path!r} (the "
                               f"instance has {_listing(theirs)})")
        ranked = sorted(fits, key=lambda f: -_similarity(path, f[0]))
        if len(ranked) > 1 and _similarity(path, ranked[0][0]) - _similarity(
                path, ranked[1][0]) < 0.2:
            a, b = sorted((ranked[0][0], ranked[1][0]))
            raise ParamMapping(f"the spec's {path!r} could be {a!r} or {b!r} (same shape); "
                               f"define from_spec(cls, params, **attributes) or "
                               f"load_spec_params(self, params) to say which")
        out[path] = ranked[0]
        taken.add(ranked[0][0])
    return out


def _listing(theirs: dict) -> str:
    return ", ".join(f"{n} {tuple(a.shape)}" for n, a in theirs.items()) or "none"


def load_by_name_and_shape(instance, params: dict, kind: str) -> dict:
    """Load ``params`` (framework arrays by spec path) into the instance; returns
    {spec path: 'their name' (+ ' transposed')} to print."""
    theirs = candidates(instance, kind)
    mapping = match(params, theirs, kind)
    if kind == "torch":
        torch = sys.modules["torch"]  # the instance is a torch module: torch is loaded

        with torch.no_grad():
            for path, (name, transposed) in mapping.items():
                value = params[path].T if transposed else params[path]
                theirs[name].copy_(value)
    else:
        for path, (name, _) in mapping.items():
            setattr(instance, name, np.array(params[path], copy=True))
    return {p: n + (" transposed" if t else "") for p, (n, t) in mapping.items()}
