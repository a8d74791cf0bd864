"""Fixtures of the broker's tests: the OS users (once per test process), and a broker of one test's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pollwarden.simulator import Simulator

from .users import Broker, Place, Users, broker_args, lay_out, make_users, start_broker, why_not


@pytest.fixture(scope="session")
def users() -> Iterator[Users]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    yield from make_users()


@pytest.fixture
def place(users: Users, guarded: Simulator, secret: str) -> Place:
    return lay_out(users, guarded.url, secret)


@pytest.fixture
def start(users: Users, place: Place) -> Iterator[Callable[..., Broker]]:
    """Starts the test's broker (again, after a stop: the same home and socket); every one is stopped at the end."""
    started: list[Broker] = []

    def go(*extra: str, fresh: bool = False, **env: str) -> Broker:
        broker = start_broker(users, broker_args(users, place, *extra), place.socket, place.home, fresh=fresh, **env)
        started.append(broker)
        return broker

    yield go
    for broker in started:
        broker.stop()
