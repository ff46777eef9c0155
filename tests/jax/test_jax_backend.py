"""The JAX backend's own settings: compile mode and the bound on what compiling keeps.

Each test that depends on how XLA starts runs in a fresh interpreter (XLA flags are
process-wide and read once)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from attnspec.spec.errors import ConfigError

jax = pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")

import attnspec.backends.jax as J  # noqa: E402


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ATTNSPEC_JAX_COMPILE")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)


def test_fast_compile_sets_its_flags_before_xla_starts_and_computes_correctly():
    r = _fresh("import os, numpy as np\n"
               "from attnspec.backends import get_backend\n"
               "b = get_backend('jax')\n"
               "y = b.function('softmax', 'attention')(b.asarray(np.array([0.0, np.log(3.0)]),"
               " dtype='float64'))\n"
               "print(os.environ['XLA_FLAGS']); print(b.describe()); print(b.to_numpy(y))")
    assert r.returncode == 0, r.stderr
    flags, describe, values = r.stdout.splitlines()
    assert all(f in flags.split() for f in J.FAST_COMPILE)
    assert "fast compile" in describe
    np.testing.assert_allclose(np.array(values.strip("[]").split(), float), [0.25, 0.75],
                               rtol=1e-15)


def test_a_flag_already_in_xla_flags_wins():
    r = _fresh("import os\nos.environ['XLA_FLAGS'] = '--xla_backend_optimization_level=2'\n"
               "from attnspec.backends import get_backend\nget_backend('jax')\n"
               "print(os.environ['XLA_FLAGS'])")
    assert r.returncode == 0, r.stderr
    flags = r.stdout.split()
    assert "--xla_backend_optimization_level=2" in flags
    assert "--xla_backend_optimization_level=0" not in flags


def test_compile_default_leaves_xla_alone_and_a_later_fast_is_refused():
    r = _fresh("import os\nfrom attnspec.backends import get_backend\n"
               "from attnspec.spec.errors import ConfigError\n"
               "b = get_backend('jax', compile='default')\n"
               "print(os.environ.get('XLA_FLAGS', '<none>'))\n"
               "try:\n    get_backend('jax', compile='fast')\n"
               "except ConfigError as e:\n    print('refused:', e)")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == "<none>"
    assert second.startswith("refused:") and "compile='fast'" in second and "default" in second


SHARED = """
import numpy as np, jax, jax.numpy as jnp
from jax._src.interpreters import mlir
from attnspec.backends import get_backend
import attnspec.backends.jax as J
b = get_backend('jax')
print(mlir.make_ir_context.shared_by_attnspec, 'MLIR context' in b.describe())
def f(x, y):
    return jnp.tanh(x @ y.T).sum(-1) / 3.0
def lowered(n):
    return jax.jit(f).lower(np.ones((n, 5)), np.ones((4, 5)))
shared = [lowered(n) for n in range(2, 2 + J.DROP_LOWERINGS_EVERY + 1)]
contexts = [l.compiler_ir().context for l in shared]
runs = [1]
for a, c in zip(contexts, contexts[1:]):
    runs[-1:] = [runs[-1] + 1] if c is a else [runs[-1], 1]
