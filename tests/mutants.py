"""Deliberately broken backends, to prove the suite can fail.

``mutant(sdpa=broken_sdpa)`` is the NumPy backend with those functions
replaced. ``rejections(m, component)`` runs every value vector of the
component through it and returns, per dtype, how many vectors fail. A planted
bug must fail at least one vector *at every dtype's tolerance*: the mutant runs
in float64 and float32, and its float64 outputs are also judged with the
float16 and bfloat16 tolerances (a bug that hid below bfloat16's tolerance
would pass on a bfloat16 backend).
"""

from __future__ import annotations

import functools

import numpy as np
from attnspec.backends.numpy import NumpyBackend
from attnspec.conformance.runner import Result, call, judge, run_vector
from attnspec.spec.tensor import FLOAT_DTYPES
from attnspec.spec.vectors import default_spec


class Mutant(NumpyBackend):
    name = "mutant"

    def __init__(self, **overrides):
        super().__init__()
        self.overrides = overrides

    def function(self, name, module):
        if name in self.overrides:
            return _keeping_dtype(self.overrides[name])
        return super().function(name, module)


def _keeping_dtype(fn):
    """A planted bug is about values: its float outputs are cast to its float inputs'
    dtype, since the sketches compute in float64 and the suite checks output dtypes too."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        arrays = [*args, *kwargs.values(), *dict(kwargs.get("params") or {}).values()]
        floats = [a.dtype for a in arrays if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        out = fn(*args, **kwargs)
        if not floats:
            return out
        dtype = np.result_type(*floats)

        def cast(y):
            return y.astype(dtype) if isinstance(y, np.ndarray) and y.dtype.kind == "f" else y

        return tuple(map(cast, out)) if isinstance(out, tuple) else cast(out)

    return wrapped


def mutant(**overrides) -> Mutant:
    return Mutant(**overrides)


def composite_mutant(family, methods=None, kernels=None) -> Mutant:
    """The NumPy backend whose composites are ``family`` (a class of
    ``backends/composite``) with ``methods`` replaced, calling ``kernels`` in place of the
    NumPy ones. Every composite of the family calls the mutated ones, as in a backend."""
    from attnspec.backends.composite import Kernels

    k = Kernels("attnspec.backends.numpy")
    mutated = type(f"Mutated{family.__name__}", (family,), dict(methods or {}))(k)
    names = {n for c in family.__mro__ for n in c.__dict__.get("EXPORTS", ())}
    exported = {n: getattr(mutated, n) for n in names}
    for name, fn in {**exported, **(kernels or {})}.items():
        setattr(k, name, fn)
    return Mutant(**exported)


def _vectors(spec, component: str, expect: str, flag: str | None, until_each: bool) -> list:
    """The live ``expect`` vectors of ``component`` (with ``flag``, if given); for a search
    that stops at the first rejection per dtype, smallest first (stress vectors last)."""
    found = [v for v in spec.vectors if v.component == component and v.expect == expect
             and not v.deprecated and (flag is None or flag in v.flags)]
    if until_each:
        found.sort(key=lambda v: ("stress" in v.flags, sum(a.size for a in v.inputs.values())))
    return found


def _open(fails: dict, dtypes, until_each: bool) -> list[str]:
    """The dtypes still to judge: all of them, or with ``until_each`` those not rejected yet."""
    return [d for d in dtypes if not (until_each and fails[d])]


def rejections(backend, component: str, flag: str | None = None, *,
               until_each: bool = False) -> dict[str, int]:
    """Per dtype, how many value vectors of ``component`` (with ``flag``, if given) fail.
    ``until_each``: stop judging a dtype at its first failing vector (counts are then 0 or
    1; enough to prove a bug caught at every dtype, and the stress vectors run only for a
    bug the small vectors miss)."""
    spec = default_spec()
    fails = dict.fromkeys(FLOAT_DTYPES, 0)
    for v in _vectors(spec, component, "value", flag, until_each):
        for dtype in _open(fails, ("float64", "float32"), until_each):
            if dtype in v.dtypes and run_vector(backend, spec, v, dtype, "cpu").status != "pass":
                fails[dtype] += 1
        if "float64" not in v.dtypes or not _open(fails, ("float16", "bfloat16"), until_each):
            continue
        fn = spec.functions[v.function]
        try:
            outputs, inter = call(backend, fn, v.inputs, v.attributes, v.params, "float64", "cpu")
        except Exception:  # a crash is a rejection at every dtype
            outputs = None
        for dtype in ("float16", "bfloat16"):
            if dtype not in v.dtypes:
                continue
            if outputs is None or judge(v, dtype, outputs, inter,
                                        Result(v.id, dtype, "pass")).status != "pass":
                fails[dtype] += 1
    return fails


def assert_rejected(backend, component: str) -> None:
    fails = rejections(backend, component, until_each=True)
    passed = [d for d, n in fails.items() if n == 0]
    assert not passed, (f"a planted bug in {component} passes every vector at {passed}: "
                        f"the vectors do not discriminate it ({fails})")


# -- the catalogue, for benchmarks/tolerances.py ---------------------------------------

def catalogue() -> list[tuple[str, str, object]]:
    """Every planted bug of the project tests as (component, name, backend).

    Found by running each test named ``*rejected*`` or ``*caught*`` of every test module
    that imports this one, with ``assert_rejected`` and ``rejections`` recording their
    backend instead of judging it, so a bug planted there is in the tolerance table
    without being listed twice. (A test that judges its bug otherwise, vector by vector,
    is not harvested.)
    """
    import importlib
    from pathlib import Path
    from unittest import mock

    found: dict[tuple[str, str], object] = {}
    here = Path(__file__).parent
    for path in sorted(here.glob("test_*.py")):
        if "from .mutants import" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(f"{__package__}.{path.stem}")
        for fname, fn in sorted(vars(module).items()):
            if not (fname.startswith("test_") and callable(fn)) or "correct" in fname \
                    or not ("rejected" in fname or "caught" in fname):
                continue
            for label, kwargs in _parametrizations(fn):
                name = label or fname.removeprefix("test_").removesuffix("_is_rejected") \
                    .removesuffix("_is_caught")

                def record(backend, component, *_, name=name, **__):
                    if getattr(backend, "overrides", None):
                        found.setdefault((component, name), backend)
                    return dict.fromkeys(FLOAT_DTYPES, 1)

                with mock.patch.object(module, "assert_rejected", record, create=True), \
                        mock.patch.object(module, "rejections", record, create=True), \
                        np.errstate(all="ignore"):
                    try:
                        fn(**kwargs)
                    except Exception:  # its other checks are its own test's
                        pass
    return [(c, n, b) for (c, n), b in found.items()]


def _parametrizations(fn):
    """(label, kwargs) for each case of ``fn``'s pytest.mark.parametrize marks."""
    cases = [("", {})]
    for mark in reversed(getattr(fn, "pytestmark", [])):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], list(mark.args[1])
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        ids = mark.kwargs.get("ids")
        labels = []
        for i, val in enumerate(values):
            if callable(ids):
                labels.append(str(ids(val)))
            elif ids is not None:
                labels.append(str(ids[i]))
            else:
                labels.append(getattr(val, "__name__", None) or "-".join(map(str, val))
                              if isinstance(val, tuple) else getattr(val, "__name__", str(val)))
        new = []
        for (label, kw), (lab, val) in ((c, lv) for c in cases for lv in zip(labels, values)):
            vals = val if len(names) > 1 else (val,)
            new.append(("-".join(x for x in (label, lab) if x), {**kw, **dict(zip(names, vals))}))
        cases = new
    return cases


