"""Reverse mode for the composites, written once: a backend with hand-written kernel VJPs
(``<module>.<fn>_vjp``) gets the VJP of every composite built on them.

The composite runs once, unchanged, over :class:`TapeKernels`: each kernel call
``k.<fn>(...)`` is recorded with its arguments, and each array that depends on an input
or a parameter is a :class:`Tracked` (a subclass of the backend's array class knowing its
node on the tape). What the composites compute themselves between kernels is recorded
too, each with its backward pass: ``x + y`` (the residual ``x + f(x)``, the positions added
to the embeddings) and ``x * c`` by a constant scalar (T5's tied head) by
``Tracked.__array_ufunc__``, basic slicing by ``Tracked.__getitem__``,
and the ops ``tanh``, ``matmul``, ``concat``, ``stack``, ``unstack``, ``take_rows``, ``where``,
``split_heads``, ``merge_heads`` by :class:`TapeOps`; a parameter the composite reads itself
(Luong's ``decoder.combine.w``) is a leaf. The backward pass replays the tape in reverse: a
kernel's cotangents go to its ``<fn>_vjp``, whose input gradients are summed into the nodes it
read and whose parameter gradients are summed by canonical path (the kernel's ``params`` is a
scoped view, ``layers.1.self_attn.``), so a parameter read twice (tied embeddings) gets the sum.

A composite called by a composite (``k.encoder_layer`` inside ``encoder``) is expanded
through the tape unless the backend hand-writes its VJP, in which case it is one kernel.
NumPy arrays only: an autodiff backend overrides ``Backend.vjp`` instead.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
from attnspec.spec.errors import NotImplementedComponent

from .. import _checks as check
from . import MODULES, Kernels, returns_of


class Tracked:
    """An array on the tape, a subclass of the backend's own array class made by
    :func:`_tracked` (so an ndarray subclass keeps its arithmetic): ``node`` is where its
    gradient accumulates, ``plain()`` the array without the tape."""

    node: int

    def plain(self):
        return self.view(self.base_class)

    def __array_ufunc__(self, ufunc, method, *args, **kwargs):
        plain = [_plain(a) for a in args]
        out = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc is np.add and method == "__call__" and not kwargs:
            nodes = [a.node if isinstance(a, Tracked) else None for a in args]
            return self.tape.add([np.shape(a) for a in plain], nodes, out)
        if ufunc is np.multiply and method == "__call__" and not kwargs \
                and sum(isinstance(a, Tracked) for a in args) == 1 \
                and all(isinstance(a, Tracked) or np.ndim(a) == 0 for a in args):
            # x * c by a constant scalar (T5's tied head, h D^-0.5): dx = dout * c
            i = [isinstance(a, Tracked) for a in args].index(True)
            x, c = args[i], plain[1 - i]
            return self.tape.op(lambda g: [g * c], [x], out)
        if ufunc in (np.subtract, np.multiply, np.divide, np.negative, np.matmul):
            raise NotImplementedComponent(f"the composite tape differentiates x + y only, "
                                          f"not {ufunc.__name__}")
        return out  # comparisons: no gradient flows

    def __getitem__(self, index):
        out = self.plain()[index]
        return self.tape.op(lambda g: [_scatter(g, index, self.shape)], [self], out)


_TRACKED: dict = {}


def _tracked(cls) -> type:
    """The Tracked subclass of array class ``cls``."""
    if cls not in _TRACKED:
        _TRACKED[cls] = type(f"Tracked{cls.__name__}", (Tracked, cls), {"base_class": cls})
    return _TRACKED[cls]


def _plain(a):
    return a.plain() if isinstance(a, Tracked) else a


def _scatter(g, index, shape):
    """The gradient of x[index] (basic indexing: ints, slices, None) in x's shape."""
    dx = np.zeros(shape, dtype=g.dtype)
    dx[index] += g
    return dx


