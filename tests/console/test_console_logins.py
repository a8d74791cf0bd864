"""A broker's console: only a one-time link an approver asked for lets anyone in, bound to that user (issue 22)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pollwarden.console import ConsoleServer
from pollwarden.console.logins import LOGIN_LINK_SECONDS, MAX_LINKS, OneTimeLogins
from pollwarden.simulator import Simulator

from .conftest import TOKEN, decision, stop_operation
from .test_console_approvals import answer, csrf_of, grant_of, request_call
from .test_console_http import csrf_of as decisions_csrf_of
from .test_console_http import flash_after

BY_FIELD = re.compile(r"<input name=\"by\"[^>]*>")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def brokered(home: Path, clock: Clock, log: io.StringIO) -> Iterator[ConsoleServer]:
    with ConsoleServer(home, token=TOKEN, logins=OneTimeLogins(clock), log=log) as server:
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
        assert by_token.status_code == 403 and "takes no token" in by_token.text
        posted = http.post("/login", data={"token": TOKEN}, headers={"Origin": brokered.url})
        assert posted.status_code == 403 and "takes no token" in posted.text
        assert http.get("/decisions").status_code == 303  # still logged out
        assert "As an approver, run" in http.get("/login").text


def test_an_ordinary_console_takes_no_links(console: ConsoleServer) -> None:
    with pytest.raises(RuntimeError):
        console.login_link("alice")
    with _browser(console) as http:
        assert http.get("/login", params={"once": "anything"}).status_code == 200  # the token page, unchanged


def test_a_bound_session_decides_as_its_user_and_no_one_else(
    home: Path, sim: Simulator, contract_path: Path, brokered: ConsoleServer
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-bound", "exp_bound")
    url = f"/decisions/{stopped.decision_id}/decide"
    with _browser(brokered) as http:
        assert http.get(brokered.login_link("alice").removeprefix(brokered.url)).status_code == 303
        page = http.get("/decisions").text
        fields = BY_FIELD.findall(page)
        assert fields and all('value="alice"' in f and " readonly" in f for f in fields), fields
        assert "logged in as alice" in page
        token = decisions_csrf_of(http)
        other = http.post(url, data={"option": "1", "by": "mallory", "csrf": token})
        assert flash_after(http, other) == (
            "error: You are logged in as alice; &#x27;Decided by&#x27; must be you. Nothing changed."
        )
        assert decision(home, stopped.decision_id).status == "open"
        mine = http.post(url, data={"option": "1", "by": "alice", "note": "bigger export", "csrf": token})
        assert flash_after(http, mine).startswith("ok: extended operation op-bound")
    stored = decision(home, stopped.decision_id)
    assert (stored.status, stored.decided_by, stored.note) == ("decided", "alice", "bigger export")


def test_the_approval_form_of_a_bound_session_is_filled_and_read_only(home: Path, brokered: ConsoleServer) -> None:
    request_call(home, "c3", "sess-3")
    with _browser(brokered) as http:
        assert http.get(brokered.login_link("bob").removeprefix(brokered.url)).status_code == 303
        fields = BY_FIELD.findall(http.get("/approvals").text)
        assert fields and all('value="bob"' in f and " readonly" in f for f in fields), fields


def test_an_ordinary_session_types_its_name(home: Path, console: ConsoleServer, client: httpx.Client) -> None:
    request_call(home, "c4", "sess-4")
    page = client.get("/approvals").text
    fields = BY_FIELD.findall(page)
    assert fields and not any("readonly" in f for f in fields), fields
    assert "logged in as" not in page


def test_the_token_url_is_not_offered_by_a_brokers_console(brokered: ConsoleServer) -> None:
    with pytest.raises(RuntimeError, match="one-time links"):
        _ = brokered.login_url


def test_the_log_names_who_logged_in_and_never_a_link(brokered: ConsoleServer, log: io.StringIO) -> None:
    link = brokered.login_link("alice")
    secret = link.rpartition("once=")[2]
    with _browser(brokered) as http:
        assert http.get(link.removeprefix(brokered.url)).status_code == 303
        assert http.get(link.removeprefix(brokered.url)).status_code == 403
    lines = log.getvalue()
    assert "logged in as alice (a one-time link)" in lines, lines
    assert "spent, expired or unknown login link" in lines
    assert secret not in lines


def test_links_are_bounded_and_name_someone() -> None:
    logins = OneTimeLogins(Clock())
    first = logins.mint("alice")
    rest = [logins.mint(f"user{n}") for n in range(MAX_LINKS)]
    assert logins.redeem(first) is None  # the oldest was dropped past the bound
    assert logins.redeem(rest[0]) == "user0" and logins.redeem(rest[0]) is None
    with pytest.raises(ValueError):
        logins.mint("")
