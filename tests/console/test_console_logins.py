"""A broker's console: only a one-time link an approver asked for lets anyone in, bound to that user (issue 22)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pollwarden.console import ConsoleServer
from pollwarden.console.logins import LOGIN_LINK_SECONDS, OneTimeLogins

from .conftest import TOKEN
from .test_console_approvals import answer, csrf_of, grant_of, request_call


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def brokered(home: Path, clock: Clock) -> Iterator[ConsoleServer]:
    with ConsoleServer(home, token=TOKEN, logins=OneTimeLogins(clock)) as server:
        yield server


def _browser(console: ConsoleServer) -> httpx.Client:
    return httpx.Client(base_url=console.url, timeout=10)


def test_a_link_logs_its_user_in_once_and_decides_as_them(home: Path, brokered: ConsoleServer) -> None:
    link = brokered.login_link("alice")
    assert link.startswith(f"{brokered.url}/login?once=")
    request_call(home, "c1", "sess-1")
    with _browser(brokered) as http:
        opened = http.get(link.removeprefix(brokered.url))
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        said = answer(http, "c1", {"csrf": csrf_of(http), "answer": "approve", "by": "alice"})
        assert said.startswith("ok:"), said
    assert grant_of(home, "c1").decided_by == "alice"
    with _browser(brokered) as again:
        spent = again.get(link.removeprefix(brokered.url))
        assert spent.status_code == 403 and "spent, expired" in spent.text
        assert again.get("/approvals").status_code == 303  # not logged in: to the login page


def test_a_form_naming_someone_else_is_refused(home: Path, brokered: ConsoleServer) -> None:
    request_call(home, "c2", "sess-2")
    with _browser(brokered) as http:
        assert http.get(brokered.login_link("alice").removeprefix(brokered.url)).status_code == 303
        said = answer(http, "c2", {"csrf": csrf_of(http), "answer": "approve", "by": "mallory"})
        assert said == "error: You are logged in as alice; 'Decided by' must be you. Nothing changed."
        assert grant_of(home, "c2").status == "pending"
        empty = answer(http, "c2", {"csrf": csrf_of(http), "answer": "refuse", "by": ""})
        assert empty.startswith("ok:"), empty
    assert grant_of(home, "c2").decided_by == "alice"


def test_an_expired_link_and_the_token_are_refused(brokered: ConsoleServer, clock: Clock) -> None:
    link = brokered.login_link("alice").removeprefix(brokered.url)
    clock.now += LOGIN_LINK_SECONDS + 1
    with _browser(brokered) as http:
        expired = http.get(link)
        assert expired.status_code == 403 and "console-login --connect" in expired.text
        by_token = http.get("/login", params={"token": TOKEN})
        assert by_token.status_code == 403
        assert "As an approver, run" in http.get("/login").text


def test_an_ordinary_console_takes_no_links(console: ConsoleServer) -> None:
    with pytest.raises(RuntimeError):
        console.login_link("alice")
    with _browser(console) as http:
        assert http.get("/login", params={"once": "anything"}).status_code == 200  # the token page, unchanged
