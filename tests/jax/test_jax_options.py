"""The JAX backend's options (issue 20, item 5): an unknown device or an empty option is a
ConfigError naming it, never the default in disguise; a relative compile_cache is the
caller's folder, not the installed package's suite folder that `attnspec verify` runs from."""

import os
import shutil
import subprocess
import sys

import pytest
from attnspec.spec.errors import ConfigError

pytest.importorskip("jax", reason="the jax extra is what tox -e jax-cpu installs")

from attnspec.backends.jax import JaxBackend
from attnspec.conformance.plugin import SUITE_DIR


@pytest.mark.parametrize("options,says", [
    ({"device": "tpu"}, "device='tpu'"),
    ({"compile": ""}, "compile=''"),
    ({"compile_cache": ""}, "compile_cache=''"),
    ({"buckets": ""}, "buckets=''"),
])
def test_a_bad_option_is_a_config_error_naming_it(options, says):
    with pytest.raises(ConfigError, match="jax backend option") as info:
        JaxBackend(**options)
    assert says in str(info.value)


def test_a_relative_compile_cache_is_the_callers_folder(tmp_path):
    name = "attnspec-test-relcache"
    shutil.rmtree(SUITE_DIR / name, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "XLA_FLAGS"))}
    try:
        p = subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
                            "jax", "--dtype", "float64", "-k", "softmax and basic",
                            "--backend-option", f"compile_cache={name}"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        assert any((tmp_path / name).iterdir())
        assert not (SUITE_DIR / name).exists()
    finally:
        shutil.rmtree(SUITE_DIR / name, ignore_errors=True)


def _verify(tmp_path, env, *extra):
    return subprocess.run([sys.executable, "-m", "attnspec.conformance.cli", "verify", "--backend",
                           "jax", "--dtype", "float64", "-k", "softmax and basic", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_verify_keeps_compiled_programs_in_the_user_cache_unless_turned_off(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "XLA_FLAGS"))}
    p = _verify(tmp_path, {**env, "XDG_CACHE_HOME": str(tmp_path / "on")})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    cache = tmp_path / "on" / "attnspec" / "jax-compile"
    assert f"ATTNSPEC_JAX_COMPILE_CACHE={cache}" in p.stdout and any(cache.iterdir())
    p = _verify(tmp_path, {**env, "XDG_CACHE_HOME": str(tmp_path / "off"),
                           "ATTNSPEC_JAX_COMPILE_CACHE": ""})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "ATTNSPEC_JAX_COMPILE_CACHE=" not in p.stdout and not (tmp_path / "off").exists()
    assert JaxBackend(compile_cache="off").compile_cache is None
