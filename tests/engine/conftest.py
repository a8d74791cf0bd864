"""The engine tests run on both backends with the store suite's fixtures."""

import math

import pytest

from pollwarden.engine import learning
from tests.store.conftest import backend, pg_url, store

__all__ = ["backend", "models_read_at_once", "pg_url", "store"]


@pytest.fixture
def models_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine reads a contract's model again at once after it ended one of its operations. The engine keeps a
    model at least a second of real time (`learning.SETTLE`), longer when a read was slow (`SHARE`), so which of a
    history's jobs were placed by which model, and so the samples the history leaves, depended on how fast the
    machine ran it: a test that compares with a model read afterwards needs the history the same on every run."""
    monkeypatch.setattr(learning, "SETTLE", 0.0)
    monkeypatch.setattr(learning, "SHARE", math.inf)
