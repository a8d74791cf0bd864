"""The shim while the broker is away: each call answered with the socket named, and the session back after."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.support import run

from .users import Broker, Place, Users, shim_agent


def test_no_broker_answers_initialize_with_the_socket_named(users: Users, place: Place, tmp_path: Path) -> None:
    said: list[str] = []

    async def body() -> None:
        try:
            async with shim_agent(users, place.socket, tmp_path / "shim.err"):
                pytest.fail("initialize was answered without a broker")
        except* MCPError as refused:
            said.extend(str(e) for e in _leaves(refused))

    run(body)
    assert len(said) == 1 and said[0].startswith(f"no broker socket at {place.socket} (is `pollwarden broker`"), said


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[BaseException]:
    return [leaf for e in group.exceptions for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])]


def test_the_shim_answers_while_the_broker_is_down_and_reconnects(
    users: Users, place: Place, start: Callable[..., Broker], tmp_path: Path
) -> None:
    broker = start()

    async def body() -> None:
        async with shim_agent(users, place.socket, tmp_path / "shim.err") as agent:
            first = await agent.call("list_operations")
            assert first.ok, first.data
            broker.stop()
            with pytest.raises(MCPError) as down:
                await agent.call("list_operations")
            assert str(place.socket) in str(down.value), down.value
            start()
            again = await agent.call("list_operations")
            assert again.ok, again.data
            assert again.data["session"] != first.data["session"]  # a new session at the broker, same one here

    run(body)
