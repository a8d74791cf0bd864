"""Fixtures of the broker's tests: the OS users (once per test process), and a broker of one test's own."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pollwarden.simulator import Simulator
from tests.mcp.support import agent_contract

from .users import Broker, Users, make_users, start_broker, why_not

TOKEN_ENV = "PW_BROKER_TEST_TOKEN"


@pytest.fixture(scope="session")
def users() -> Iterator[Users]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    yield from make_users()


@dataclass
class Place:
    """One test's broker layout: a home only the service user can enter, root's contracts, the secrets file."""

    root: Path
    home: Path
    contracts: Path
    secrets: Path
    run: Path

    @property
    def socket(self) -> Path:
        return self.run / "broker.sock"


@pytest.fixture
def place(users: Users, guarded: Simulator, secret: str) -> Place:
    root = users.place("broker")
    (root / "home").mkdir()  # empty, as systemd's StateDirectory= makes it
    home = users.own(root / "home", users.service, 0o700)
    contracts = root / "contracts"
    agent_contract(contracts, guarded.url, secret_env=TOKEN_ENV, base_delay="50ms", max_delay="100ms")
    agent_contract(contracts, guarded.url, name="guarded", approval="per_call", secret_env=TOKEN_ENV, base_delay="50ms")
    os.chmod(contracts, 0o755)
    for path in contracts.iterdir():
        os.chmod(path, 0o644)
    secrets_file = root / "secrets"
    secrets_file.write_text(f"# the broker's credentials\n{TOKEN_ENV}={secret}\n", encoding="utf-8")
    users.own(secrets_file, users.service, 0o600)
    run = root / "run"
    run.mkdir()
    users.own(run, users.service, 0o755)
    return Place(root, home, contracts, secrets_file, run)


def broker_args(users: Users, place: Place, *extra: str) -> list[str]:
    return [
        "--home",
        str(place.home),
        "--contracts",
        str(place.contracts),
        "--socket",
        str(place.socket),
        "--agents",
        users.agent,
        "--approvers",
        users.approver,
        "--secrets",
        str(place.secrets),
        *extra,
    ]


@pytest.fixture
def start(users: Users, place: Place) -> Iterator[Callable[..., Broker]]:
    """Starts the test's broker (again, after a stop: the same home and socket); every one is stopped at the end."""
    started: list[Broker] = []

    def go(*extra: str, **env: str) -> Broker:
        broker = start_broker(users, broker_args(users, place, *extra), place.socket, place.home, **env)
        started.append(broker)
        return broker

    yield go
    for broker in started:
        broker.stop()
