"""The broker's console: an approver's `console-login --connect` link lets them in as themselves; an agent's
asking is refused (issue 22)."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

import httpx

from .users import Broker, Place, Users


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_console_login_is_an_approvers_one_time_link(users: Users, place: Place, start: Callable[..., Broker]) -> None:
    port = _free_port()
    start("--console-port", str(port))
    sock = str(place.socket)
    refused = users.run(users.agent, "console-login", "--connect", sock)
    assert refused.returncode == 2 and "is an agent of this broker" in refused.stderr, refused.stderr
    given = users.run(users.approver, "console-login", "--connect", sock)
    assert given.returncode == 0, given.stderr
    assert f"it logs you in as {users.approver}" in given.stdout
    (link,) = re.findall(r"http://127\.0\.0\.1:\d+/login\?once=\S+", given.stdout)
    with httpx.Client(timeout=10) as http:
        assert http.get(f"http://127.0.0.1:{port}/login").status_code == 200
        assert http.get(link).status_code == 303
        assert http.get(f"http://127.0.0.1:{port}/approvals").status_code == 200
    with httpx.Client(timeout=10) as other:
        assert other.get(link).status_code == 403  # once


def test_the_broker_serves_the_fleet_gauges_from_its_own_home(place: Place, start: Callable[..., Broker]) -> None:
    """`broker --metrics-port`: the fleet's gauges (fleet/gauges.py) from the broker's database, no worker."""
    port = _free_port()
    start("--metrics-port", str(port))
    with httpx.Client(timeout=10) as http:
        scraped = http.get(f"http://127.0.0.1:{port}/metrics").text
    assert "pollwarden_fleet_scrape_ok 1.0" in scraped, scraped
