"""The JAX backend's own settings: compile mode and the bound on compiled executables.

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


def test_an_unknown_compile_mode_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="compile='quick'"):
        J.JaxBackend(compile="quick")


def test_the_caches_are_cleared_every_clear_every_compilations(monkeypatch):
    backend = J.JaxBackend()
    softmax = backend.function("softmax", "attention")
    from attnspec.backends.jax import attention

    monkeypatch.setattr(J, "CLEAR_EVERY", 3)
    J._compiles[0] = 0
    for n in range(1, 6):  # five new shapes: five compilations of the kernel at least
        softmax(backend.asarray(np.zeros(n + 40), dtype="float64"))
    # the count passed 3 at least once, so the caches were cleared and the count restarted
    assert J._compiles[0] < 3 + 2
    assert attention._softmax._cache_size() < 5