def _unbroadcast(g, shape):
    """The gradient of an operand of ``shape`` that broadcast to g.shape."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


class Tape:
    """The kernel calls and ops of one forward pass, and their backward pass."""

    def __init__(self, backend):
        self.backend = backend
        self.plain_params: dict = {}  # the parameters as the kernels get them
        self.steps: list = []   # ("kernel" | "op" | "add", ...), in forward order
        self.count = 0

    def track(self, x):
        """x as a new node of the tape."""
        x = _plain(x) if isinstance(x, np.ndarray) else np.asarray(x)
        t = x.view(_tracked(type(x)))
        t.node, t.tape = self.count, self
        self.count += 1
        return t

    # -- forward ----------------------------------------------------------------------

    def add(self, shapes, nodes, out):
        """out = a + b: the gradient of each tracked operand is dout, summed to its shape."""
        out = self.track(out)
        self.steps.append(("add", list(zip(nodes, shapes)), out.node))
        return out

    def op(self, backward, args: list, out):
        """out = an op of args (arrays or lists of arrays); backward(dout) -> one gradient per
        array of args, lists flattened, in order (None: none)."""
        flat = [a for x in args for a in (x if isinstance(x, (list, tuple)) else [x])]
        if not any(isinstance(a, Tracked) for a in flat):
            return out
        outs = list(out) if isinstance(out, list) else [out]
        outs = [self.track(o) for o in outs]
        nodes = [a.node if isinstance(a, Tracked) else None for a in flat]
        self.steps.append(("op", backward, nodes, [o.node for o in outs],
                           [(o.shape, o.dtype) for o in outs]))
        return outs if isinstance(out, list) else outs[0]

    def kernel(self, name: str, fn, args, kwargs):
        """out = fn(*args, **kwargs), recorded with its tracked inputs by argument name."""
        bound = inspect.signature(fn).bind(*args, **kwargs)
        call = {n: _plain(a) for n, a in bound.arguments.items()}
        if isinstance(call.get("params"), check.Params):  # the kernels' VJPs give these
            call["params"] = check.Params(self.plain_params, call["params"].prefix)
        tracked = {n: a.node for n, a in bound.arguments.items() if isinstance(a, Tracked)}
        params = call.get("params")
        if tracked or (params is not None and check.params_of(params).keys()):
            out = fn(**call)
        else:
            return fn(**call)  # nothing to differentiate (masks, positions)
        outs = tuple(self.track(o) for o in (out if isinstance(out, tuple) else (out,)))
        self.steps.append(("kernel", name, call, tracked, [o.node for o in outs],
                           [(o.shape, o.dtype) for o in outs]))
        return outs if isinstance(out, tuple) else outs[0]

    # -- backward ---------------------------------------------------------------------

    def backward(self, seeds: dict) -> tuple[dict, dict]:
        """Cotangents {node: array} of the outputs -> ({node: gradient}, {path: gradient})."""
        grads, params = dict(seeds), {}

        def give(node, g):
            grads[node] = g if node not in grads else grads[node] + g

        for step in reversed(self.steps):
            if step[0] == "op":
                _, back, nodes, outs, shapes = step
                if any(o in grads for o in outs):
                    douts = [grads[o] if o in grads else np.zeros(*sh)
                             for o, sh in zip(outs, shapes)]
                    for node, g in zip(nodes, back(douts if len(outs) > 1 else douts[0])):
                        if node is not None and g is not None:
                            give(node, g)
                continue
            if step[0] == "add":
                _, operands, out = step
                if out in grads:
                    for node, shape in operands:
                        if node is not None:
                            give(node, _unbroadcast(grads[out], shape))
                continue
            _, name, call, tracked, outs, shapes = step
            if not any(o in grads for o in outs):
                continue
            names = returns_of(name)
            cot = {n: grads[o] for n, o in zip(names, outs) if o in grads}
            if names[0] not in cot:  # the vjps take the first output's cotangent always
                cot[names[0]] = np.zeros(*shapes[0])
            scope = call.get("params")
            if isinstance(scope, check.Params):  # the kernel's own parameters, as a mapping
                call = {**call, "params": {k: scope[k] for k in scope.keys()}}
            gi, gp = vjp_of(self.backend, name)(cot, **call)
            for arg, node in tracked.items():
                give(node, gi[arg])
            scope = check.params_of(scope)
            for path, g in gp.items():
                full = scope.path(path)
                params[full] = g if full not in params else params[full] + g
        return grads, params


def vjp_of(backend, name: str):
    """The backend's ``<name>_vjp`` (NotImplementedComponent, reported missing, without)."""
    return backend.function(f"{name}_vjp", MODULES[name])


