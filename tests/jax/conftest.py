"""A backend made with buckets=off turns shape bucketing off for the whole process
(backends/jax/buckets.py): each test here gets the setting back as it found it."""

import pytest


@pytest.fixture(autouse=True)
def _buckets_restored(monkeypatch):
    try:
        from attnspec.backends.jax import buckets
    except ImportError:  # no jax here: the tests skip themselves
        return
    monkeypatch.setattr(buckets, "_on", list(buckets._on))
