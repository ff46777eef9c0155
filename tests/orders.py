"""Correct evaluation orders of every component at float32, float16 and bfloat16, emulated in
NumPy (with ml_dtypes), to derive the spec's tolerances from (benchmarks/tolerances.py).

The NumPy backend's own code runs on :class:`Emu` arrays: float64 arrays holding values of the
dtype under test, whose every operation rounds its result to that dtype, as a framework
computing in that dtype does. An :class:`Order` says how:

- ``accumulate``: a matrix product or a sum accumulates in float32 and rounds once
  (``"float32"``), or rounds every product and every partial sum to the dtype
  (``"dtype"``, a naive loop in the dtype; the worst case);
- ``fuse_bias``: ``x @ W + b`` rounds once (a fused epilogue) instead of twice;
- ``upcast``: backend functions computed wholly in float32, rounded on the way out
  (softmax, LayerNorm/RMSNorm statistics, the activations), as torch's CPU kernels do;
- ``round_attributes``: scalar attributes and constants (scale, eps, 1/(1-p), 0.044715)
  are rounded to the dtype before use, or used as given;
- ``transcendental_ulps``: K > 0 moves every transcendental result (exp, expm1, log,
  log1p, tanh, logaddexp, sin, cos, erf) K float32 ULPs up or down before it is rounded
  to the dtype: a float32 approximation (Eigen's, SVML's, CUDA's) instead of a correctly
  rounded one. The sign is a hash of the exact value, so, as in a real implementation, a
  value gets the same error wherever it is computed (a forward pass and the backward
  pass that recomputes it), whatever the order of the calls; ``draws`` sign patterns
  (hash salts) are run and the worst taken, since one pattern may cancel what another
  adds up (tests/derive.py).

Composites are the NumPy backend's, so every composite is composed from the same
orders of its parts (no second copy of the stack to drift). Einsum (relative attention)
and ``math.erf`` (exact GELU) compute in float64 and round once under every order but the
one with ``transcendental_ulps`` (which rounds erf to the dtype before ``1 + erf``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
import types
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np
from attnspec.backends.numpy import NumpyBackend
from attnspec.spec.errors import NotImplementedComponent

DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(ml_dtypes.bfloat16)}


@dataclass(frozen=True)
class Order:
    name: str
    accumulate: str = "float32"  # "float32" | "dtype"
    fuse_bias: bool = False
    upcast: tuple = ()  # backend functions computed in float32: "softmax", "layer_norm", ...
    round_attributes: bool = True
    transcendental_ulps: int = 0
    draws: int = 1  # sign patterns of the transcendentals' errors, each run (salt 0, 1, ...)
    salt: int = 0
    description: str = ""

    def variants(self) -> tuple[Order, ...]:
        """The runs whose worst deviation is this order's: one per sign pattern."""
        return tuple(replace(self, salt=k) for k in range(self.draws))


UPCAST_ALL = ("softmax", "layer_norm", "rms_norm", "activations", "_sigmoid")
# The largest float32 error of a framework's exp/tanh/erf measured or documented, rounded
# up (spec/TOLERANCES.md, "Approximate transcendentals").
TRANSCENDENTAL_ULPS = 8

ORDERS = (
    Order("plain", description="every op in the dtype; x @ W then + b; softmax step by step; "
                               "matmul and sums accumulate in float32"),
    Order("dtype-accumulation", accumulate="dtype",
          description="as plain, but every product and partial sum rounded to the dtype"),
    Order("fused-float32", fuse_bias=True, upcast=UPCAST_ALL,
          description="x @ W + b rounded once; softmax, norms and activations in float32 "
                      "(torch's CPU kernels)"),
    Order("fused-dtype-softmax", fuse_bias=True, upcast=("layer_norm", "rms_norm"),
          description="x @ W + b rounded once; softmax in the dtype; norm statistics in "
                      "float32"),
    Order("exact-attributes", round_attributes=False, accumulate="dtype",
          upcast=("layer_norm", "rms_norm"),
          description="attributes (scale, eps, p) used unrounded; dtype accumulation; "
                      "norm statistics in float32"),
    Order("approximate-transcendentals", transcendental_ulps=TRANSCENDENTAL_ULPS, draws=4,
          description="as plain, but exp, log, tanh, erf... each off by "
                      f"{TRANSCENDENTAL_ULPS} float32 ULPs (either way) before rounding"),
)


