"""Running one vector on one backend, and judging the result.

Shared by the pytest suite, ``attnspec check`` and the project's own tests,
so a vector means the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from attnspec.spec.compare import compare
from attnspec.spec.errors import ERROR_CLASSES, NotImplementedComponent
from attnspec.spec.tensor import round_to
from attnspec.spec.trace import Trace
from attnspec.spec.vectors import Function, Spec, Vector


@dataclass
class Result:
    id: str
    dtype: str
    status: str  # pass | fail | error | missing
    max_abs_err: float | None = None
    max_ulp: float | None = None
    messages: list[str] = field(default_factory=list)
    component: str = ""
    known_failure: str | None = None

    def as_json(self) -> dict:
        return {"id": self.id, "component": self.component, "dtype": self.dtype,
                "status": self.status, "max_abs_err": _finite_or_none(self.max_abs_err),
                "max_ulp": _finite_or_none(self.max_ulp), "message": "\n".join(self.messages),
                **({"known_failure": self.known_failure} if self.known_failure else {})}

    @classmethod
    def from_json(cls, doc: dict) -> Result:
        """The inverse of :meth:`as_json` (a non-finite error comes back as None)."""
        return cls(doc["id"], doc["dtype"], doc["status"], doc.get("max_abs_err"),
                   doc.get("max_ulp"), doc["message"].split("\n") if doc.get("message") else [],
                   doc.get("component", ""), doc.get("known_failure"))


def _finite_or_none(x):
    return None if x is None or not np.isfinite(x) else float(x)


def convert_inputs(backend, arrays: dict, dtype: str, device: str) -> dict:
    """Float arrays go to ``dtype`` (rounded first, so bf16 inputs are exact); ints and
    bools keep theirs."""
    out = {}
    for k, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind == "f":
            out[k] = backend.asarray(round_to(a, dtype), dtype=dtype, device=device)
        else:
            out[k] = backend.asarray(a, dtype=None, device=device)
    return out


class InputModified(Exception):
    """A spec function wrote into one of its input arrays or parameters."""


def call(backend, fn: Function, inputs: dict, attributes: dict, params: dict | None,
         dtype: str, device: str, trace: bool = True, contract: list | None = None,
         expected: dict | None = None):
    """Call one spec function with NumPy data; returns ({output: ndarray}, {name: ndarray}).

    Raises InputModified when the call changed an input or a parameter in place. With a
    ``contract`` list, each way the raw outputs break the output contract
    (:func:`contract_problems`, against the ``expected`` outputs) is appended to it."""
    impl = backend.function(fn.name, fn.module)
    arrays = convert_inputs(backend, inputs, dtype, device)
    kwargs = {**arrays, **attributes}
    if fn.params:
        kwargs["params"] = convert_inputs(backend, params or {}, dtype, device)
        arrays.update({f"params[{k!r}]": a for k, a in kwargs["params"].items()})
    before = {k: np.array(backend.to_numpy(a), copy=True) for k, a in arrays.items()}
    tr = Trace() if (fn.trace and trace) else None
    if tr is not None:
        kwargs["trace"] = tr
    result = impl(**kwargs)
    changed = [k for k, a in arrays.items()
               if not np.array_equal(backend.to_numpy(a), before[k],
                                     equal_nan=before[k].dtype.kind in "fc")]
    if changed:
        raise InputModified(f"{fn.name} modified its input(s) {', '.join(changed)} in place")
    if len(fn.returns) == 1:
        result = (result,)
    if not isinstance(result, (tuple, list)) or len(result) != len(fn.returns):
        raise TypeError(f"{fn.name} must return {len(fn.returns)} value(s) "
                        f"{fn.returns}, got {type(result).__name__}")
    if contract is not None:
        float_request = any(np.asarray(a).dtype.kind == "f"
                            for a in (*inputs.values(), *(params or {}).values()))
        contract += contract_problems(backend, fn, result, expected,
                                      dtype if float_request else None, device)
    outputs = {name: backend.to_numpy(r) for name, r in zip(fn.returns, result)}
    inter = {k: backend.to_numpy(v) for k, v in tr.items()} if tr is not None else {}
    return outputs, inter


def dtype_name(x) -> str | None:
    """'float32', 'bfloat16', 'int64', 'bool'... for an array of any framework the backends'
    checks know (Backend.dtype_name's default), None for something without a dtype."""
    from attnspec.backends._checks import dtype_name as named

    return None if getattr(x, "dtype", None) is None else named(x)


_SPEC_DTYPE_NAMES = {"float64", "float32", "float16", "bfloat16", "int64", "bool"}
_SPELLING_HINT = (" (a dtype name the spec does not use: if the framework spells its dtypes "
                  "otherwise, override Backend.dtype_name)")


def _unknown_spelling(name: str) -> bool:
    """A dtype name neither the spec's nor NumPy's (``fw.float32``)."""
    if name in _SPEC_DTYPE_NAMES:
        return False
    try:
        np.dtype(name)
    except TypeError:
        return True
    return False


def contract_problems(backend, fn: Function, raw: tuple, expected: dict, dtype: str | None,
                      device: str) -> list[str]:
    """The output contract, checked here once for every backend and golden vector: each
    output is an array of the spec's dtype on the requested device. The spec's dtype is
    the requested one for float outputs of functions with float inputs (``dtype``; None
    for those without, such as sinusoidal_pe), else the vector's own: int64 for ids,
    bool for masks. The device is checked when the backend can tell
    (``Backend.device_of``)."""
    device_of = getattr(backend, "device_of", None)
    name_of = getattr(backend, "dtype_name", dtype_name)
    problems = []
    for name, x in zip(fn.returns, raw):
        got = name_of(x)
        if got is None:
            problems.append(f"output {name!r} is a {type(x).__name__}, not an array")
            continue
        want = dtype if expected[name].dtype.kind == "f" else expected[name].dtype.name
        if want is not None and got != want:
            problems.append(f"output {name!r} is {got}, the spec's dtype here is {want}"
                            + _SPELLING_HINT * _unknown_spelling(got))
        where = device_of(x) if device_of is not None else None
        if where is not None and where != device:
            problems.append(f"output {name!r} is on device {where!r}, requested {device!r}")
    return problems


def run_vector(backend, spec: Spec, v: Vector, dtype: str, device: str) -> Result:
    fn = spec.functions[v.function]
    if v.expect == "gradient":
        return run_gradient_vector(backend, spec, v, dtype, device)
    res = Result(v.id, dtype, "pass", component=v.component)
    try:
        if v.expect == "error":
            return _run_error(backend, fn, v, dtype, device, res)
        contract: list[str] = []
        outputs, inter = call(backend, fn, v.inputs, v.attributes, v.params, dtype, device,
                              contract=contract, expected=v.outputs)
    except NotImplementedComponent as exc:
        res.status, res.messages = "missing", [f"missing: {exc}"]
        return res
    except Exception as exc:  # any crash is a reported error
        res.status = "error"
        res.messages = [f"raised {type(exc).__name__}: {exc}"]
        return res
    return judge(v, dtype, outputs, inter, res, contract)


def judge(v: Vector, dtype: str, outputs: dict, inter: dict, res: Result,
          contract: list[str] = ()) -> Result:
    tol = v.tolerances[dtype]
    worst_abs, worst_ulp = 0.0, 0.0
    failures = list(contract)
    for name, expected in v.outputs.items():
        c = compare(outputs[name], expected, dtype, tol)
        worst_abs, worst_ulp = max(worst_abs, c.max_abs_err), max(worst_ulp, c.max_ulp)
        if not c.ok:
            failures.append(c.describe(f"output {name!r}"))
    first_bad = None
    for name, expected in v.intermediates.items():
        if name not in inter:
            failures.append(f"intermediate {name!r} was not recorded (trace)")
            first_bad = first_bad or name
            continue
        c = compare(inter[name], expected, dtype, tol)
        if not c.ok:
            first_bad = first_bad or name
            failures.append(c.describe(f"intermediate {name!r}"))
    res.max_abs_err, res.max_ulp = worst_abs, worst_ulp
    if failures:
        res.status = "fail"
        head = (f"{v.id} [{dtype}] differs from the spec (rtol={tol['rtol']}, "
                f"atol={tol['atol']})")
        if first_bad:
            head += f"; first diverging intermediate: {first_bad!r}"
        res.messages = [head, *failures]
    return res


def vjp(backend, fn: Function, inputs: dict, attributes: dict, params: dict | None,
        cotangents: dict, dtype: str, device: str) -> tuple[dict, dict, list[str]]:
    """The backend's VJP of one spec function with NumPy data: ({input: ndarray},
    {param path: ndarray}, contract problems: a gradient not of the requested dtype or not
    on the requested device)."""
    call_kwargs = {**convert_inputs(backend, inputs, dtype, device), **attributes}
    if fn.params:
        call_kwargs["params"] = convert_inputs(backend, params or {}, dtype, device)
    cot = convert_inputs(backend, cotangents, dtype, device)
    grad_inputs, grad_params = backend.vjp(fn.name, fn.module, call_kwargs, cot)
    problems = []
    device_of = getattr(backend, "device_of", None)
    name_of = getattr(backend, "dtype_name", dtype_name)
    for group, grads in (("input", grad_inputs), ("param", grad_params)):
        for name, g in grads.items():
            got = name_of(g)
            if got != dtype:
                problems.append(f"gradient of {group} {name!r} is {got}, the spec's dtype "
                                f"here is {dtype}")
            where = device_of(g) if device_of is not None else None
            if where is not None and where != device:
                problems.append(f"gradient of {group} {name!r} is on device {where!r}, "
                                f"requested {device!r}")
    return ({k: backend.to_numpy(g) for k, g in grad_inputs.items()},
            {k: backend.to_numpy(g) for k, g in grad_params.items()}, problems)


def run_gradient_vector(backend, spec: Spec, v: Vector, dtype: str, device: str) -> Result:
    """A gradient vector: the backend's VJP for the vector's cotangents against the
    oracle's gradients, every float input and every parameter, at the vector's tolerances."""
    fn = spec.functions[v.function]
    res = Result(v.id, dtype, "pass", component=v.component)
    try:
        gi, gp, contract = vjp(backend, fn, v.inputs, v.attributes, v.params, v.cotangents,
                               dtype, device)
    except NotImplementedComponent as exc:
        res.status, res.messages = "missing", [f"missing: gradients of {fn.name}: {exc}"]
        return res
    except Exception as exc:  # any crash is a reported error
        res.status = "error"
        res.messages = [f"raised {type(exc).__name__}: {exc}"]
        return res
    return judge_gradients(v, dtype, gi, gp, res, contract)


def judge_gradients(v: Vector, dtype: str, grad_inputs: dict, grad_params: dict, res: Result,
                    contract: list[str] = ()) -> Result:
    tol = v.tolerances[dtype]
    worst_abs, worst_ulp = 0.0, 0.0
    failures = list(contract)
    for group, got in (("inputs", grad_inputs), ("params", grad_params)):
        for name, expected in v.gradients.get(group, {}).items():
            label = f"gradient d{name}" if group == "inputs" else f"gradient of param {name!r}"
            if name not in got:
                failures.append(f"{label}: not returned by the backend's vjp")
                continue
            c = compare(got[name], expected, dtype, tol)
            worst_abs, worst_ulp = max(worst_abs, c.max_abs_err), max(worst_ulp, c.max_ulp)
            if not c.ok:
                failures.append(c.describe(label))
    res.max_abs_err, res.max_ulp = worst_abs, worst_ulp
    if failures:
        res.status = "fail"
        res.messages = [f"{v.id} [{dtype}] gradients differ from the spec (rtol={tol['rtol']}, "
                        f"atol={tol['atol']})", *failures]
    return res


def _run_error(backend, fn, v: Vector, dtype, device, res: Result) -> Result:
    want = ERROR_CLASSES[v.error]
    try:
        call(backend, fn, v.inputs, v.attributes, v.params, dtype, device)
    except NotImplementedComponent:
        raise
    except want as exc:
        msg = str(exc)
        absent = [m for m in v.error_mentions if m not in msg]
        if absent:
            res.status = "fail"
            res.messages = [f"{v.id}: raised {type(exc).__name__} as expected, but the message "
                            f"does not mention {absent}: {msg!r}"]
        return res
    except Exception as exc:
        res.status = "fail"
        res.messages = [f"{v.id}: expected {v.error}, got {type(exc).__name__}: {exc}"]
        return res
    res.status = "fail"
    res.messages = [f"{v.id}: expected {v.error}, but nothing was raised"]
    return res


def require_pass(result: Result) -> None:
    """Fail the current pytest test with the result's messages unless it passed."""
    if result.status != "pass":
        import pytest

        pytest.fail("\n".join(result.messages) or result.status, pytrace=False)
