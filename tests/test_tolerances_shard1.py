"""The derivation of tests/test_tolerances.py, shard 1 of 2: every tolerance of
the components derive.shards() deals to it has >= 1.5x headroom over every correct evaluation
order of tests/orders.py, and every planted bug not listed as uncatchable fails some vector
of its component (`benchmarks/tolerances.py --check` judges all the components in one run).
A file per shard: tox's numpy environment hands each file to one pytest-xdist worker."""

from attnspec.spec.vectors import default_spec

from . import derive
from .mutants import catalogue


def test_every_tolerance_has_headroom_and_no_planted_bug_goes_unnoticed():
    # (not named *caught*: tests/mutants.py:catalogue runs such tests to harvest their bugs)
    found = derive.shard_problems(default_spec(), 0, catalogue())
    assert not found, "\n".join(found[:20])