class _Context:
    dt: np.dtype | None = None  # the dtype results are rounded to now
    order: Order | None = None


CTX = _Context()


def rnd(a, dt=None) -> np.ndarray:
    """``a`` rounded to ``dt`` (default: the current dtype), as float64."""
    dt = dt or CTX.dt  # an overflow to inf is the rounding (derive._run ignores the warning)
    return np.asarray(a, dtype=np.float64).astype(dt).astype(np.float64)


class Emu(np.ndarray):
    """A float64 array whose operations round to the dtype under emulation.

    ``pending``: a product not yet rounded (a fused bias add may consume it first).
    """

    pending = False

    def __array_finalize__(self, obj):
        self.pending = getattr(obj, "pending", False)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        if out is not None:  # np.mean divides in place: compute, then store
            result = self.__array_ufunc__(ufunc, method, *inputs, **kw)
            target = out[0]
            target.view(np.ndarray)[...] = np.asarray(result)
            if isinstance(target, Emu):
                target.pending = False
            return target
        fused = (CTX.order.fuse_bias and ufunc is np.add and method == "__call__"
                 and any(getattr(x, "pending", False) for x in inputs))
        raw = [_raw(x, keep_pending=fused) for x in inputs]
        if ufunc is np.matmul and method == "__call__":
            return _matmul(*raw)
        if ufunc is np.add and method == "reduce":
            return _sum(raw[0], **kw)
        result = getattr(ufunc, method)(*raw, **kw)
        if CTX.order.transcendental_ulps and method == "__call__" and _transcendental(ufunc):
            return _wrap(_approximate(np.asarray(result, dtype=np.float64)))
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        return _wrap(func(*_raw(args), **_raw(kwargs)))


def _raw(x, keep_pending: bool = False):
    """Plain float64 data of ``x`` (rounded to the dtype unless a fused add consumes it)."""
    if isinstance(x, (list, tuple)):
        return type(x)(_raw(y, keep_pending) for y in x)
    if isinstance(x, dict):
        return {k: _raw(v, keep_pending) for k, v in x.items()}
    if isinstance(x, Emu):
        plain = x.view(np.ndarray)
        return plain if not x.pending or keep_pending else rnd(plain)
    if isinstance(x, (float, np.floating)) and not isinstance(x, bool):
        return float(rnd(x)) if CTX.order.round_attributes else x
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return rnd(x)  # a constant table (cos, PE) is a dtype tensor in a real framework
    return x


TRANSCENDENTAL = (np.exp, np.expm1, np.exp2, np.log, np.log1p, np.log2, np.tanh,
                  np.logaddexp, np.sin, np.cos)


def _transcendental(ufunc) -> bool:
    """A NumPy transcendental, or a Python one per element (np.frompyfunc(math.erf))."""
    return ufunc in TRANSCENDENTAL or ufunc.types == ["O->O"]


def _approximate(y: np.ndarray) -> np.ndarray:
    """y +- K float32 ULPs of y. A value float32 holds exactly stays: exp(0) = 1,
    tanh(0) = 0, tanh(20) = 1 (saturated), exp(-inf) = 0, inf are exact in every
    implementation (the exact value of a transcendental at any other point is not)."""
    _, e = np.frexp(y)  # |y| = m 2^e, m in [0.5, 1): a float32 ULP is 2^(e - 24)
    ulp = np.ldexp(1.0, np.maximum(e - 24, -149))
    moved = y + _sign(y) * CTX.order.transcendental_ulps * ulp
    return np.where(rnd(y, DTYPES["float32"]) == y, y, moved)


SALT = 0x5BD1E995  # any odd constant: salt k flips a fixed bit pattern before hashing


