"""Small JAX helpers shared by the component modules: dtype checks and the masked
weighted sum.

Every array argument goes through one of these, so a wrong dtype raises DTypeError
naming the argument before JAX would promote it silently (JAX mixes float32 and float64
without complaint). NumPy arrays are accepted and become JAX arrays.
"""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np
from attnspec.spec.errors import ConfigError, DTypeError

from .. import _checks as check


def _transfer():
    """``(x, device, committed) -> jax.Array``: the one host-to-device copy that
    ``jax.device_put`` ends in (``pxla.batched_device_put``), without its ~15 us of Python
    around it per call (a tenth of the conformance suite's time on the CPU went there);
    ``jax.device_put`` itself where this jax has no such function (private to jax)."""
    try:
        from jax._src import core as jcore
        from jax._src.interpreters import pxla
        from jax._src.sharding_impls import SingleDeviceSharding
        put, default = pxla.batched_device_put, pxla.get_default_device
        jcore.ShapedArray((), np.float32)
    except (ImportError, AttributeError, TypeError):
        return lambda x, device, committed: jax.device_put(x, device)
    sharding = functools.lru_cache(maxsize=None)(SingleDeviceSharding)

    def transfer(x, device, committed):
        device = default() if device is None else device
        return put(jcore.ShapedArray(x.shape, x.dtype), sharding(device), [x], [device],
                   committed=committed)
    return transfer


_put = _transfer()


def host(x, dtype=None):
    """A NumPy value on JAX's default device, compiling nothing (in jax 0.10 ``jnp.asarray``
    of a NumPy array compiles a staging computation for every new shape)."""
    x = np.asarray(x)
    return to_device(x if dtype is None else x.astype(dtype))


def to_device(x: np.ndarray, device=None):
    """The NumPy array x on ``device`` (committed to it, as ``jax.device_put(x, device)``), or
    on the default device (uncommitted, as ``jax.device_put(x)``)."""
    x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
    return _put(x, device, device is not None)


def concrete(x):
    """x's value where it is known: x itself when it is not a tracer; under ``jax.vjp`` (or
    ``jax.jvp``) of concrete arrays, the concrete primal inside the tracer; None where the
    value is not known yet (``jax.jit``). The value checks read it, so they run inside the
    suite's ``jax.vjp`` with no concrete forward call before it."""
    while isinstance(x, jax.core.Tracer):
        x = getattr(x, "primal", None)  # JVPTracer, LinearizeTracer
        if x is None:
            return None
    return x


def array(name: str, x):
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float, bool)):
        return host(x)
    raise DTypeError(f"{name} must be a jax.Array (or a NumPy array), got {type(x).__name__}")


def floating(name: str, x, like=None):
    """A floating array, or DTypeError naming the argument; with ``like``, of like's dtype."""
    x = check.floating_dtype(name, array(name, x))
    if like is not None and x.dtype != like.dtype:
        raise DTypeError(f"{name} has dtype {x.dtype} but the input has {like.dtype}")
    return x


def boolean(name: str, x):
    x = array(name, x)
    if x.dtype != jnp.bool_:
        raise DTypeError(f"{name} must be boolean (True = may attend), got {x.dtype} "
                         f"with shape {x.shape}")
    return x


def integers(name: str, x):
    x = array(name, x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise DTypeError(f"{name} must hold integer token ids, got {x.dtype} with shape {x.shape}")
    return x


def const(x, value):
    """``value`` as a scalar of x's dtype (a NumPy scalar: not weakly typed)."""
    return np.asarray(value, dtype=x.dtype)[()]


def _masked_sum(weights, v):
    terms = weights[..., :, :, None] * v[..., None, :, :]  # (..., T, S, V)
    return jnp.sum(jnp.where((weights != 0)[..., None], terms, 0), axis=-2)  # (..., T, V)


def weighted_sum(weights, v, finite=None):
    """out[..., i, :] = sum over the j with weights[..., i, j] != 0 of weights[..., i, j] v[..., j, :]
    (inside a jit).

    A key of weight 0 (masked) is left out, not multiplied by 0, so a NaN or inf in
    its value cannot reach the output (0 * NaN = NaN); the (..., T, S, V) products are
    formed only when v holds one (lax.cond runs one branch). ``finite`` (static), where the
    caller has read v on the host: the one branch, so the program holds only it (the
    cond's two branches cost ~30 % more to compile).
    """
    if finite is not None:
        return jnp.matmul(weights, v) if finite else _masked_sum(weights, v)
    return jax.lax.cond(jnp.all(jnp.isfinite(v)), jnp.matmul, _masked_sum, weights, v)


def same_device(name: str, x, like) -> None:
    """Every array of this backend is on its one device: nothing to check."""


# -- the attention path -----------------------------------------------------------------------
# "explicit" (default): softmax(q k^T) v written out, weights returned. "fused": the
# composites called without a trace compute no weights, and sdpa then runs
# jax.nn.dot_product_attention (attention.py, _fused) where it agrees with the spec.
_attention: ContextVar[str] = ContextVar("attnspec_jax_attention", default="explicit")
_skip_weights: ContextVar[bool] = ContextVar("attnspec_jax_skip_weights", default=False)


@contextlib.contextmanager
def attention_path(attention: str = "fused"):
    """Public: the attention path of the functions called inside (a context variable: per
    thread and per asyncio task)."""
    if attention not in ("explicit", "fused"):
        raise ConfigError(f"attention_path: attention must be 'explicit' or 'fused', "
                          f"got {attention!r}")
    token = _attention.set(attention)
    try:
        yield attention
    finally:
        _attention.reset(token)


def skip_weights() -> bool:
    return _skip_weights.get()


@contextlib.contextmanager
def skipping_weights():
    """sdpa inside returns no weights and takes jax.nn.dot_product_attention where it agrees
    with the spec (what the composites do under the fused path)."""
    token = _skip_weights.set(True)
    try:
        yield
    finally:
        _skip_weights.reset(token)


def no_weights_unless_traced(fn):
    """A bound composite: under the fused path and with no ``trace`` asked for, nothing
    above the attention reads its weights, so sdpa returns none."""
    @functools.wraps(fn)
    def composite(*args, **kwargs):
        if _attention.get() != "fused" or kwargs.get("trace") is not None:
            return fn(*args, **kwargs)
        with skipping_weights():
            return fn(*args, **kwargs)
    return composite
