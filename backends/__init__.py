"""Backends, found by name through the ``attnspec.backends`` entry-point group.

An installed package that declares, in its pyproject.toml::

    [project.entry-points."attnspec.backends"]
    mylib = "mylib_attnspec:MyLibBackend"

is available as ``--backend mylib`` exactly like the built-in ones. Importing
this package imports no framework: backends import theirs when loaded.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from attnspec.spec.errors import BackendError

from .base import Backend

GROUP = "attnspec.backends"
_BUILTIN = {
    "numpy": "attnspec.backends.numpy:NumpyBackend",
    "torch": "attnspec.backends.torch:TorchBackend",
    "tensorflow": "attnspec.backends.tensorflow:TensorFlowBackend",
    "jax": "attnspec.backends.jax:JaxBackend",
    "mlx": "attnspec.backends.mlx:MlxBackend",
}


def available() -> dict[str, str]:
    """Backend name -> ``module:Class`` for every registered backend."""
    found = dict(_BUILTIN)
    for ep in entry_points(group=GROUP):
        found[ep.name] = ep.value
    return found


def get_backend(name: str, **options) -> Backend:
    """Instantiate a backend by name (importing its framework now, not before)."""
    import importlib

    targets = available()
    if name not in targets:
        raise BackendError(f"unknown backend {name!r}; registered: {', '.join(sorted(targets))}")
    module, _, cls = targets[name].partition(":")
    try:
        backend_cls = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise BackendError(f"backend {name!r} cannot be imported ({exc}); is its framework "
                           f"installed? e.g. pip install 'attnspec[{name}]'") from exc
    return backend_cls(**options)


__all__ = ["Backend", "available", "get_backend", "GROUP"]
