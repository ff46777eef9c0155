"""Named intermediates of composite components.

A composite function takes ``trace=None``; when a :class:`Trace` is given it
records what the spec names (``self_attn.weights``, ``layers.1.ffn.output``...).
Sub-blocks get ``trace.scope("layers.1")`` so names compose by path.
"""

from __future__ import annotations


class Trace:
    __slots__ = ("_store", "_prefix")

    def __init__(self, store: dict | None = None, prefix: str = ""):
        self._store = {} if store is None else store
        self._prefix = prefix

    def scope(self, name: str) -> Trace:
        return Trace(self._store, f"{self._prefix}{name}.")

    def record(self, name: str, value) -> None:
        self._store[self._prefix + name] = value

    def items(self):
        return self._store.items()

    def as_dict(self) -> dict:
        return dict(self._store)

    def convert(self, fn) -> None:
        """Every value recorded (under any prefix) replaced by fn(value), in place."""
        for name, value in list(self._store.items()):
            self._store[name] = fn(value)


def scope(trace: Trace | None, name: str) -> Trace | None:
    """``trace.scope(name)``, or None when no trace is kept."""
    return None if trace is None else trace.scope(name)


def record(trace: Trace | None, name: str, value) -> None:
    if trace is not None:
        trace.record(name, value)