def _sign(y: np.ndarray) -> np.ndarray:
    """+1 or -1 per element, pseudo-random but a function of the value and the order's
    salt (Fibonacci hashing of its bits rounded to float32: the top bit of bits * 2^64 /
    golden ratio). Rounded to float32 first, so the pattern is the same on every machine:
    NumPy's float64 exp and tanh differ in the last bit between CPUs (AVX2, AVX-512)."""
    y32 = np.array(y, dtype=np.float64).astype(np.float32).astype(np.float64)
    bits = y32.view(np.uint64) ^ np.uint64(CTX.order.salt * SALT)
    with np.errstate(over="ignore"):
        top = (bits * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(63)
    return top.astype(np.int64) * 2 - 1


def _wrap(r, pending: bool = False):
    if isinstance(r, tuple):
        return tuple(_wrap(x) for x in r)
    if isinstance(r, (np.ndarray, np.floating)) and np.asarray(r).dtype.kind == "f":
        r = np.asarray(r, dtype=np.float64)
        out = (r if pending else rnd(r)).view(Emu)
        out.pending = pending
        return out
    return r


def _matmul(a, b):
    """a @ b with the order's accumulation; left pending (float32) when bias adds fuse."""
    if CTX.order.accumulate == "dtype" and np.ndim(a) >= 2 and np.ndim(b) >= 2 \
            and a.shape[-1] > 0:
        acc = 0.0
        for k in range(a.shape[-1]):  # (..., T, 1) * (..., 1, S) -> (..., T, S)
            acc = rnd(acc + rnd(a[..., :, k:k + 1] * b[..., k:k + 1, :]))
        return _wrap(acc)
    exact = rnd(np.matmul(a, b), DTYPES["float32"])
    return _wrap(exact, pending=CTX.order.fuse_bias)


def _sum(a, axis=None, dtype=None, keepdims=False, **_):
    """np.add.reduce with the order's accumulation."""
    if CTX.order.accumulate != "dtype":
        s = rnd(np.add.reduce(a, axis=axis, keepdims=keepdims), DTYPES["float32"])
        return _wrap(s)
    axes = tuple(range(a.ndim)) if axis is None else np.atleast_1d(axis)
    for ax in sorted((int(x) % a.ndim for x in axes), reverse=True):
        moved = np.moveaxis(a, ax, 0)
        acc = np.zeros(moved.shape[1:])
        for row in moved:
            acc = rnd(acc + row)
        a = np.expand_dims(acc, ax) if keepdims else acc
    return _wrap(a)


# -- running a backend function under an order -------------------------------------------

class EmulationBypassed(RuntimeError):
    """A backend path turned the emulated arrays into plain ones (np.asarray): its results
    would be float64, not the dtype's, and every tolerance derived from them too lax."""


def _floating_for(original):
    def floating(name, x, *args, **kw):
        """The backend's float check, keeping Emu arrays (np.asarray drops the subclass)."""
        if CTX.order is None:
            return original(name, x, *args, **kw)
        x = np.asanyarray(x)
        if x.dtype != np.float64:
            raise TypeError(f"{name}: emulation expects float64 carriers, got {x.dtype}")
        return x
    return floating


def _upcast(name: str, fn):
    """fn computed in float32 (its results rounded to the dtype on the way out) when the
    current order says so; otherwise fn itself (a composite may have cached this wrapper)."""
    @functools.wraps(fn)
    def wrapper(*args, **kw):
        if CTX.order is None or name not in CTX.order.upcast:
            return fn(*args, **kw)
        outer = CTX.dt
        CTX.dt = DTYPES["float32"]
        try:
            result = fn(*args, **kw)
        finally:
            CTX.dt = outer
        if isinstance(result, tuple):
            return tuple(_wrap(_raw(r)) for r in result)
        return _wrap(_raw(result))
    return wrapper


# Where the NumPy backend's functions live: its modules, and the shared composites if any.
PACKAGES = ("attnspec.backends.numpy", "attnspec.backends.composite")
UPCASTABLE = {"softmax": "attention", "layer_norm": "norm", "rms_norm": "norm",
              "_sigmoid": "rnn"}


@functools.cache
def _modules() -> tuple:
    mods = []
    for name in PACKAGES:
        try:
            pkg = importlib.import_module(name)
        except ImportError:
            continue
        mods.append(pkg)
        mods += [importlib.import_module(f"{name}.{m.name}")
                 for m in pkgutil.iter_modules(pkg.__path__)]
    return tuple(mods)


def _holders(mods: tuple) -> list:
    """The modules, and the objects behind their bound methods (a composite family and the
    kernels it caches), whose attributes may hold a backend function."""
    out, seen = [], set()

    def add(obj):
        if id(obj) not in seen and hasattr(obj, "__dict__"):
            seen.add(id(obj))
            out.append(obj)

    for m in mods:
        add(m)
        for value in list(vars(m).values()):
            owner = getattr(value, "__self__", None)
            if owner is None or isinstance(owner, types.ModuleType) or isinstance(owner, type):
                continue
            add(owner)
            for inner in list(vars(owner).values()):
                if not isinstance(inner, (types.ModuleType, types.FunctionType, type)):
                    add(inner)
    return out


@functools.cache
def _replacements() -> dict:
    """id(original function) -> its context-aware stand-in."""
    core = importlib.import_module("attnspec.backends.numpy._core")
    out = {id(core.floating): _floating_for(core.floating)}
    for name, module in UPCASTABLE.items():
        fn = getattr(importlib.import_module(f"attnspec.backends.numpy.{module}"), name)
        out[id(fn)] = _upcast(name, fn)
    return out


def _emulated_result(make):
    """A numpy array constructor whose float results are dtype tensors (Emu)."""
    @functools.wraps(make)
    def constructor(*args, **kw):
        out = make(*args, **kw)
        return _wrap(out) if isinstance(out, np.ndarray) and out.dtype.kind == "f" else out
    return constructor


class _NumpyKeepingEmu(types.ModuleType):
    """numpy as a backend module sees it (``np``) under emulation: ``asarray`` keeps Emu
    arrays, and new float buffers (``empty``, ``zeros``, ``full``...) are Emu, as a
    framework's new tensors have the dtype."""

    # not arange/linspace: positions and angles are float64 tables by the spec (rope,
    # sinusoidal_pe), rounded where they meet the dtype's tensors
    CONSTRUCTORS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                    "full_like")

    def __getattr__(self, name):
        if name in self.CONSTRUCTORS:
            return _emulated_result(getattr(np, name))
        return getattr(np, name)

    @staticmethod
    def asarray(a, dtype=None, *args, **kw):
        return np.asanyarray(a, dtype, *args, **kw)