# -- gradients: planted bugs in backward passes ------------------------------------------

def gradient_rejections(backend, component: str, *, until_each: bool = False) -> dict[str, int]:
    """Per dtype, how many gradient vectors of ``component`` the backend's ``vjp`` fails:
    run in float64 and float32, and its float64 gradients also judged with the float16 and
    bfloat16 tolerances. Only values are judged (a planted bug is about values).
    ``until_each`` as for ``rejections``."""
    from attnspec.conformance.runner import judge_gradients, vjp

    spec = default_spec()
    fails = dict.fromkeys(FLOAT_DTYPES, 0)
    for v in _vectors(spec, component, "gradient", None, until_each):
        fn = spec.functions[v.function]
        for dtype in ("float64", "float32"):
            low = _open(fails, ("float16", "bfloat16"), until_each) if dtype == "float64" else []
            if dtype not in v.dtypes or not (_open(fails, (dtype,), until_each) or low):
                continue
            try:
                gi, gp, _ = vjp(backend, fn, v.inputs, v.attributes, v.params, v.cotangents,
                                dtype, "cpu")
            except Exception:  # a crash is a rejection
                fails[dtype] += 1
                if dtype == "float64":
                    fails["float16"] += "float16" in v.dtypes
                    fails["bfloat16"] += "bfloat16" in v.dtypes
                continue
            dtypes = [dtype] + (["float16", "bfloat16"] if dtype == "float64" else [])
            for d in dtypes:
                if d in v.dtypes and judge_gradients(v, d, gi, gp,
                                                     Result(v.id, d, "pass")).status != "pass":
                    fails[d] += 1
    return fails