print(len(runs), max(runs) == J.DROP_LOWERINGS_EVERY, len({id(c) for c in contexts}))
mlir.make_ir_context = mlir.make_ir_context.made_by_jax
jax.clear_caches()  # lowered again, not found in JAX's lowering cache
by_jax = [lowered(n) for n in (2, 7)]
print(by_jax[0].compiler_ir().context is by_jax[1].compiler_ir().context)
print(all(a.as_text() == b.as_text() for a, b in zip([shared[0], shared[5]], by_jax)))
x = np.random.default_rng(0).standard_normal((7, 5))
print(np.array_equal(shared[5].compile()(x, np.ones((4, 5))), by_jax[1].compile()(x, np.ones((4, 5)))))
"""


def test_fast_compile_lowers_drop_lowerings_every_programs_in_one_mlir_context():
    r = _fresh(SHARED)
    assert r.returncode == 0, r.stderr
    installed, one_context, jax_own, same_text, same_values = r.stdout.splitlines()
    assert installed == "True True"
    # DROP_LOWERINGS_EVERY + 1 lowerings in a row: two runs of one context each, the
    # longest DROP_LOWERINGS_EVERY long, two contexts in all
    assert one_context == "2 True 2"
    assert jax_own == "False"  # JAX's own make_ir_context: one context per lowering
    assert same_text == "True" and same_values == "True"


def test_compile_default_keeps_jax_s_mlir_contexts():
    r = _fresh("from jax._src.interpreters import mlir\nfrom attnspec.backends import get_backend\n"
               "get_backend('jax', compile='default')\n"
               "print(getattr(mlir.make_ir_context, 'shared_by_attnspec', False))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_an_unknown_compile_mode_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="compile='quick'"):
        J.JaxBackend(compile="quick")


def _softmax_at_new_shapes(backend, count):
    """``count`` compilations of the softmax kernel (buckets off: one per shape)."""
    softmax = backend.function("softmax", "attention")
    for n in range(1, count + 1):
        softmax(backend.asarray(np.zeros(n + 40 + 100 * count), dtype="float64"))


def _modules_kept() -> int:
    return sum(c.cache_info().currsize for c in J._lowering_caches())


def test_the_lowerings_are_dropped_and_the_executables_kept(monkeypatch):
    from attnspec.backends.jax import attention

    backend = J.JaxBackend(buckets="off")
    monkeypatch.setattr(J, "DROP_LOWERINGS_EVERY", 3)
    monkeypatch.setattr(J, "_memory_maps_near_limit", lambda: False)
    J._compiles[0] = 0
    before = attention._softmax._cache_size()
    _softmax_at_new_shapes(backend, 3)
    assert _modules_kept() >= 3  # each lowering's MLIR module, kept by JAX's caches
    softmax = backend.function("softmax", "attention")
    softmax(backend.asarray(np.zeros(1 + 40 + 300), dtype="float64"))  # seen: no compilation
    assert J._compiles[0] == 0  # the call found 3 compilations and dropped their lowerings
    assert _modules_kept() == 0
    # and kept every executable: the shapes seen before run without compiling
    assert attention._softmax._cache_size() == before + 3


@pytest.mark.parametrize("near, clears", [(True, True), (False, False)])
def test_every_cache_is_cleared_when_the_memory_maps_near_the_limit(monkeypatch, near, clears):
    from attnspec.backends.jax import attention

    backend = J.JaxBackend(buckets="off")
    monkeypatch.setattr(J, "DROP_LOWERINGS_EVERY", 2)
    monkeypatch.setattr(J, "_memory_maps_near_limit", lambda: near)
    J._compiles[0] = 0
    _softmax_at_new_shapes(backend, 4)
    assert (attention._softmax._cache_size() < 4) is clears


def test_without_proc_the_caches_are_cleared_every_clear_every_compilations(monkeypatch):
    from attnspec.backends.jax import attention

    backend = J.JaxBackend(buckets="off")
    monkeypatch.setattr(J, "DROP_LOWERINGS_EVERY", 1)
    monkeypatch.setattr(J, "CLEAR_EVERY", 3)
    monkeypatch.setattr(J, "_memory_maps_near_limit", lambda: None)
    J._compiles[0] = J._since_clear[0] = 0
    _softmax_at_new_shapes(backend, 5)
    assert J._since_clear[0] < 3 + 1
    assert attention._softmax._cache_size() < 5


def test_the_memory_maps_are_counted_here():
    assert J._memory_maps_near_limit() is False  # Linux: /proc answers, far from the limit


def test_the_lowering_caches_of_the_tested_jax_are_found():
    # a jax that renamed them would keep every MLIR module: fail here, not slow down quietly
    assert len(J._lowering_caches()) == 2


def test_value_checks_read_the_concrete_primals_under_jax_vjp_and_are_skipped_under_jit():
    """backend.vjp runs no forward call before jax.vjp: the checks that read values read the
    tracers' concrete primals, so a bad value is refused inside the vjp as in a plain call."""
    import jax
    import jax.numpy as jnp
    from attnspec.backends.jax import ops
    from attnspec.spec.errors import DomainError

    def f(x):
        ops.value_check(ops.all_(x >= 0), lambda v: f"x must be >= 0, got {v}", x)
        return x * 2

    jax.vjp(f, jnp.ones(3))
    with pytest.raises(DomainError, match=r"x must be >= 0, got \[-1. -1. -1.\]"):
        jax.vjp(f, -jnp.ones(3))
    assert np.asarray(jax.jit(f)(-jnp.ones(3))).tolist() == [-2, -2, -2]  # not known: skipped
    backend = J.JaxBackend()
    w = backend.asarray(np.array([[0.5, -0.5]]), dtype="float64")
    ct = backend.asarray(np.ones(1), dtype="float64")
    with pytest.raises(DomainError, match="weights must be finite and >= 0"):
        backend.vjp("attention_entropy", "attention", {"weights": w}, {"entropy": ct})