class TapeOps:
    """The backend's ops as a composite sees them: those that carry gradients are recorded
    on the tape with their backward pass; the others refuse a tracked array."""

    def __init__(self, ops, tape: Tape):
        self._ops, self.tape = ops, tape

    def tanh(self, x):
        """y = tanh x:  dx = dy (1 - y^2)."""
        y = self._ops.tanh(_plain(x))
        return self.tape.op(lambda g: [g * (1 - y * y)], [x], y)

    def matmul(self, a, b):
        """y = a b:  da = dy b^T,  db = a^T dy (summed over a's batch axes)."""
        pa, pb = _plain(a), _plain(b)

        def back(g):
            return [_unbroadcast(g @ np.swapaxes(pb, -1, -2), pa.shape),
                    _unbroadcast(np.swapaxes(pa, -1, -2) @ g, pb.shape)]
        return self.tape.op(back, [a, b], self._ops.matmul(pa, pb))

    def concat(self, xs, axis):
        """dx_i = the slice of dy that x_i fills."""
        plain = [_plain(x) for x in xs]
        cuts = np.cumsum([x.shape[axis] for x in plain])[:-1]
        return self.tape.op(lambda g: np.split(g, cuts, axis=axis), [list(xs)],
                            self._ops.concat(plain, axis))

    def stack(self, xs, axis):
        return self.tape.op(lambda g: list(np.moveaxis(g, axis, 0)), [list(xs)],
                            self._ops.stack([_plain(x) for x in xs], axis))

    def unstack(self, x, axis):
        return self.tape.op(lambda gs: [np.stack(gs, axis=axis)], [x],
                            list(self._ops.unstack(_plain(x), axis)))

    def take_rows(self, x, index):
        """y[b] = x[b, index[b]]:  dx[b, index[b]] = dy[b], 0 elsewhere."""
        px = _plain(x)

        def back(g):
            dx = np.zeros(px.shape, dtype=g.dtype)
            dx[np.arange(px.shape[0]), np.asarray(index)] = g
            return [dx, None]
        return self.tape.op(back, [x, index], self._ops.take_rows(px, index))

    def where(self, c, a, b):
        """da = dy where c, db = dy elsewhere (each summed to its shape)."""
        def back(g):
            return [None] + [None if not isinstance(v, np.ndarray) else
                             _unbroadcast(np.where(keep, g, 0), np.shape(v))
                             for v, keep in ((a, c), (b, np.logical_not(c)))]
        return self.tape.op(back, [c, a, b], self._ops.where(c, _plain(a), _plain(b)))

    def split_heads(self, x, heads):
        """A permutation, (B, T, H*K) -> (B, H, T, K):  dx = merge_heads(dy)."""
        return self.tape.op(lambda g: [self._ops.merge_heads(g)], [x],
                            self._ops.split_heads(_plain(x), heads))

    def merge_heads(self, x):
        """A permutation, (B, H, T, V) -> (B, T, H*V):  dx = split_heads(dy, H)."""
        heads = x.shape[1]
        return self.tape.op(lambda g: [self._ops.split_heads(g, heads)], [x],
                            self._ops.merge_heads(_plain(x)))

    def falses(self, shape, like=None):
        """A constant: ``like`` gives only the device, and gets no gradient."""
        return self._ops.falses(shape, _plain(like))

    def floating(self, name, x, like=None):
        out = self._ops.floating(name, _plain(x), _plain(like))
        return x if isinstance(x, Tracked) else out

    def cast(self, x, like):
        if isinstance(x, Tracked):
            if x.dtype != like.dtype:
                raise NotImplementedComponent("the composite tape casts no tracked array")
            return x
        return self._ops.cast(x, like)

    def __getattr__(self, name):
        op = getattr(self._ops, name)

        def untracked(*args, **kwargs):
            if any(isinstance(a, Tracked) for a in list(args) + list(kwargs.values())):
                raise NotImplementedComponent(f"the composite tape has no backward for "
                                              f"ops.{name}")
            return op(*args, **kwargs)
        return untracked


class TapeKernels(Kernels):
    """A backend's kernels as a composite sees them, every call recorded on ``tape``."""

    def __init__(self, tape: Tape):
        super().__init__(tape.backend.package)
        self.tape = tape
        self._ops = TapeOps(importlib.import_module(f"{self.package}.ops"), tape)

    def __getattr__(self, name: str):
        from . import shared

        if name not in MODULES:
            raise AttributeError(f"composites call no spec function {name!r}")
        family = shared().get(name)
        if family is not None and not _has_vjp(self.tape.backend, name):
            fn = getattr(family(self), name)  # expanded: its kernels go on this tape
        else:
            kernel = self.tape.backend.function(name, MODULES[name])

            def fn(*args, **kwargs):
                return self.tape.kernel(name, kernel, args, kwargs)
        setattr(self, name, fn)
        return fn


def _as(a, dtype):
    """a in dtype, keeping its array class."""
    a = a if isinstance(a, np.ndarray) else np.asarray(a)
    return a if a.dtype == dtype else a.astype(dtype)


def _has_vjp(backend, name: str) -> bool:
    try:
        vjp_of(backend, name)
    except NotImplementedComponent:
        return False
    return True


def composite_vjp(backend, name: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
    """The VJP of the shared composite ``name`` over the backend's kernels (found by
    ``backend.function``): run it on a tape, seed each output's cotangent, replay the
    kernels' VJPs in reverse."""
    from . import shared

    tape = Tape(backend)
    kernels = TapeKernels(tape)
    call = dict(call)
    store = call.get("params") or {}
    tape.plain_params = dict(store)
    leaves = {path: tape.track(w) for path, w in store.items()}  # read by the composite itself
    if "params" in call:
        call["params"] = leaves
    inputs = [n for n, a in call.items()
              if n != "params" and isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    for n in inputs:
        call[n] = tape.track(call[n])
    out = getattr(shared()[name](kernels), name)(**call)
    outs = out if isinstance(out, tuple) else (out,)
    seeds = {}
    for n, o in zip(returns_of(name), outs):
        if n in cotangents and isinstance(o, Tracked):
            c = _as(cotangents[n], o.dtype)
            seeds[o.node] = c if o.node not in seeds else seeds[o.node] + c
    grads, gparams = tape.backward(seeds)
    grad_inputs = {}
    for n in inputs:
        a = call[n]
        grad_inputs[n] = _as(_plain(grads.get(a.node, np.zeros(a.shape))), a.dtype)
    for path, leaf in leaves.items():
        if leaf.node in grads:
            g = _plain(grads[leaf.node])
            gparams[path] = g if path not in gparams else gparams[path] + g
    grad_params = {path: _as(gparams.get(path, np.zeros(np.shape(w))), w.dtype)
                   for path, w in store.items()}
    return grad_inputs, grad_params
