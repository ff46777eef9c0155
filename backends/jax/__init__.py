"""The JAX backend: the whole stack on the CPU (float64, float32) and on a GPU
(also float16 and bfloat16), in ``jax.numpy``, with the kernels that pay for it
compiled by ``jax.jit`` (one compilation per shape, dtype and attribute set, reused).

Importing this package imports jax and **turns on float64 for the whole process**
(``jax.config.update("jax_enable_x64", True)``): without it JAX silently computes a
float64 request in float32. Nothing else in attnspec imports jax.

Devices: ``cpu``, and ``gpu`` (alias ``cuda``) when JAX sees a GPU (install
``jax[cuda12]``). Backend options (``--backend-option KEY=VALUE``):
  device=NAME          the device for functions with no array input (default: the last
                       device asked of ``asarray``, else ATTNSPEC_DEVICE, else cpu);
  compile_cache=DIR    JAX's persistent compilation cache in DIR (process-wide; also from
                       ATTNSPEC_JAX_COMPILE_CACHE; a relative DIR is taken from the folder
                       `attnspec` was called from): the suite's shapes are the same on every
                       run (the ci hypothesis profile is derandomised), so a second run
                       compiles almost nothing. off: none. Default: none for a backend
                       made in your code; `attnspec verify --backend jax` sets
                       ATTNSPEC_JAX_COMPILE_CACHE to ~/.cache/attnspec/jax-compile
                       unless it is set (empty: off).
  compile=fast|default how XLA compiles, for the whole process (also from ATTNSPEC_JAX_COMPILE;
                       the process's first backend decides, a later one asking otherwise is a
                       ConfigError). fast (the default): FAST_COMPILE is added to XLA_FLAGS
                       (a flag already there wins): no LLVM optimisation, the elemental
                       emitters, one LLVM module per program (not split for parallel
                       codegen: -28 % XLA time per program on the suite's kernels);
                       compiling is ~3x quicker and the compiled code ~5x slower
                       (benchmarks/bench_jax.py); and DROP_LOWERINGS_EVERY lowerings in a
                       row share one MLIR context (_share_mlir_contexts; JAX makes one per
                       program). The spec's arrays are tiny, so compiling is nearly all of
                       a suite run's time. default: XLA as configured, JAX's own MLIR
                       contexts (for timing kernels).
  attention=explicit|fused  explicit (the default): softmax(q k^T) v written out. fused: the
                       composites (layers, models, decoding) called without a trace compute
                       no weights, and their attention runs jax.nn.dot_product_attention
                       (is_causal for a causal mask) where it agrees with the spec (finite
                       inputs, rank 4, no bias or soft-cap; a row with no key is set to 0).
                       Outside a backend: ``with attention_path("fused"): ...``.
  buckets=on|off       on (the default; also ATTNSPEC_JAX_BUCKETS; process-wide, the last
                       backend made decides): a kernel called on concrete CPU arrays
                       compiles once per shape bucket, not once per shape (buckets.py),
                       and a composite's glue between its kernels runs on the host
                       (host.py); off: every shape compiles at its own size, all in JAX.

What a long run keeps (see _bound_compiled_executables): every DROP_LOWERINGS_EVERY
compilations the backend drops the MLIR modules JAX keeps after compiling (with JAX's own
contexts each has an MLIR context of its own, ~1.7 MB; as they pile up every later lowering
slows, 6 ms -> 17 ms at 2,000; with compile=fast the modules of one drop share one), and
keeps the executables, so a shape seen before still runs without
compiling. It clears all of JAX's caches only when the process's memory maps pass
MAPS_FRACTION of vm.max_map_count (each executable holds ~10 maps, and a process past
Linux's limit, 65,530 by default, crashes inside XLA: the segfault once seen at 98 % of
the suite), or every CLEAR_EVERY compilations where /proc/self/maps cannot be read.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
from attnspec.spec.errors import ConfigError

from ..base import Backend, returns_of
from . import buckets

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (after x64 is on)

from ._core import attention_path, to_device  # noqa: E402  (attention_path: public)

# No flag here reassociates or approximates floating-point arithmetic (no fast-math): the
# conformance suite passes with and without them. XLA aborts the process on a flag it does
# not know, so they are set only for the jaxlib they were tested with (the `jax` extra's).
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
FAST_COMPILE_JAXLIB = ("0.10.2",)
DROP_LOWERINGS_EVERY = 50
MAPS_FRACTION = 0.6
CLEAR_EVERY = 3000  # where the memory maps cannot be counted
_compiles = [0]  # since the last drop of the lowerings
_since_clear = [0]  # since the last clear of every cache


def _count_compiles(event: str, duration: float, **_) -> None:
    # a lowering: each makes an MLIR module and an executable, compiled or read from the
    # persistent cache
    if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
        _compiles[0] += 1
        _since_clear[0] += 1


def _lowering_caches() -> list:
    """JAX's caches that keep each compiled program's MLIR module (private to jax; the
    ones of the tested jax, none of another's)."""
    from jax._src import pjit
    from jax._src.interpreters import pxla

    found = [getattr(pxla, "_cached_lowering_to_hlo", None), getattr(pjit, "_pjit_lower", None)]
    return [c for c in found if callable(getattr(c, "cache_clear", None))]


def _memory_maps_near_limit() -> bool | None:
    """Whether this process's memory maps pass MAPS_FRACTION of vm.max_map_count (None
    where /proc cannot tell)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            maps = sum(1 for _ in f)
    except (OSError, ValueError):
        return None
    return maps > MAPS_FRACTION * limit


def _bound_compiled_executables() -> None:
    if _compiles[0] < DROP_LOWERINGS_EVERY:
        return
    _compiles[0] = 0
    for cache in _lowering_caches():
        cache.cache_clear()
    near = _memory_maps_near_limit()
    if near or (near is None and _since_clear[0] >= CLEAR_EVERY):
        jax.clear_caches()
        _since_clear[0] = 0


def _fast_compile() -> str:
    """Add FAST_COMPILE to XLA_FLAGS before XLA starts, and share MLIR contexts; what was
    done, in words."""
    import jaxlib
    from jax._src import xla_bridge

    if jaxlib.__version__ not in FAST_COMPILE_JAXLIB:
        return f"jaxlib {jaxlib.__version__} (flags tested on {FAST_COMPILE_JAXLIB}): compile flags unchanged"
    shared = _share_mlir_contexts()
    if xla_bridge.backends_are_initialized():
        return f"XLA already started: compile flags unchanged{shared}"
    given = os.environ.get("XLA_FLAGS", "")
    added = [f for f in FAST_COMPILE if f.split("=")[0] not in given]
    os.environ["XLA_FLAGS"] = " ".join([given, *added]).strip()
    return "fast compile (" + (" ".join(added) or "flags given in XLA_FLAGS") + ")" + shared


def _share_mlir_contexts() -> str:
    """Let DROP_LOWERINGS_EVERY lowerings in a row build their MLIR modules in one context.

    JAX makes a fresh MLIR context for every program it lowers (``make_ir_context``:
    every dialect loaded again, ~2 ms) and frees it with the module (~1 ms): 9 % and 4.5 %
    of the JAX suite's CPU time in one process, where most programs are tiny. A context
    holds only uniqued types and attributes, which any number of modules may share; the
    one handed out is replaced after DROP_LOWERINGS_EVERY lowerings, when the backend
    drops the modules (_bound_compiled_executables), so at most two are alive. The
    lowering is unchanged: the same module text, the same compiled program (tested)."""
    import threading

    from jax._src.interpreters import mlir

    make = getattr(mlir, "make_ir_context", None)
    if make is None or getattr(make, "shared_by_attnspec", False):
        return "" if make is not None else "; MLIR contexts as JAX makes them"
    lock, state = threading.Lock(), {"context": None, "uses": 0}

    def make_ir_context():
        with lock:
            if state["context"] is None or state["uses"] >= DROP_LOWERINGS_EVERY:
                state["context"], state["uses"] = make(), 0
            state["uses"] += 1
            return state["context"]

    make_ir_context.shared_by_attnspec = True
    make_ir_context.made_by_jax = make
    mlir.make_ir_context = make_ir_context
    return f"; one MLIR context per {DROP_LOWERINGS_EVERY} lowerings"


_compile_mode: list = []  # the mode the process's first backend chose, and what it did


def _configure_compile(mode: str) -> str:
    if mode not in ("fast", "default"):
        raise ConfigError(f"jax backend option compile={mode!r}: expected fast or default")
    if not _compile_mode:
        _compile_mode[:] = [mode, _fast_compile() if mode == "fast" else "XLA as configured"]
    elif _compile_mode[0] != mode:
        raise ConfigError(f"jax backend option compile={mode!r}: this process already "
                          f"compiles with compile={_compile_mode[0]} (XLA flags are "
                          f"process-wide)")
    return _compile_mode[1]


DEVICES = ("cpu", "gpu", "cuda")


def _option(options: dict, key: str, env: str, default):
    """A backend option, else the environment variable (unset or empty: not given), else
    ``default``. An option given empty is a ConfigError, not the default in disguise."""
    if key not in options:
        return os.environ.get(env) or default
    value = options[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"jax backend option {key}={value!r}: empty; leave it out for the "
                          f"default ({default or 'none'})")
    return value


def caller_path(path: str) -> str:
    """``path`` made absolute against the caller's folder: `attnspec verify` runs the suite
    from the suite's own folder and says where it was called from in ATTNSPEC_CALLER_CWD."""
    base = os.environ.get("ATTNSPEC_CALLER_CWD") or os.getcwd()
    return os.path.abspath(os.path.join(base, os.path.expanduser(path)))


JAX_DTYPES = {"float64": jnp.float64, "float32": jnp.float32,
              "float16": jnp.float16, "bfloat16": jnp.bfloat16}


class JaxBackend(Backend):
    name = "jax"
    package = __name__

    def __init__(self, **options):
        super().__init__(**options)
        unknown = set(options) - {"device", "compile_cache", "compile", "buckets", "attention"}
        if unknown:
            raise ConfigError(f"unknown jax backend option(s) {sorted(unknown)}; known: device, "
                              f"compile_cache, compile, buckets, attention")
        self.attention = options.get("attention", "explicit")
        if self.attention not in ("explicit", "fused"):
            raise ConfigError(f"jax backend option attention={self.attention!r}: expected "
                              f"explicit or fused")
        # every option is checked before any process-wide setting changes
        on = _option(options, "buckets", "ATTNSPEC_JAX_BUCKETS", "on")
        if on not in ("on", "off"):
            raise ConfigError(f"jax backend option buckets={on!r}: expected on or off")
        mode = _option(options, "compile", "ATTNSPEC_JAX_COMPILE", "fast")
        device = _option(options, "device", "ATTNSPEC_DEVICE", "cpu")
        if device not in DEVICES:
            raise ConfigError(f"jax backend option device={device!r}: expected one of "
                              f"{', '.join(DEVICES)}")
        cache = _option(options, "compile_cache", "ATTNSPEC_JAX_COMPILE_CACHE", None)
        cache = None if cache == "off" else cache
        buckets.enable(on == "on")
        self.compile_note = _configure_compile(mode)
        if not getattr(JaxBackend, "_counting", False):
            jax.monitoring.register_event_duration_secs_listener(_count_compiles)
            JaxBackend._counting = True
        self.default_device = device
        if cache is not None:
            cache = caller_path(cache)
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        self.compile_cache = cache

    _devices = None

    def devices(self) -> list[str]:
        if self._devices is None:
            found = ["cpu"]
            try:
                if jax.devices("gpu"):
                    found += ["gpu", "cuda"]
            except RuntimeError:  # no GPU platform in this jaxlib
                pass
            JaxBackend._devices = found
        return list(self._devices)

    def dtypes(self, device: str) -> list[str]:
        if device in ("gpu", "cuda"):
            return ["float64", "float32", "float16", "bfloat16"]
        return ["float64", "float32"]

    def _device(self, device: str):
        return jax.devices("cpu" if device == "cpu" else "gpu")[0]

    def asarray(self, x, *, dtype: str | None = None, device: str = "cpu"):
        self.check_device(device)
        self.default_device = device
        a = np.asarray(x)
        if a.dtype.kind in "biu" or dtype is None:
            if a.dtype.kind in "iu":
                a = a.astype(np.int64)
        else:
            self.check_dtype(dtype, device)  # DTypeError naming the ones supported there
            a = np.asarray(a, dtype=np.float64).astype(JAX_DTYPES[dtype])
        return to_device(a, self._device(device))  # jax.device_put(a, device), faster

    def to_numpy(self, x) -> np.ndarray:
        if not isinstance(x, jax.Array):
            return np.asarray(x)
        if x.dtype in (jnp.float16, jnp.bfloat16):
            x = x.astype(jnp.float64)
        return np.asarray(x)

    def device_of(self, x) -> str | None:
        if not isinstance(x, jax.Array):
            return None
        platform = next(iter(x.devices())).platform
        if platform == "cpu":
            return "cpu"
        return self.default_device if self.default_device in ("gpu", "cuda") else platform

    def vjp(self, name: str, module: str, call: dict, cotangents: dict) -> tuple[dict, dict]:
        """Gradients by ``jax.vjp`` through the spec function: every float input and
        parameter is a primal, the cotangents pull back through the outputs they name (the
        other outputs get zeros). The primals are concrete, so the bucketed kernels' custom
        VJPs run at bucket sizes (buckets.differentiable), and the checks that read values
        read the tracers' concrete primals (_core.concrete): no forward call before the
        vjp (one was ~10 % of a gradient vector's time)."""
        fn = self.function(name, module)
        floats = {k: a for k, a in call.items()
                  if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)}
        params = dict(call["params"]) if isinstance(call.get("params"), dict) else None
        names = returns_of(name)

        def f(inputs, p):
            out = fn(**{**call, **inputs, **({"params": p} if p is not None else {})})
            return dict(zip(names, out if len(names) > 1 else (out,)))

        _bound_compiled_executables()
        out, pull = jax.vjp(f, floats, params)
        cts = {k: cotangents[k] if k in cotangents  # zeros built on the host: no compile
               else jax.device_put(np.zeros(o.shape, o.dtype), next(iter(o.devices())))
               for k, o in out.items()}
        grad_inputs, grad_params = pull(cts)
        return dict(grad_inputs), dict(grad_params or {})

    def select_device(self, device: str) -> None:
        self.default_device = self.check_device(device)

    def function(self, name: str, module: str):
        """The spec function, run with this backend's device as JAX's default device (so
        that functions with no array input, and the arrays composites create, land on it)."""
        fn = super().function(name, module)

        @functools.wraps(fn)
        def on_device(*args, **kwargs):
            _bound_compiled_executables()
            with jax.default_device(self._device(self.default_device)), \
                    attention_path(self.attention):
                return fn(*args, **kwargs)
        return on_device

    def versions(self) -> dict[str, str]:
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                "devices": ", ".join(str(d) for d in jax.devices())}

    def describe(self) -> str:
        return (f"jax backend, x64 enabled process-wide, default device {self.default_device}, "
                f"compile cache {self.compile_cache or 'none'}, {self.compile_note}, "
                f"shape buckets {'on' if buckets.enabled() else 'off'}")

    def synchronize(self, device: str) -> None:
        (jnp.zeros(()) + 0).block_until_ready()


Backend = JaxBackend  # the name the scaffold's entry point uses
