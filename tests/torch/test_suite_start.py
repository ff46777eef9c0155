"""What a torch suite process pays before its first test (issue 27 item 3): listing the
backend's extra checks must not import transformers (~5 CPU s a process; only the
transformers checks need it, when they run)."""

import subprocess
import sys

import pytest

pytest.importorskip("torch")

LIST_CHECKS = """
import sys
from attnspec.backends import get_backend
names = [name for name, _ in get_backend("torch").extra_checks("cpu")]
assert any(n.startswith("agree/transformers") for n in names), names
print("transformers" in sys.modules)
"""


def test_listing_the_torch_extra_checks_imports_no_transformers():
    p = subprocess.run([sys.executable, "-c", LIST_CHECKS], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "False", "listing the checks imported transformers"


def test_the_suite_freezes_the_collector_unless_told_not_to(monkeypatch):
    import gc

    from attnspec.conformance.plugin import freeze_garbage_collector

    try:
        monkeypatch.setenv("ATTNSPEC_GC_FREEZE", "0")
        gc.unfreeze()
        freeze_garbage_collector()
        assert gc.get_freeze_count() == 0
        monkeypatch.delenv("ATTNSPEC_GC_FREEZE")
        freeze_garbage_collector()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
