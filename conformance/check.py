"""``attnspec check FILE.py:NAME --component C``: a user's own function or class
against every vector of one component, without writing a backend.

A **function** is called with the spec function's required inputs positionally
(in the order of the spec page), the optional inputs a vector gives and the
attributes it accepts as keywords, and the parameters either as ``params=`` (a
dict by canonical path) when it has such an argument, or one keyword per
parameter whose name is the path with dots as underscores (``w_q``,
``ffn_w1``). A function that takes ``trace`` gets an :class:`attnspec.spec.trace.Trace`;
what it records (``trace.record("ffn.output", y)``) is compared too, and a failure
names the first diverging intermediate, as ``attnspec verify`` does. It may
return one array (compared with the first output; ``[y]`` counts as ``y``), a
tuple or list (compared in order) or a dict (compared by name).

A **class** is built, for every vector, by ``NAME.from_spec(params, **attributes)``
when it has that classmethod; otherwise by ``NAME(**attributes)`` (the spec
attributes its ``__init__`` names, as keywords) followed, when it has the method,
by ``instance.load_spec_params(params)`` ({canonical path: framework array}).
The instance is then called like a function, with the signature of its real
call: ``forward`` for a ``torch.nn.Module`` (put in ``.eval()`` mode and run under
``torch.inference_mode()``), ``call`` for a Keras layer (with ``training=False``
when it takes it). While a torch or Keras class is built, the framework's default
float dtype is the one under test, so ``nn.Linear`` / ``add_weight`` weights match.

A vector that needs something the user's code does not take (an attribute set
to a non-default value, an optional input such as ``bias``, or a parameter) is
``SKIP``, decided from the signatures before anything is built; when most of
the selected vectors are skipped the run fails, saying what to add.
``--variant KEY=VALUE`` and ``-k EXPR`` select the vectors to run instead.

With ``--errors`` an error vector passes only when the spec's own class (or a
subclass) is raised (``from attnspec.spec.errors import ShapeError``).

With ``--grad`` the target is a hand-written **backward function**, run against
the component's gradient vectors (``expect: "gradient"``). It gets the cotangents
first, one positional argument per output of the spec function in return order
(an output the vector does not differentiate: zeros; it may take only the first
ones, and a vector with a nonzero cotangent it does not take is ``SKIP``), then
what a forward function gets: ``layer_norm_backward(dy, x, gamma, beta, eps)``,
``sdpa_backward(d_output, d_weights, q, k, v, mask=None, bias=None, scale=None)``.
A function with a ``cotangents`` argument gets ``{output: cotangent}`` instead
(the signature of a backend's ``<name>_vjp``); one that names a forward output
(``y``, ``weights``) gets the spec's value of it by keyword (a saved tensor). It returns the gradient of every
float input given and every parameter: a tuple (the inputs in the spec's order,
then the parameters), a dict by input name / parameter path, or
``(grad_inputs, grad_params)``. How many cotangents it takes is read from its
signature once; a forward function is a CheckError.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import inspect
import re
import sys
import textwrap
import time
import traceback
import types
from collections import Counter, defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from attnspec.spec.errors import ERROR_CLASSES, ConfigError
from attnspec.spec.trace import Trace
from attnspec.spec.vectors import Function, Spec, Vector

from .runner import Result, convert_inputs, judge, judge_gradients

# Frameworks a user's file may be written in, by top-level module -> --framework name.
FRAMEWORK_OF_MODULE = {"numpy": "numpy", "torch": "torch", "tensorflow": "tensorflow", "jax": "jax",
                       "keras": "tensorflow", "tf_keras": "tensorflow"}


class CheckError(ConfigError):
    """The check cannot run at all (bad target, file, component, dtype or selection)."""


DEFAULT_TIMEOUT = 20.0  # seconds per vector
DEFAULT_MEMORY_GIB = 4.0  # what the user's code may allocate beyond its framework


# ---- loading the user's file ------------------------------------------------------------------

@dataclass
class Target:
    obj: object
    name: str
    file: Path
    module: types.ModuleType
    kind: str  # function | class | torch | keras
    said: set = field(default_factory=set)  # notes given once a run (aliases, mappings)

    @property
    def is_class(self) -> bool:
        return self.kind != "function"


def load_target(target: str) -> Target:
    """``path/to/file.py:name`` -> the object, importing the file as a module. Any failure
    (no file, a syntax error, an import error, ``sys.exit`` at import) is one CheckError."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise CheckError(f"target must be FILE.py:NAME or NOTEBOOK.ipynb:NAME, got {target!r}")
    file = Path(path)
    if not file.is_file():
        raise CheckError(f"no such file {str(file)!r} (target {target!r})")
    if file.suffix == ".ipynb":
        from .notebook import notebook_module

        module = notebook_module(file, f"attnspec_user_{file.stem}")
    else:
        module = _import_file(file)
    obj = getattr(module, name, None)
    if obj is None:
        raise CheckError(f"{str(file)!r} defines no {name!r}")
    if not callable(obj):
        raise CheckError(f"{name!r} in {str(file)!r} is a {type(obj).__name__}, not a function "
                         f"or class")
    kind = (_class_kind(obj) or "class") if inspect.isclass(obj) else "function"
    return Target(obj, name, file, module, kind)