NUMPY_KEEPING_EMU = _NumpyKeepingEmu("numpy")


@contextlib.contextmanager
def emulating(dtype: str, order: Order):
    """The NumPy backend patched so Emu arrays flow through it: its modules' ``np.asarray``
    keeps them, and every attribute that holds its float check or an upcastable function
    (found by identity) holds a stand-in."""
    stand_in = _replacements()
    patches = [(module, "np", NUMPY_KEEPING_EMU) for module in _modules()
               if getattr(module, "np", None) is np]
    patches += [(holder, attr, stand_in[id(value)]) for holder in _holders(_modules())
                for attr, value in list(vars(holder).items()) if id(value) in stand_in]
    ff = importlib.import_module("attnspec.backends.numpy.feedforward")
    acts = dict(ff.ACTIVATIONS)
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    CTX.dt, CTX.order = DTYPES[dtype], order
    try:  # plain setattr: mock.patch cost a third of a quick order's run
        for obj, attr, value in patches:
            setattr(obj, attr, value)
        ff.ACTIVATIONS.update({k: _upcast("activations", f) for k, f in acts.items()})
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
        ff.ACTIVATIONS.clear()
        ff.ACTIVATIONS.update(acts)
        CTX.dt, CTX.order = None, None


class EmulatedBackend(NumpyBackend):
    """The NumPy backend at ``dtype`` under ``order`` (run through conformance.runner.call).

    ``overrides``: spec function name -> replacement, as tests/mutants.py's Mutant has.
    """

    name = "emulated"

    def __init__(self, dtype: str, order: Order, **overrides):
        super().__init__()
        self.dtype, self.order, self.overrides = dtype, order, overrides

    def dtypes(self, device: str) -> list[str]:
        return list(DTYPES)

    def asarray(self, x, *, dtype=None, device="cpu"):
        x = np.asarray(x)
        if dtype is None or x.dtype.kind in "biu":
            return x.copy()
        return rnd(x, DTYPES[self.dtype]).view(Emu)

    def to_numpy(self, x) -> np.ndarray:
        x = np.asarray(x.view(np.ndarray) if isinstance(x, Emu) else x)
        return rnd(x, DTYPES[self.dtype]) if x.dtype.kind == "f" else x

    def function(self, name, module):
        impl = self.overrides.get(name) or super().function(name, module)

        @functools.wraps(impl)
        def run(**kwargs):
            with emulating(self.dtype, self.order):
                result = impl(**kwargs)
            results = result if isinstance(result, tuple) else (result,)
            _check_emulated(name, DTYPES[self.dtype], kwargs,
                            [*results, *_traced(kwargs.get("trace"))])
            # round before the runner converts the results
            out = tuple(self.to_numpy(r) for r in results)
            return out if isinstance(result, tuple) else out[0]
        return run

    def vjp(self, name, module, call, cotangents):
        """The hand-written backward pass (``<module>.<name>_vjp``) under the order; a
        shared composite without one: the composite tape over the kernels' VJPs."""
        from attnspec.backends.composite import shared
        from attnspec.backends.composite.tape import composite_vjp

        impl = self.overrides.get(f"{name}_vjp")
        if impl is None:
            try:
                impl = super().function(f"{name}_vjp", module)
            except NotImplementedComponent:
                if name not in shared():
                    raise
                impl = functools.partial(_composite_vjp, composite_vjp, _Kernels(self), name)
        with emulating(self.dtype, self.order):
            grad_inputs, grad_params = impl(cotangents, **call)
        for group in (grad_inputs, grad_params):
            _check_emulated(f"{name}_vjp", DTYPES[self.dtype], call, list(group.values()))
        return ({k: self.to_numpy(g) for k, g in grad_inputs.items()},
                {k: self.to_numpy(g) for k, g in grad_params.items()})


