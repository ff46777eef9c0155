"""``attnspec check FILE.py:NAME --component C``: a user's own function or class
against every vector of one component, without writing a backend.

A **function** is called with the spec function's required inputs positionally
(in the order of the spec page), the optional inputs a vector gives and the
attributes it accepts as keywords, and the parameters either as ``params=`` (a
dict by canonical path) when it has such an argument, or one keyword per
parameter whose name is the path with dots as underscores (``w_q``,
``ffn_w1``). It may return one array (compared with the first output), a
tuple (compared in order) or a dict (compared by name).

A vector that needs something the user's code does not take (an attribute set
to a non-default value, such as ``scale=1.0`` or ``variant='annotated'``, or an
optional input such as ``bias``, when the signature has no such argument and no
``**kwargs``) is reported as ``SKIP`` with the reason, not as a failure: a
function without a ``bias`` argument can still be a correct attention for the
vectors it can take.

A **class** is constructed with the attributes its ``__init__`` names, then,
if it has one, ``load_spec_params(params)`` receives the parameters (a dict by
canonical path, framework arrays), and the instance is called like a function.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attnspec.spec.compare import compare
from attnspec.spec.errors import ConfigError
from attnspec.spec.vectors import Spec, Vector

from .runner import convert_inputs


def load_target(target: str):
    """``path/to/file.py:name`` -> the object (the file is imported as a module)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise ConfigError(f"target must be FILE.py:NAME, got {target!r}")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"no such file {str(file)!r} (target {target!r})")
    spec = importlib.util.spec_from_file_location(f"attnspec_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    obj = getattr(module, name, None)
    if obj is None:
        raise ConfigError(f"{str(file)!r} defines no {name!r}")
    return obj


def _accepts(sig: inspect.Signature, name: str) -> bool:
    return name in sig.parameters or any(
        p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def _kwargs_for(sig: inspect.Signature, attributes: dict, defaults: dict) -> tuple[dict, list]:
    kwargs, unsupported = {}, []
    for k, val in attributes.items():
        if _accepts(sig, k):
            kwargs[k] = val
        elif val != defaults.get(k, object()):
            unsupported.append(f"{k}={val!r}")
    return kwargs, unsupported


@dataclass
class CheckResult:
    id: str
    ok: bool
    max_abs_err: float
    lines: list[str]
    skipped: bool = False


def check_vector(obj, fn, v: Vector, backend, dtype: str) -> CheckResult:
    inputs = convert_inputs(backend, v.inputs, dtype, "cpu")
    params = convert_inputs(backend, v.params, dtype, "cpu") if v.params else {}
    target = obj
    if inspect.isclass(obj):
        init_kwargs, unsupported = _kwargs_for(inspect.signature(obj), v.attributes, fn.attributes)
        target = obj(**init_kwargs)
        if params and hasattr(target, "load_spec_params"):
            target.load_spec_params(params)
            params = {}
        attributes = {}
    else:
        attributes = v.attributes
        unsupported = []
    sig = inspect.signature(target)
    kwargs, more = _kwargs_for(sig, attributes, fn.attributes)
    unsupported += more
    required = [n for n in fn.inputs if n not in fn.optional]
    args = [inputs[n] for n in required if n in inputs]
    for n in fn.optional:
        if n in inputs:
            if _accepts(sig, n):
                kwargs[n] = inputs[n]
            else:
                unsupported.append(f"input {n}")
    if unsupported:
        return CheckResult(v.id, False, 0.0, [f"needs {', '.join(unsupported)}, which your "
                                              f"code does not take"], skipped=True)
    if params:
        if "params" in sig.parameters:
            kwargs["params"] = params
        else:
            for path, arr in params.items():
                kwargs[path.replace(".", "_")] = arr
    result = target(*args, **kwargs)
    return _judge(fn, v, result, backend, dtype)


def _judge(fn, v: Vector, result, backend, dtype: str) -> CheckResult:
    if isinstance(result, dict):
        got = {k: result[k] for k in fn.returns if k in result}
    elif isinstance(result, (tuple, list)):
        got = dict(zip(fn.returns, result))
    else:
        got = {fn.returns[0]: result}
    lines, ok, worst = [], True, 0.0
    for name, expected in v.outputs.items():
        if name not in got:
            lines.append(f"{name}: not returned (not checked)")
            continue
        c = compare(backend.to_numpy(got[name]), expected, dtype, v.tolerances[dtype])
        worst = max(worst, c.max_abs_err)
        if not c.ok:
            ok = False
            if c.problem:
                lines.append(f"{name}: {c.problem}")
            else:
                lines.append(f"{name}: max abs err {c.max_abs_err:.3g}; at index "
                             f"{c.worst_index} the spec expects {c.expected_at_worst:.9g}, "
                             f"got {c.got_at_worst:.9g}")
    if not any(n in got for n in v.outputs):
        ok = False
    return CheckResult(v.id, ok, worst, lines)


def run_check(target: str, component: str, spec: Spec, framework: str = "numpy",
              dtype: str = "float64", function: str | None = None, errors: bool = False,
              out=None) -> int:
    from attnspec.backends import get_backend

    out = out or sys.stdout  # looked up now: a default bound at import misses redirection

    if component not in spec.components:
        raise ConfigError(f"unknown component {component!r}; see `attnspec list`")
    names = spec.components[component]
    function = function or (component if component in names else names[0])
    if function not in names:
        raise ConfigError(f"component {component!r} has functions {names}, not {function!r}")
    fn = spec.functions[function]
    obj = load_target(target)
    backend = get_backend(framework)
    t0 = time.perf_counter()
    vectors = [v for v in spec.vectors if v.function == function and not v.deprecated
               and dtype in v.dtypes and (v.expect == "value" or errors)]
    passed = failed = skipped = 0
    print(f"attnspec check {target} against {component}.{function} "
          f"({framework}, {dtype}): {len(vectors)} vectors", file=out)
    for v in vectors:
        skip = False
        if v.expect == "error":
            ok, skip, line = _check_error(obj, fn, v, backend, dtype)
            lines = [line]
        else:
            try:
                r = check_vector(obj, fn, v, backend, dtype)
                ok, skip, lines = r.ok, r.skipped, r.lines
                lines = lines or [f"max abs err {r.max_abs_err:.3g}"]
            except Exception as exc:  # noqa: BLE001 - the user's code may raise anything
                ok, lines = False, [f"raised {type(exc).__name__}: {exc}"]
        if skip:
            skipped += 1
            print(f"SKIP  {v.id:36s} {lines[0]}", file=out)
            continue
        passed += ok
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {v.id:36s} {lines[0]}", file=out)
        for line in lines[1:]:
            print(f"      {'':36s} {line}", file=out)
        if not ok:
            print(f"      {'':36s} ({v.description})", file=out)
    tail = f", {skipped} skipped (they need an argument your code does not take)" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail} ({time.perf_counter() - t0:.2f} s)", file=out)
    return 0 if failed == 0 and passed > 0 else 1


def _check_error(obj, fn, v, backend, dtype) -> tuple[bool, bool, str]:
    """(ok, skipped, line) for an error vector: any exception counts as refusing."""
    try:
        r = check_vector(obj, fn, v, backend, dtype)
    except Exception as exc:  # noqa: BLE001
        return True, False, f"raised {type(exc).__name__} (the spec raises {v.error})"
    if r.skipped:
        return False, True, r.lines[0]
    return False, False, f"raised nothing; the spec raises {v.error}"

