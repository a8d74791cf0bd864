"""The engine tests run on both backends with the store suite's fixtures."""

from tests.store.conftest import pg_url, store

__all__ = ["pg_url", "store"]