class _Kernels:
    """The emulated backend as the composite tape looks its kernels up: the NumPy module
    functions themselves (already inside the emulation), or their overrides."""

    def __init__(self, backend):
        self.backend, self.package = backend, backend.package

    def function(self, name, module):
        return self.backend.overrides.get(name) or NumpyBackend.function(self.backend, name,
                                                                           module)


def _composite_vjp(composite_vjp, kernels, name, cotangents, **call):
    return composite_vjp(kernels, name, call, cotangents)


def _traced(trace) -> list:
    return [] if trace is None else [v for _, v in trace.items()]


def _check_emulated(name: str, dt, kwargs: dict, results: list) -> None:
    """With a float input, no float result may hold values the dtype cannot (a path that
    computed in float64: an Emu array turned plain by np.asarray). A plain buffer filled
    with emulated values (np.empty, then assignment) is fine."""
    floats_in = any(isinstance(v, Emu) for v in kwargs.values()) or any(
        isinstance(v, Emu) for v in (kwargs.get("params") or {}).values())
    for r in results:
        if floats_in and isinstance(r, np.ndarray) and not isinstance(r, Emu) \
                and r.dtype.kind == "f" and not np.array_equal(rnd(r, dt), r, equal_nan=True):
            raise EmulationBypassed(
                f"{name}: a result holds values that are not {dt.name}: some backend path "
                f"turns the emulated arrays into plain ones (np.asarray); patch it in "
                f"tests/orders.py")