def _import_file(file: Path) -> types.ModuleType:
    mod_name = f"attnspec_user_{file.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, file)
    if spec is None or spec.loader is None:
        raise CheckError(f"{str(file)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look their module up here
    # its folder stays on sys.path: a function may import a sibling module when called
    folder = str(file.parent.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(mod_name, None)
        text = (exc.text or "").strip()
        raise CheckError(f"{exc.filename or file}, line {exc.lineno}: {type(exc).__name__}: "
                         f"{exc.msg}" + (f": {text}" if text else "")) from None
    except SystemExit as exc:
        sys.modules.pop(mod_name, None)
        raise CheckError(f"{file}{_line_in(exc, file)} called sys.exit({exc.code!r}) while being "
                         f"imported; put script code under `if __name__ == \"__main__\":`") from None
    except Exception as exc:  # the user's module may raise anything
        sys.modules.pop(mod_name, None)
        hint = ""
        if isinstance(exc, ModuleNotFoundError):
            hint = f" (is {exc.name!r} installed in this environment?)"
        raise CheckError(f"importing {file} failed{_line_in(exc, file)}: "
                         f"{type(exc).__name__}: {exc}{hint}") from None
    return module


def _line_in(exc: BaseException, file: Path) -> str:
    """' at line N': the last frame of the traceback that is in the user's file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve() == file.resolve()]
    return f" at line {frames[-1].lineno}" if frames else ""


def _class_kind(cls) -> str | None:
    for c in cls.__mro__:
        top = (c.__module__ or "").split(".")[0]
        if c.__name__ == "Module" and top == "torch":
            return "torch"
        if c.__name__ == "Layer" and top in ("keras", "tf_keras", "tensorflow"):
            return "keras"
    return None


def frameworks_used(t: Target) -> set[str]:
    """The --framework names of the frameworks the user's file imports."""
    found = set()
    for value in vars(t.module).values():
        mod = value.__name__ if isinstance(value, types.ModuleType) else getattr(
            value, "__module__", None)
        top = (mod or "").split(".")[0]
        if top in FRAMEWORK_OF_MODULE:
            found.add(FRAMEWORK_OF_MODULE[top])
    if t.kind in ("torch", "keras"):
        found.add("torch" if t.kind == "torch" else "tensorflow")
    return found


# ---- how a vector is handed over: decided from signatures, before anything is built ---------

@dataclass
class Plan:
    init: dict = field(default_factory=dict)  # attributes for the constructor / from_spec
    call: dict = field(default_factory=dict)  # attributes for the call
    optional: list = field(default_factory=list)  # optional inputs passed by keyword
    params_to: str = ""  # from_spec | load_spec_params | params | keywords | ""
    trace: bool = False
    training: bool = False  # a Keras call that takes ``training``
    unsupported: list = field(default_factory=list)  # (what, value) pairs: a SKIP
    aliases: dict = field(default_factory=dict)  # spec attribute -> the __init__ name used
    mapping: dict = field(default_factory=dict)  # spec param path -> the instance's name


def _accepts(sig: inspect.Signature, name: str) -> bool:
    return name in sig.parameters or any(
        p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def _takes(t: Target, init_sig: inspect.Signature, name: str) -> bool:
    """An __init__ takes the attributes it names (its ``**kwargs`` go to a framework base
    class: nn.Module, keras Layer); from_spec(params, **attributes) takes every one."""
    return _accepts(init_sig, name) if hasattr(t.obj, "from_spec") else name in init_sig.parameters


def _drop_self(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def call_signature(t: Target) -> inspect.Signature:
    """The signature the target is really called with (forward / call / __call__)."""
    if not t.is_class:
        return inspect.signature(t.obj)
    method = {"torch": "forward", "keras": "call"}.get(t.kind, "__call__")
    if not any(method in c.__dict__ for c in t.obj.__mro__[:-1]):
        raise CheckError(f"instances of {t.name} cannot be called: define {method}(...)")
    return _drop_self(inspect.signature(getattr(t.obj, method)))


def constructor_signature(t: Target) -> inspect.Signature:
    # a classmethod read from the class is bound: its signature has no ``cls``
    return inspect.signature(t.obj.from_spec if hasattr(t.obj, "from_spec") else t.obj)


def plan_vector(t: Target, fn: Function, v: Vector) -> Plan:
    p = Plan()
    call_sig = call_signature(t)
    init_sig = constructor_signature(t) if t.is_class else None
    for k, val in v.attributes.items():
        alias = _alias(init_sig, k) if init_sig is not None and not hasattr(
            t.obj, "from_spec") else None
        if init_sig is not None and _takes(t, init_sig, k):
            p.init[k] = val
        elif alias:
            p.init[alias] = val
            p.aliases[k] = alias
        elif _accepts(call_sig, k):
            p.call[k] = val
        elif val != fn.attributes.get(k, object()):
            p.unsupported.append((k, val))
    for n in fn.optional:
        if n in v.inputs:
            if _accepts(call_sig, n):
                p.optional.append(n)
            else:
                p.unsupported.append(("input " + n, None))
    if v.params:
        p.params_to = _params_route(t, call_sig, v, p)
    p.trace = fn.trace and "trace" in call_sig.parameters
    p.training = t.kind == "keras" and "training" in call_sig.parameters
    return p


# the names notebooks give the spec's attributes and sizes in a constructor
ALIASES = {"num_heads": ("n_head", "n_heads", "nhead", "h", "heads", "num_attention_heads"),
           "eps": ("epsilon", "layer_norm_eps", "norm_eps"),
           "max_seq_len": ("seq_len", "max_len", "block_size", "max_position_embeddings"),
           "num_kv_heads": ("n_kv_heads", "num_key_value_heads")}
SIZES = {"d_model": ("d_model", "dim_model", "embed_dim", "hidden_size", "n_embd", "dim",
                     "features", "normalized_shape", "d_embed", "size")}


def _alias(init_sig: inspect.Signature, attribute: str) -> str | None:
    return next((a for a in ALIASES.get(attribute, ()) if a in init_sig.parameters), None)


def _sizes(ctor_sig: inspect.Signature, fn: Function, v: Vector, plan: Plan) -> dict:
    """Required constructor sizes (``d_model``, ``embed_dim``...) read from the first
    input's last axis."""
    first = v.inputs.get(fn.inputs[0]) if fn.inputs else None
    out = {}
    for name, p in ctor_sig.parameters.items():
        if p.default is p.empty and name not in plan.init and first is not None and \
                first.ndim and name in SIZES["d_model"]:
            out[name] = int(first.shape[-1])
    return out


def _params_route(t: Target, call_sig, v: Vector, p: Plan) -> str:
    if t.is_class and hasattr(t.obj, "from_spec"):
        return "from_spec"
    if t.is_class and hasattr(t.obj, "load_spec_params"):
        return "load_spec_params"
    if "params" in call_sig.parameters:
        return "params"
    if t.is_class:
        return "state"  # mapped onto the instance's parameters by name and shape
    for path in v.params:
        if not _accepts(call_sig, _keyword(path)):
            p.unsupported.append(("parameter " + _keyword(path), None))
    return "keywords"


def _keyword(path: str) -> str:
    return path.replace(".", "_")


# ---- building and calling ---------------------------------------------------------------------

class ConstructorFailed(Exception):
    def __init__(self, exc: BaseException):
        super().__init__(str(exc))
        self.exc = exc


@contextmanager
def default_float(kind: str, dtype: str):
    """The framework's default float dtype set to ``dtype`` while a class is built."""
    if kind == "torch" and dtype in ("float32", "float64"):
        torch = sys.modules["torch"]
        before = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            yield
        finally:
            torch.set_default_dtype(before)
    elif kind == "keras":
        config = sys.modules["keras"].config
        before = config.floatx(), config.dtype_policy()  # the policy caches floatx once read
        config.set_floatx(dtype)
        config.set_dtype_policy(dtype)
        try:
            yield
        finally:
            config.set_floatx(before[0])
            config.set_dtype_policy(before[1])
    else:
        yield


def construct(t: Target, fn: Function, v: Vector, plan: Plan, params: dict, dtype: str):
    """The instance for one vector. A constructor that cannot take what check passes is a
    CheckError (said once); one that raises is ConstructorFailed (a failed vector)."""
    ctor_sig = constructor_signature(t)
    if not hasattr(t.obj, "from_spec"):
        sizes = _sizes(ctor_sig, fn, v, plan)
        plan.init.update(sizes)
        plan.aliases.update({k: f"{k}={val} (from the input's shape)" for k, val in sizes.items()})
    try:
        ctor_sig.bind(*([params] if hasattr(t.obj, "from_spec") else []), **plan.init)
    except TypeError as exc:
        raise CheckError(f"cannot build {t.name}{ctor_sig}: {exc}. "
                         f"{constructor_help(t, fn, v, plan)}") from None
    try:
        with default_float(t.kind, dtype):
            if hasattr(t.obj, "from_spec"):
                instance = t.obj.from_spec(params, **plan.init)
            else:
                instance = t.obj(**plan.init)
                if plan.params_to == "load_spec_params":
                    instance.load_spec_params(params)
        if plan.params_to == "state":
            from .check_state import load_by_name_and_shape

            plan.mapping = load_by_name_and_shape(instance, params, t.kind)
    except (Exception, SystemExit) as exc:
        raise ConstructorFailed(exc) from exc
    if t.kind == "torch":
        instance.eval()
    return instance


def constructor_help(t: Target, fn: Function, v: Vector, plan: Plan) -> str:
    """What ``check`` passes to a class, and how (printed once, when building it fails)."""
    args = ", ".join(f"{k}={val!r}" for k, val in plan.init.items())
    params = ", ".join(v.params) or "none"
    inputs = ", ".join(n for n in fn.inputs if n in v.inputs)
    if hasattr(t.obj, "from_spec"):
        how = f"check builds it as {t.name}.from_spec(params, {args})"
    else:
        names = ", ".join([*fn.required_attributes, *fn.attributes]) or "none"
        how = (f"check builds it as {t.name}({args}): the spec attributes its __init__ names "
               f"(of {names}), as keywords, and nothing else")
        if v.params:
            how += ("; then instance.load_spec_params(params)" if hasattr(
                t.obj, "load_spec_params") else "; it has no load_spec_params(params)")
    return (f"{how}. params is a dict {{canonical path: array}} ({params}). The instance is "
            f"then called with the inputs ({inputs}). For other constructor arguments (sizes "
            f"such as d_model), define a classmethod from_spec(cls, params, **attributes) that "
            f"reads them from the parameter shapes: check calls it instead of {t.name}(...).")


def invoke(t: Target, target, fn: Function, plan: Plan, inputs: dict, params: dict,
           trace: Trace | None):
    args = [inputs[n] for n in fn.inputs if n not in fn.optional and n in inputs]
    kwargs = {n: inputs[n] for n in plan.optional} | plan.call
    if plan.params_to == "params":
        kwargs["params"] = params
    elif plan.params_to == "keywords":
        kwargs.update({_keyword(k): a for k, a in params.items()})
    if trace is not None:
        kwargs["trace"] = trace
    if plan.training:
        kwargs["training"] = False
    mode = sys.modules["torch"].inference_mode() if t.kind == "torch" else nullcontext()
    with mode:
        return target(*args, **kwargs)


# ---- one vector -------------------------------------------------------------------------------

@dataclass
class Outcome:
    status: str  # pass | fail | skip
    lines: list[str]
    unsupported: list = field(default_factory=list)
    constructor_error: BaseException | None = None
    plan: Plan | None = None
    worst: dict | None = None


@dataclass
class Verdict:
    """How one vector went, as plain data (it crosses a pipe from the worker): the lines to
    print, what a SKIP needs, a constructor failure {key, type, help}, what was printed."""
    status: str  # pass | fail | skip
    lines: list[str]
    reasons: list[str] = field(default_factory=list)
    ctor: dict | None = None
    output: list[str] = field(default_factory=list)
    restart: bool = False  # the worker should start afresh (it ran out of memory)
    worst: dict | None = None  # {what, max_abs_err, index, expected, got} for the API's table


def _fresh(backend, arrays: dict, dtype: str) -> dict:
    # copies: the user's code may modify what it is given, never the loaded spec
    return convert_inputs(backend, {k: np.array(a, copy=True) for k, a in arrays.items()},
                          dtype, "cpu")


def _snapshot(backend, arrays: dict) -> dict:
    return {k: np.array(backend.to_numpy(a), copy=True) for k, a in arrays.items()}


def _mutated(backend, before: dict, arrays: dict) -> list[str]:
    out = []
    for k, old in before.items():
        new = np.asarray(backend.to_numpy(arrays[k]))
        if new.shape != old.shape or not np.array_equal(new, old, equal_nan=old.dtype.kind == "f"):
            out.append(k)
    return out


def run_vector(t: Target, fn: Function, v: Vector, backend, dtype: str) -> Outcome:
    plan = plan_vector(t, fn, v)
    if plan.unsupported:
        return Outcome("skip", [_needs(plan.unsupported)], plan.unsupported, plan=plan)
    inputs, params = _fresh(backend, v.inputs, dtype), _fresh(backend, v.params, dtype)
    before = _snapshot(backend, {**inputs, **_prefixed(params)})
    try:
        target = construct(t, fn, v, plan, params, dtype) if t.is_class else t.obj
        trace = Trace() if plan.trace else None
        result = invoke(t, target, fn, plan, inputs, params, trace)
    except CheckError:
        raise
    except ConstructorFailed as exc:
        return Outcome("fail", [f"constructing {t.name} raised {_exc(exc.exc)}"],
                       constructor_error=exc.exc, plan=plan)
    except SystemExit as exc:
        return Outcome("fail", [_exit_line(exc)], plan=plan)
    except Exception as exc:  # the user's code may raise anything
        return Outcome("fail", [f"raised {_exc(exc)}"], plan=plan)
    try:
        outcome = judge_result(fn, v, result, trace, backend, dtype)
    except Exception as exc:  # a return value no array can be made of
        outcome = Outcome("fail", [f"returned {type(result).__name__}, which cannot be compared "
                                   f"with the spec's arrays ({_exc(exc)})"])
    mutated = _mutated(backend, before, {**inputs, **_prefixed(params)})
    if mutated:
        outcome.status = "fail"
        outcome.lines.insert(0, f"modified its input(s) {', '.join(mutated)} in place; the spec's "
                                f"functions leave their arguments unchanged (work on a copy)")
    outcome.lines += _built_note(t, plan)
    outcome.plan = plan
    return outcome


def _built_note(t: Target, plan: Plan) -> list[str]:
    """How a class was built, said once a run for each alias, size and parameter mapping."""
    parts = []
    for k, alias in plan.aliases.items():
        if k not in t.said:
            t.said.add(k)
            parts.append(f"{alias} for {k}" if "=" not in alias else alias)
    note = [f"built {t.name} with {', '.join(parts)}"] if parts else []
    if plan.mapping and "mapping" not in t.said:
        t.said.add("mapping")
        note.append("parameters mapped by name and shape: " + ", ".join(
            f"{p} -> {n}" for p, n in plan.mapping.items()))
    return note


def _prefixed(params: dict) -> dict:
    return {f"params[{k!r}]": a for k, a in params.items()}


def _exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _exit_line(exc: SystemExit) -> str:
    return (f"called sys.exit({exc.code!r}); check caught it and went on (return the result, "
            f"or raise an exception)")


def _needs(unsupported: list) -> str:
    return f"needs {', '.join(_what(w, val) for w, val in unsupported)}, which your code " \
           f"does not take"


def _what(what: str, val) -> str:
    return what if val is None and " " in what else f"{what}={val!r}"


# ---- judging what came back -------------------------------------------------------------------

def _to_numpy(backend, x) -> np.ndarray:
    if isinstance(x, (list, tuple)):
        return np.asarray([_to_numpy(backend, e) for e in x])
    try:
        return np.asarray(backend.to_numpy(x))
    except Exception:  # another framework's array: let NumPy try
        return np.asarray(x)


def _dtype_name(x) -> str | None:
    d = getattr(x, "dtype", None)
    return None if d is None else (getattr(d, "name", None) or str(d).removeprefix("torch."))


def returned_outputs(fn: Function, result) -> tuple[dict, list[str]]:
    """{output name: what the user returned}, and problems with the shape of the return."""
    if isinstance(result, dict):
        got = {k: result[k] for k in fn.returns if k in result}
        if not got:
            return {}, [f"returned a dict with keys {sorted(map(str, result))}; the spec names "
                        f"the outputs {list(fn.returns)}"]
        return got, []
    if isinstance(result, (tuple, list)):
        if not result:
            return {}, [f"returned an empty {type(result).__name__}; {fn.name} returns "
                        f"{', '.join(fn.returns)}"]
        if len(fn.returns) == 1:
            single = len(result) == 1 and not isinstance(result[0], (int, float))
            return {fn.returns[0]: result[0] if single else result}, []
        if len(result) > len(fn.returns):
            return {}, [f"returned {len(result)} values; {fn.name} returns {len(fn.returns)} "
                        f"({', '.join(fn.returns)})"]
        return dict(zip(fn.returns, result)), []
    if result is None:
        return {}, ["returned None"]
    return {fn.returns[0]: result}, []


def judge_result(fn: Function, v: Vector, result, trace, backend, dtype: str) -> Outcome:
    got, problems = returned_outputs(fn, result)
    if problems:
        return Outcome("fail", problems)
    outputs = {k: _to_numpy(backend, a) for k, a in got.items() if k in v.outputs}
    problems = _not_real(outputs, lambda k: f"output {k!r}")
    if problems:
        return Outcome("fail", problems)
    inter = {k: _to_numpy(backend, a) for k, a in (trace.items() if trace else ())
             if k in v.intermediates}
    sub = dataclasses.replace(v, outputs={k: v.outputs[k] for k in outputs},
                              intermediates={k: e for k, e in v.intermediates.items() if k in inter})
    res = judge(sub, dtype, outputs, inter, Result(v.id, dtype, "pass"))
    notes = [f"{n}: not returned (not checked)" for n in v.outputs if n not in outputs]
    worst = worst_element(sub.outputs, outputs, v.tolerances[dtype], dtype)
    if res.status == "pass":
        done = f", {len(inter)} intermediates" if inter else ""
        return Outcome("pass", [f"max abs err {res.max_abs_err:.3g}{done}", *notes], worst=worst)
    head = res.messages[0].removeprefix(f"{v.id} [{dtype}] ")
    lines = [head, *_nan_lines(outputs, sub.outputs), *res.messages[1:], *notes,
             *_mistake_lines(fn, v, outputs, dtype)]
    lines += _dtype_note(got, dtype)
    if trace is not None and not inter and v.intermediates:
        lines.append(f"recorded none of the intermediates the spec names "
                     f"({', '.join(v.intermediates)}) in trace")
    return Outcome("fail", lines, worst=worst)


def _mistake_lines(fn: Function, v: Vector, outputs: dict, dtype: str) -> list[str]:
    """'your output matches <variant> (see <page>#<anchor>)' for the known conventions."""
    from .variants import likely_mistakes

    try:
        found = likely_mistakes(fn.name, v, outputs, dtype)
    except Exception:
        return []
    return [f"your output matches {m.name} (see {m.where})" for m in found]


def worst_element(expected: dict, got: dict, tol: dict, dtype: str) -> dict | None:
    """The output with the largest error, and where (for the API's table)."""
    from attnspec.spec.compare import compare

    worst = None
    for name, exp in expected.items():
        c = compare(got[name], exp, dtype, tol)
        if worst is None or c.max_abs_err > worst["max_abs_err"] or (not c.ok and worst["ok"]):
            worst = {"what": name, "max_abs_err": c.max_abs_err, "ok": c.ok,
                     "index": c.worst_index, "expected": c.expected_at_worst,
                     "got": c.got_at_worst, "problem": c.problem}
    return worst


def _not_real(got: dict, label) -> list[str]:
    """A returned array that cannot be judged as the spec's real numbers: None, complex
    (its imaginary part would be dropped), objects, strings."""
    out = []
    for name, g in got.items():
        if g.dtype == object and g.ndim == 0 and g.item() is None:
            out.append(f"{label(name)} is None")
        elif g.dtype.kind == "c":
            out.append(f"{label(name)} is complex ({g.dtype}); the spec's values are real (take "
                       f".real only where the imaginary part is zero by construction)")
        elif g.dtype.kind not in "fiub":
            out.append(f"{label(name)} is an array of {g.dtype} ({_kinds(g)}), not numbers")
    return out


def _kinds(g: np.ndarray) -> str:
    if g.dtype != object or g.size == 0:
        return g.dtype.name
    return ", ".join(sorted({type(x).__name__ for x in g.flat[:100]}))


def _dtype_note(got: dict, dtype: str) -> list[str]:
    wrong = sorted({d for d in map(_dtype_name, got.values()) if d and d.startswith(("float", "bf"))
                    and d != dtype})
    return [f"returned {', '.join(wrong)} for {dtype} inputs"] if wrong else []


def _nan_lines(got: dict, expected: dict, label=lambda name: f"output {name!r}") -> list[str]:
    out = []
    for name, exp in expected.items():
        g = got[name]
        if g.shape != exp.shape or g.dtype.kind not in "fc":
            continue
        bad = np.isnan(g) & ~np.isnan(exp)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            out.append(f"{label(name)} is NaN at {int(bad.sum())} of {bad.size} element(s), "
                       f"first at index {first} (the spec expects {exp[first]:.9g} there)")
    return out


def run_error_vector(t: Target, fn: Function, v: Vector, backend, dtype: str) -> Outcome:
    """An error vector passes when the spec's class (or a subclass) is raised."""
    plan = plan_vector(t, fn, v)
    if plan.unsupported:
        return Outcome("skip", [_needs(plan.unsupported)], plan.unsupported, plan=plan)
    want = ERROR_CLASSES[v.error]
    inputs, params = _fresh(backend, v.inputs, dtype), _fresh(backend, v.params, dtype)
    try:
        target = construct(t, fn, v, plan, params, dtype) if t.is_class else t.obj
        invoke(t, target, fn, plan, inputs, params, Trace() if plan.trace else None)
    except CheckError:
        raise
    except ConstructorFailed as exc:
        return _judge_error(exc.exc, want, v, plan, "constructing " + t.name)
    except (Exception, SystemExit) as exc:  # the user's code may raise anything
        return _judge_error(exc, want, v, plan, "")
    return Outcome("fail", [f"raised nothing; the spec raises {v.error}"], plan=plan)


def _judge_error(exc: BaseException, want: type, v: Vector, plan: Plan, where: str) -> Outcome:
    where = f"{where} " if where else ""
    if isinstance(exc, SystemExit):
        return Outcome("fail", [f"{where}{_exit_line(exc)}; the spec raises {v.error}"], plan=plan)
    name = type(exc).__name__
    if not isinstance(exc, want):
        base = next(c for c in want.__mro__ if c.__module__ == "builtins").__name__
        return Outcome("fail", [f"{where}raised {name}, but the spec raises {v.error} ({name}: "
                                f"{exc}); raise `attnspec.spec.errors.{v.error}` (a {base}, so "
                                f"`except {base}` still catches it)"], plan=plan)
    absent = [m for m in v.error_mentions if m not in str(exc)]
    note = f" (the spec's message also mentions {', '.join(absent)})" if absent else ""
    return Outcome("pass", [f"{where}raised {name}{note}"], plan=plan)


# ---- gradients (--grad): a hand-written backward function -----------------------------------

def cotangent_name(output: str) -> str:
    """How the help and the messages call the cotangent of an output: dy, d_output."""
    return f"d{output}" if len(output) == 1 else f"d_{output}"


@dataclass
class GradConvention:
    """How ``check --grad`` calls one backward function, read from its signature once."""
    mode: str  # "positional": d_out1, d_out2..., inputs; "dict": cotangents={output: array}
    outputs: tuple  # the outputs whose cotangents are passed (positional mode)
    saved: tuple = ()  # forward outputs it names, passed by keyword (the spec's values)


def _forward_keywords(fn: Function, vectors: list) -> set:
    """Every name check may pass by keyword: attributes, optional inputs, params."""
    names = {*fn.attributes, *fn.required_attributes, *fn.optional, "params", "trace"}
    return names | {_keyword(p) for v in vectors for p in v.params}


def grad_signature_help(fn: Function, name: str, vectors: list) -> str:
    """``name(dy, x, *, gamma, beta, eps, variant)``: what check passes, as a signature."""
    inputs = [n for n in fn.inputs if n not in fn.optional]
    cots = [cotangent_name(o) for o in fn.returns]
    params = list(dict.fromkeys(_keyword(p) for v in vectors for p in v.params))
    kw = [*fn.optional, *params, *fn.required_attributes, *fn.attributes]
    return f"{name}({', '.join([*cots, *inputs, *(['*', *kw] if kw else [])])})"


def _saved_outputs(fn: Function, sig: inspect.Signature) -> tuple:
    """The forward outputs the function names (``y``, ``weights``): check passes the spec's
    values by keyword, as a framework hands a backward pass its saved tensors."""
    taken = {*fn.inputs, *fn.attributes, *fn.required_attributes}
    return tuple(o for o in fn.returns if o in sig.parameters and o not in taken)


def grad_convention(t: Target, fn: Function, vectors: list) -> GradConvention:
    """The cotangents first, one positional argument per output of the spec function (in
    return order; a function may take only the first ones), then the forward's arguments
    as a plain check passes them, and the forward outputs it names by keyword; or, for a
    function with a ``cotangents`` argument, the dict {output name: cotangent} (as a
    backend's ``<name>_vjp``)."""
    if t.is_class:
        raise CheckError(f"--grad checks a backward function; {t.name} is a class. Write "
                         f"{grad_signature_help(fn, t.name.lower() + '_backward', vectors)} "
                         f"returning the gradients")
    sig = inspect.signature(t.obj)
    inputs = [n for n in fn.inputs if n not in fn.optional]
    saved = _saved_outputs(fn, sig)
    if "cotangents" in sig.parameters:
        return GradConvention("dict", fn.returns, saved)
    params = list(sig.parameters.values())
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return GradConvention("positional", fn.returns, saved)
    keywords = _forward_keywords(fn, vectors) | set(saved)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty and p.name not in keywords]
    n = len(positional) - len(inputs)
    want = grad_signature_help(fn, t.name, vectors)
    if n == 0 and not saved:
        raise CheckError(f"{t.name}{sig} looks like a forward function: it takes no cotangent. "
                         f"With --grad, check calls the backward pass as {want} and compares "
                         f"the gradients it returns (see attnspec check --help)")
    if n <= 0 or n > len(fn.returns):
        also = f"; the outputs it names ({', '.join(saved)}) by keyword" if saved else ""
        raise CheckError(f"{t.name}{sig} takes {len(positional)} positional argument(s) "
                         f"without a default{' besides ' + ', '.join(saved) if saved else ''}; "
                         f"with --grad, check calls {want}: {len(fn.returns)} cotangent(s) "
                         f"({', '.join(fn.returns)}), then the {len(inputs)} required input(s) "
                         f"({', '.join(inputs)}){also}")
    return GradConvention("positional", fn.returns[:n], saved)


def gradient_names(fn: Function, v: Vector) -> list[str]:
    """The gradients a vector expects, in the order a tuple returns them: the float inputs
    in the spec's input order, then the parameters in the vector's order."""
    grads = v.gradients.get("inputs", {})
    return [n for n in fn.inputs if n in grads] + list(v.gradients.get("params", {}))


def _label(v: Vector, name: str) -> str:
    return f"gradient d{name}" if name in v.gradients.get("inputs", {}) else \
        f"gradient of param {name!r}"


def returned_gradients(fn: Function, v: Vector, result) -> tuple[dict, list[str]]:
    """{input name or param path: gradient} from what the backward function returned, and
    problems with the shape of the return (each one line)."""
    names = gradient_names(fn, v)
    listing = ", ".join(names)
    if (isinstance(result, (tuple, list)) and len(result) == 2
            and all(isinstance(r, dict) for r in result)):
        result = {**result[0], **result[1]}  # (grad_inputs, grad_params), as Backend.vjp
    if isinstance(result, dict):
        if set(result) <= {"inputs", "params"} and all(isinstance(d, dict)
                                                       for d in result.values()):
            result = {k: g for d in result.values() for k, g in d.items()}
        got = {k: result[k] for k in names if k in result}
        if not got:
            return {}, [f"returned a dict with keys {sorted(map(str, result))}; name the "
                        f"gradients by input name and parameter path: {listing}"]
        return got, []
    if result is None:
        return {}, ["returned None"]
    if not isinstance(result, (tuple, list)):
        if len(names) == 1:
            return {names[0]: result}, []
        return {}, [f"returned one array; the gradients here are {len(names)}: {listing} "
                    f"(a tuple in that order, or a dict by name)"]
    items = list(result)
    given = [n for n in fn.inputs if n in v.inputs] + list(v.params)
    if len(items) == len(given) and len(given) != len(names):
        # one per input passed (None for a mask or integer targets), then the parameters
        return {n: g for n, g in zip(given, items) if n in names}, []
    while len(items) > len(names) and items[-1] is None:
        items.pop()
    if len(items) != len(names):
        return {}, [f"returned {len(items)} value(s); the gradients here are {len(names)}: "
                    f"{listing} (the float inputs in the spec's order, then the parameters)"]
    return dict(zip(names, items)), []


def _cotangent_args(conv: GradConvention, v: Vector, backend, dtype: str):
    """The cotangents to pass, and the outputs the vector differentiates that the
    function takes no cotangent for (a SKIP)."""
    cot = v.cotangents
    if conv.mode == "dict":
        return [_fresh(backend, cot, dtype)], []
    zeros = {o: np.zeros(v.outputs[o].shape) for o in conv.outputs if o not in cot}
    arrays = _fresh(backend, {o: cot.get(o, zeros.get(o)) for o in conv.outputs}, dtype)
    untaken = [o for o in cot if o not in conv.outputs and np.any(cot[o] != 0)]
    return [arrays[o] for o in conv.outputs], untaken


def run_grad_vector(t: Target, fn: Function, v: Vector, backend, dtype: str,
                    conv: GradConvention) -> Outcome:
    plan = plan_vector(t, fn, v)
    plan.trace = False
    cots, untaken = _cotangent_args(conv, v, backend, dtype)
    unsupported = plan.unsupported + [(f"cotangent {cotangent_name(o)}", None) for o in untaken]
    if unsupported:
        return Outcome("skip", [_needs(unsupported)], unsupported, plan=plan)
    inputs, params = _fresh(backend, v.inputs, dtype), _fresh(backend, v.params, dtype)
    saved = _fresh(backend, {o: v.outputs[o] for o in conv.saved}, dtype)
    arrays = {**inputs, **_prefixed(params), **saved, **{f"cotangent {i}": c for i, c in
                                                         enumerate(cots[0].values() if conv.mode
                                                                   == "dict" else cots)}}
    before = _snapshot(backend, arrays)
    try:
        if conv.mode == "dict" and next(iter(inspect.signature(t.obj).parameters)) != \
                "cotangents":
            result = invoke(t, lambda *a, **kw: t.obj(*a, cotangents=cots[0], **saved, **kw),
                            fn, plan, inputs, params, None)
        else:  # the cotangents first, positionally
            result = invoke(t, lambda *a, **kw: t.obj(*cots, *a, **saved, **kw), fn, plan,
                            inputs, params, None)
    except CheckError:
        raise
    except SystemExit as exc:
        return Outcome("fail", [_exit_line(exc)], plan=plan)
    except Exception as exc:  # the user's code may raise anything
        return Outcome("fail", [f"raised {_exc(exc)}"], plan=plan)
    try:
        outcome = judge_gradient_result(fn, v, result, backend, dtype)
    except Exception as exc:  # a return value no array can be made of
        outcome = Outcome("fail", [f"returned {type(result).__name__}, which cannot be compared "
                                   f"with the spec's gradients ({_exc(exc)})"])
    mutated = _mutated(backend, before, arrays)
    if mutated:
        outcome.status = "fail"
        outcome.lines.insert(0, f"modified its argument(s) {', '.join(mutated)} in place; a "
                                f"backward pass leaves them unchanged (work on a copy)")
    outcome.plan = plan
    return outcome


def judge_gradient_result(fn: Function, v: Vector, result, backend, dtype: str) -> Outcome:
    got, problems = returned_gradients(fn, v, result)
    if problems:
        return Outcome("fail", problems)
    nones = [k for k, g in got.items() if g is None]
    raw = {k: g for k, g in got.items() if g is not None}
    got = {k: _to_numpy(backend, g) for k, g in raw.items()}
    expected = {k: e for group in v.gradients.values() for k, e in group.items()}
    problems = _not_real(got, lambda k: _label(v, k))
    if problems:
        return Outcome("fail", problems)
    sub = {g: {k: e for k, e in d.items() if k in got} for g, d in v.gradients.items()}
    res = judge_gradients(dataclasses.replace(v, gradients=sub), dtype,
                          {k: g for k, g in got.items() if k in sub.get("inputs", {})},
                          {k: g for k, g in got.items() if k in sub.get("params", {})},
                          Result(v.id, dtype, "pass"))
    missing = [f"{_label(v, n)}: {'None' if n in nones else 'not returned'}"
               for n in gradient_names(fn, v) if n not in got]
    if res.status == "pass" and not missing:
        plural = "" if len(got) == 1 else "s"
        return Outcome("pass", [f"max abs err {res.max_abs_err:.3g}, {len(got)} gradient{plural}"])
    head = (res.messages[0].removeprefix(f"{v.id} [{dtype}] ") if res.messages else
            "gradients missing")
    nan = _nan_lines(got, {k: e for k, e in expected.items() if k in got},
                     lambda k: _label(v, k))
    return Outcome("fail", [head, *nan, *res.messages[1:], *missing, *_dtype_note(raw, dtype)])


# ---- selecting vectors ------------------------------------------------------------------------

def keyword_matcher(expr: str):
    """A ``-k`` expression as pytest reads one (words joined by and / or / not, with
    parentheses), where a word matches a vector whose id or a flag contains it."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expr)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def parse_or():
        left = parse_and()
        while peek() == "or":
            take()
            a, b = left, parse_and()
            left = lambda words, a=a, b=b: a(words) or b(words)  # noqa: E731
        return left

    def parse_and():
        left = parse_not()
        while peek() == "and":
            take()
            a, b = left, parse_not()
            left = lambda words, a=a, b=b: a(words) and b(words)  # noqa: E731
        return left

    def parse_not():
        if peek() == "not":
            take()
            inner = parse_not()
            return lambda words: not inner(words)
        if peek() == "(":
            take()
            inner = parse_or()
            if peek() != ")":
                raise CheckError(f"-k {expr!r}: unbalanced parentheses")
            take()
            return inner
        word = take() if peek() not in (None, ")", "and", "or") else None
        if word is None:
            raise CheckError(f"-k {expr!r}: expected a word at position {pos + 1}")
        return lambda words: any(word in w for w in words)

    matcher = parse_or()
    if pos != len(tokens):
        raise CheckError(f"-k {expr!r}: unexpected {tokens[pos]!r}")
    return lambda v: matcher((v.id, *v.flags))


def variant_matcher(variants: list[str], fn: Function):
    """``--variant KEY=VALUE`` (or a bare VALUE: any attribute): values of one key are
    alternatives, different keys must all hold."""
    wanted = defaultdict(set)
    for item in variants:
        key, sep, value = item.rpartition("=")
        if sep and key not in fn.attributes and key not in fn.required_attributes:
            raise CheckError(f"--variant {item!r}: {fn.name} has no attribute {key!r}; its "
                             f"attributes: {', '.join([*fn.attributes, *fn.required_attributes])}")
        wanted[key if sep else ""].add(value)

    def matches(v: Vector) -> bool:
        attrs = {**fn.attributes, **v.attributes}
        for key, values in wanted.items():
            have = {str(attrs.get(key))} if key else {str(a) for a in attrs.values()}
            if not have & values:
                return False
        return True

    return matches


# ---- the command ------------------------------------------------------------------------------

def coursework_dir() -> Path | None:
    """The examples/coursework/ folder of the installed package (the wheel ships it as
    ``attnspec.examples.coursework``), or None."""
    try:
        found = importlib.util.find_spec("attnspec.examples.coursework")
    except ImportError:
        found = None
    for place in (found.submodule_search_locations or []) if found else []:
        if (Path(place) / "README.md").is_file():
            return Path(place)
    return None


def resolve_function(spec: Spec, component: str, function: str | None) -> Function:
    if component not in spec.components:
        close = difflib.get_close_matches(component, spec.components, n=1)
        raise CheckError(f"unknown component {component!r}"
                         + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f"; components: {', '.join(sorted(spec.components))}")
    names = spec.components[component]
    function = function or (component if component in names else names[0])
    if function not in names:
        raise CheckError(f"component {component!r} has functions {names}, not {function!r}")
    return spec.functions[function]


def _backend(framework: str, dtype: str):
    from attnspec.backends import get_backend

    backend = get_backend(framework)
    supported = backend.dtypes("cpu")
    if dtype not in supported:
        raise CheckError(f"--dtype {dtype!r}: the {framework} framework supports "
                         f"{', '.join(supported)} on cpu")
    return backend


def run_check(target, component: str, spec, framework: str | None = None,
              dtype: str = "float64", function: str | None = None, errors: bool = False,
              out=None, keyword: str | None = None, variants: tuple = (),
              grad: bool = False, timeout: float | None = DEFAULT_TIMEOUT,
              memory: float | None = DEFAULT_MEMORY_GIB, isolate: bool = True,
              strict: bool = False, record=None) -> int:
    """The command: ``target`` is ``FILE.py:NAME`` (run in a worker process when
    ``isolate``) and ``spec`` a Spec, or a callable returning one (called once the worker
    is started, so that the user's file is imported while the vectors load)."""
    out = out or sys.stdout  # looked up now: a default bound at import misses redirection
    inferred = ""
    if framework is None:
        framework, inferred = infer_framework(target)
    session = _session(target, framework, dtype, timeout, memory, isolate)
    try:
        spec = spec() if callable(spec) else spec
        fn = resolve_function(spec, component, function)
        if grad:
            _grad_selection(spec, fn, errors)
        info = session.load()
        chosen, selected = _choose(spec, fn, dtype, errors, grad, keyword, variants)
        session.prepare(fn, chosen, grad)
        what = " gradients" if grad else ""
        print(f"attnspec check {_shown(target)} against {component}.{fn.name}{what} ({framework}"
              f"{inferred}, {dtype}): {len(chosen)} vector{'' if len(chosen) == 1 else 's'}"
              f"{selected}", file=out)
        tally = _Tally(name=info["name"], strict=strict)
        tally.printed(getattr(session, "import_output", []), out)
        t0 = time.perf_counter()
        for i, v in enumerate(chosen):
            verdict = session.run(i, dtype)
            tally.report(verdict, v, out)
            if record is not None:
                record(v, verdict)
        tally.repeats(out)
        tally.printed(session.capture.closing() if isolate else [], out)
        print(tally.summary(time.perf_counter() - t0), file=out)
        for line in tally.closing(info, framework, dtype, len(chosen), chosen, session):
            print(line, file=out)
    finally:
        session.close()
    return tally.exit_status()


def infer_framework(target) -> tuple[str, str]:
    """--framework from what the file imports (read, never run): the one of torch,
    tensorflow/keras, jax it imports, else numpy. Returns the name and how it was chosen."""
    if not isinstance(target, str):
        return "numpy", " (--framework: default)"
    file = Path(target.rpartition(":")[0])
    try:
        used = imported_frameworks(read_source(file))
    except (OSError, SyntaxError, ValueError, CheckError):
        return "numpy", ""  # the worker's import says what is wrong with the file
    ml = sorted(used - {"numpy"})
    if len(ml) == 1:
        return ml[0], " from its imports; --framework to choose"
    if ml:
        return "numpy", f"; it imports {' and '.join(ml)}: choose one with --framework"
    return "numpy", ""


def read_source(file: Path, limit: int = 10 << 20) -> str:
    """A Python file's or notebook's code, read with a bound."""
    if file.suffix == ".ipynb":
        from .notebook import notebook_code

        return notebook_code(file)
    with open(file, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CheckError(f"{file} is over {limit >> 20} MiB; is it a Python file?")
    return data.decode("utf-8", "replace")


def imported_frameworks(source: str) -> set[str]:
    """The --framework names of the modules a source imports (``import torch.nn as nn``,
    ``from keras import layers``), anywhere in it."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and
                 not node.level else [])
        found.update(FRAMEWORK_OF_MODULE[n.split(".")[0]] for n in names
                     if n.split(".")[0] in FRAMEWORK_OF_MODULE)
    return found


def _session(target, framework: str, dtype: str, timeout, memory, isolate: bool):
    from .check_worker import LocalSession, WorkerSession

    if isolate and isinstance(target, str):
        return WorkerSession(target, framework, dtype, timeout, memory)
    session = LocalSession(timeout)
    session.load = lambda load=session.load: load(target, framework, dtype)
    return session


def _shown(target) -> str:
    return target if isinstance(target, str) else target.name


def _choose(spec: Spec, fn: Function, dtype: str, errors: bool, grad: bool, keyword, variants):
    """The vectors to run, and how the header says they were selected."""
    wanted = ("gradient",) if grad else ("value", "error") if errors else ("value",)
    chosen = [v for v in spec.vectors if v.function == fn.name and not v.deprecated
              and dtype in v.dtypes and v.expect in wanted]
    total = len(chosen)
    if keyword:
        chosen = list(filter(keyword_matcher(keyword), chosen))
    if variants:
        chosen = list(filter(variant_matcher(list(variants), fn), chosen))
    selected = f" (of {total}, selected by {_selection(keyword, variants)})" if len(
        chosen) != total else ""
    return chosen, selected


def parse_timeout(value, where: str = "--timeout") -> float | None:
    """Seconds per vector: a number from 0.01 to a day, or 0 for no limit."""
    if value is None or value == "":
        return DEFAULT_TIMEOUT
    seconds = _number(value, where, "seconds")
    if seconds == 0:
        return None
    if not 0.01 <= seconds <= 86400:
        raise CheckError(f"{where} {value!r}: give seconds from 0.01 to 86400, or 0 for no limit")
    return seconds


def parse_memory(value, where: str = "--memory-limit") -> float | None:
    """GiB the user's code may allocate: from 0.1 to 1024, or 0 for no limit."""
    if value is None or value == "":
        return DEFAULT_MEMORY_GIB
    gib = _number(value, where, "GiB")
    if gib == 0:
        return None
    if not 0.1 <= gib <= 1024:
        raise CheckError(f"{where} {value!r}: give GiB from 0.1 to 1024, or 0 for no limit")
    return gib


def _number(value, where: str, unit: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CheckError(f"{where} {value!r}: not a number of {unit}") from None
    if x != x or x < 0:
        raise CheckError(f"{where} {value!r}: give a finite number of {unit} >= 0")
    return x


def _run_any(t, fn, v, backend, dtype, conv) -> Outcome:
    if v.expect == "gradient":
        return run_grad_vector(t, fn, v, backend, dtype, conv)
    return (run_error_vector if v.expect == "error" else run_vector)(t, fn, v, backend, dtype)


def _grad_selection(spec: Spec, fn: Function, errors: bool) -> None:
    """--grad needs gradient vectors of the function, and is not --errors."""
    if errors:
        raise CheckError("--grad and --errors cannot be combined: the error vectors call the "
                         "forward function; check it without --grad")
    if not any(v.function == fn.name and v.expect == "gradient" for v in spec.vectors):
        have = sorted({v.component for v in spec.vectors if v.expect == "gradient"})
        raise CheckError(f"{fn.name} has no gradient vectors; components with them: "
                         f"{', '.join(have)}")


def _selection(keyword, variants) -> str:
    parts = ([f"-k {keyword!r}"] if keyword else []) + [f"--variant {x}" for x in variants]
    return " ".join(parts)


@dataclass
class _Tally:
    name: str
    strict: bool = False
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: Counter = field(default_factory=Counter)
    failed_values: list = field(default_factory=list)
    constructor_errors: set = field(default_factory=set)
    errors: dict = field(default_factory=dict)  # a failure's lines -> [first id, later ids]

    def report(self, o: Verdict, v: Vector, out) -> None:
        if o.status == "skip":
            self.skipped += 1
            self.reasons.update(o.reasons)
            print(f"SKIP  {v.id:36s} {o.lines[0]}", file=out)
            self.printed(o.output, out)
            return
        ok = o.status == "pass"
        self.passed += ok
        self.failed += not ok
        if not ok and v.expect in ("value", "gradient"):
            self.failed_values.append(v)
        lines, as_above = o.lines, False
        if o.ctor is not None:  # explained once, however many vectors it hits
            as_above = o.ctor["key"] in self.constructor_errors
            self.constructor_errors.add(o.ctor["key"])
            lines = ([f"constructing {self.name} raised {o.ctor['type']} (as above)"] if as_above
                     else [*lines, *o.ctor["help"]])
        lines = [part for line in lines for part in line.splitlines() if part.strip()] or [""]
        if not ok and not as_above and self._repeated(lines, v):
            return
        print(f"{'PASS' if ok else 'FAIL'}  {v.id:36s} {lines[0]}", file=out)
        for line in lines[1:]:
            print(f"{PAD}{line}", file=out)
        if not ok and not as_above:
            print(f"{PAD}({v.description})", file=out)
        self.printed(o.output, out)

    def _repeated(self, lines: list, v: Vector) -> bool:
        """An error already printed word for word (a TypeError on every vector): counted,
        and listed once after the last vector."""
        key = tuple(lines)
        if key in self.errors:
            self.errors[key].append(v.id)
            return True
        if lines[0].startswith(("raised ", "returned ", "constructing ", "called sys.exit",
                                "timed out", "the process ", "not run")):
            self.errors[key] = [v.id]
        return False

    def repeats(self, out) -> None:
        for ids in self.errors.values():
            if len(ids) > 1:
                more = ", ".join(ids[1:])
                print(f"FAIL  {len(ids) - 1} more vector(s) with the same error as {ids[0]}: "
                      f"{textwrap.shorten(more, 400, placeholder=' ...')}", file=out)

    def exit_status(self) -> int:
        """0 when every vector that ran passed (--strict: and no more were skipped than
        ran); 1 when one failed or none ran."""
        ran = self.passed + self.failed
        if self.failed or ran == 0 or (self.strict and self.skipped > ran):
            return 1
        return 0

    @staticmethod
    def printed(lines: list, out) -> None:
        """What the user's code printed (at most a few lines: the rest is counted)."""
        for line in lines:
            print(f"      | {line}", file=out)

    def summary(self, seconds: float) -> str:
        tail = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.passed} passed, {self.failed} failed{tail} ({seconds:.2f} s)"

    def closing(self, info: dict, framework, dtype, selected: int, chosen: list,
                session) -> list[str]:
        lines = []
        ran = self.passed + self.failed
        if self.skipped:
            what = ", ".join(f"{w} ({n})" for w, n in self.reasons.most_common())
            lines.append(f"not applicable: {self.skipped} of {selected} vectors need what your "
                         f"code does not take: {what}" + ("" if self.strict or ran == 0 else
                                                          " (not a failure; --strict makes it one)"))
        if selected == 0:
            lines.append("no vector selected: nothing was checked")
        elif ran == 0 or (self.strict and self.skipped > ran):
            lines.append(f"only {ran} of {selected} vectors ran: add those arguments, or select "
                         f"the vectors you implement with --variant KEY=VALUE or -k EXPR")
        if self.failed:
            lines += _framework_hint(info, framework)
            if dtype == "float64" and self.failed_values:
                lines += _float32_note(info, self.failed_values, chosen, session)
        return lines


PAD = " " * 6 + " " * 37


def _framework_hint(info: dict, framework: str) -> list[str]:
    used = set(info["frameworks"])
    if framework in used and (framework != "numpy" or used == {"numpy"}):
        return []
    ml = sorted(used - {"numpy"})
    suggest = ml[0] if len(ml) == 1 else ("numpy" if used == {"numpy"} else None)
    if suggest is None or suggest == framework:
        return []
    return [f"hint: {info['file']} uses {suggest}, but the inputs were {framework} arrays; run it "
            f"with --framework {suggest}"]


def _float32_note(info: dict, failed: list, chosen: list, session) -> list[str]:
    if "float32" not in info["dtypes"]:
        return []
    again = [v for v in failed if "float32" in v.dtypes]
    if not again or any(session.run(chosen.index(v), "float32").status != "pass" for v in again):
        return []
    return [f"note: the {len(again)} failing vector(s) that float32 has all pass at float32: your "
            f"code computes in float32 (an astype(np.float32), dtype=torch.float32, .float(), "
            f"tf.float32...). Keep the input's dtype, or check it at float32 with "
            f"--dtype float32"]
