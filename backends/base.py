"""The backend contract.

A backend is an object with a name, the devices and dtypes it supports,
conversion to and from NumPy, and one function per spec function, found in a
module named as the spec says (``attention``, ``positional``, ``norm``...).
Functions take inputs as keyword arguments named as in the spec pages,
attributes as keyword arguments, parameters as ``params={canonical path:
array}`` in the canonical layout (``y = x @ W + b``, W of shape (in, out)), and
composites also ``trace=`` (see :mod:`attnspec.spec.trace`).

Gradients: ``vjp(name, module, call, cotangents)`` returns ``(grad_inputs, grad_params)``,
the vector-Jacobian products of the spec function for one cotangent per output (see
:meth:`Backend.vjp`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from attnspec.spec.errors import DeviceError, DTypeError, NotImplementedComponent

from .composite import returns_of

__all__ = ["Backend", "missing", "returns_of"]  # returns_of: for an autodiff backend's vjp


def missing(fn: Callable) -> Callable:
    """Mark a scaffolded function as not implemented yet: calling it raises
    NotImplementedComponent (status ``missing``), and the completeness test
    lists it. Delete the decorator when the body is written."""
    import functools

    @functools.wraps(fn)
    def stub(*args, **kwargs):
        raise NotImplementedComponent(f"{fn.__name__} is not implemented yet (scaffold stub)")

    stub.attnspec_stub = True
    return stub


class Backend:
    """The contract every backend satisfies, and the machinery shared by all of them.

    A subclass sets ``name`` and ``package`` (where its spec modules live, e.g.
    ``mylib_attnspec``) and writes the five methods below that raise
    NotImplementedError here: ``devices``, ``dtypes``, ``asarray``, ``to_numpy``,
    ``versions``. Everything else (function lookup, device and dtype checks, ``vjp``,
    extra checks, known failures) is written once here; a backend overrides it only
    for a reason (``backends/README.md``).
    """

    name = "base"
    package = ""

    def __init__(self, **options):
        self.options = options

    # -- the five methods a backend must write -------------------------------------------

    def devices(self) -> list[str]:
        """The devices usable on this machine, as ``--device`` names them: ``["cpu"]``,
        ``["cpu", "cuda"]``... A device the framework knows but this machine lacks is left
        out, so that asking for it fails at once (never a skip)."""
        raise self._unwritten("devices")

    def dtypes(self, device: str) -> list[str]:
        """The floating dtypes supported on ``device``, most precise first
        (``["float64", "float32", "float16", "bfloat16"]``); error vectors run at the first."""
        raise self._unwritten("dtypes")

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        """Conversion in: NumPy array ``x`` as this backend's array on ``device``.

        Floats are cast to ``dtype`` (the runner has already rounded them to it, so the
        cast is exact); ``dtype=None`` keeps ints and bools of their kind. Call
        ``self.check_device(device)`` and ``self.check_dtype(dtype, device)``: an unknown
        device or dtype is a DeviceError / DTypeError naming the supported ones."""
        raise self._unwritten("asarray")

    def to_numpy(self, x):
        """Conversion out: this backend's array ``x`` as a NumPy array, copied off the
        device (bfloat16 may come back as float32)."""
        raise self._unwritten("to_numpy")

    def dtype_name(self, x) -> str | None:
        """The spec's name of an array's dtype ('float32', 'bfloat16', 'int64', 'bool'), or
        None for something that is not an array; the output contract compares it with the
        spec's dtype. The default reads ``x.dtype.name`` (NumPy, JAX, TensorFlow) or
        ``str(x.dtype)`` without its module (``torch.float32``, ``mlx.core.float32``);
        override it where the framework spells dtypes otherwise."""
        from attnspec.conformance.runner import dtype_name

        return dtype_name(x)

    def versions(self) -> dict[str, str]:
        """``{"mylib": "1.2.3", ...}``: the framework and the libraries that decide its
        numbers, shown in the suite's header and in ``attnspec report``."""
        raise self._unwritten("versions")

    def _unwritten(self, method: str) -> NotImplementedError:
        return NotImplementedError(f"backend {self.name!r} ({type(self).__module__}."
                                   f"{type(self).__qualname__}) does not write {method}(), "
                                   f"which every backend must (backends/README.md)")

    # -- shared machinery ----------------------------------------------------------------

    def function(self, name: str, module: str) -> Callable:
        try:
            mod = importlib.import_module(f"{self.package}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{self.package}.{module}":
                raise
            raise NotImplementedComponent(
                f"backend {self.name!r} has no module {module!r} (for {name})") from None
        fn = getattr(mod, name, None)
        if fn is None:
            raise NotImplementedComponent(f"backend {self.name!r} does not implement {name!r} "
                                          f"(expected in {self.package}.{module})")
        return fn

    def vjp(self, name: str, module: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
        """The backward pass of spec function ``name``: ``call`` holds the forward keyword
        arguments (inputs and ``params=`` already backend arrays, attributes), ``cotangents``
        one backend array per output named there (an output left out has cotangent 0).
        Returns ``({input name: gradient}, {parameter path: gradient})`` for every float
        input given and every parameter, each of its input's shape and dtype.

        By default the hand-written ``<module>.<name>_vjp(cotangents, **call)``; a function
        without one raises NotImplementedComponent (reported ``missing``, never a pass).
        A shared composite (``backends/composite/``) without one gets the composite tape's:
        its kernels' hand-written VJPs replayed in reverse (``composite/tape.py``).
        Autodiff backends override this generically."""
        from .composite import shared

        try:
            vjp = self.function(f"{name}_vjp", module)
        except NotImplementedComponent:
            if name not in shared():
                raise
            from .composite.tape import composite_vjp

            return composite_vjp(self, name, call, cotangents)
        return vjp(cotangents, **call)

    def select_device(self, device: str) -> None:
        """The device for functions that take no array to infer it from (``causal_mask``,
        ``sinusoidal_pe``); the suite calls this once per session. A no-op by default."""

    def check_device(self, device: str) -> str:
        if device not in self.devices():
            raise DeviceError(f"backend {self.name!r} has no device {device!r} here; "
                              f"available: {self.devices()}")
        return device

    def check_dtype(self, dtype: str, device: str) -> str:
        if dtype not in self.dtypes(device):
            raise DTypeError(f"backend {self.name!r} does not support dtype {dtype!r} on "
                             f"{device!r}; supported: {self.dtypes(device)}")
        return dtype

    def extra_checks(self, device: str) -> list[tuple[str, Callable]]:
        """Backend-specific conformance checks run by the suite (``test_extras.py``):
        ``<package>.extras.extra_checks(backend, device)``, none without that module.

        Each is ``(name, check)``; ``check(spec)`` raises AssertionError on failure.
        A framework backend uses this for agreement with the framework's own
        built-ins (through its converters) and for gradient checks.
        """
        try:
            mod = importlib.import_module(f"{self.package}.extras")
        except ModuleNotFoundError as exc:
            if exc.name != f"{self.package}.extras":
                raise
            return []
        return list(mod.extra_checks(self, device))

    def device_of(self, x) -> str | None:
        """The device an array returned by a spec function lives on, as named in
        ``devices()``; the suite checks it is the one requested. None: cannot tell."""
        return None

    def known_failures_file(self):
        """``known_failures.txt`` beside the backend's package, if there is one."""
        from pathlib import Path

        try:
            mod = importlib.import_module(self.package)
        except ImportError:
            return None
        path = Path(mod.__file__).parent / "known_failures.txt"
        return path if path.is_file() else None

    def synchronize(self, device: str) -> None:
        """Wait for queued work on ``device`` (benchmarks); a no-op for eager CPU backends."""

    def describe(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<attnspec backend {self.name}>"
