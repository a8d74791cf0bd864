"""The engine tests run on both backends with the store suite's fixtures."""

from tests.store.conftest import backend, pg_url, store

__all__ = ["backend", "pg_url", "store"]
