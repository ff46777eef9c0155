"""Importing attnspec (the spec, the backends registry, the suite's plugin, the CLI) imports
no framework: each backend imports its own when it is selected."""

import subprocess
import sys

FRAMEWORKS = ("jax", "torch", "tensorflow")
CODE = """
import sys
import attnspec.spec, attnspec.backends, attnspec.conformance.plugin, attnspec.conformance.cli
from attnspec.backends import available
assert {"numpy", "torch", "tensorflow", "jax"} <= set(available()), available()
print(",".join(m for m in %r if m in sys.modules))
"""


def test_importing_attnspec_imports_no_framework():
    r = subprocess.run([sys.executable, "-c", CODE % (FRAMEWORKS,)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported by attnspec itself: {r.stdout.strip()}"
