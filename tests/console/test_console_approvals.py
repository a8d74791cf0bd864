"""The console's /approvals page: agents' approval requests answered by a person, audited as the CLI does."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from pollwarden.cli import main as cli_main
from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer
from pollwarden.home.operating import open_store
from pollwarden.store.base import Grant, agent_log_id

from .test_console_http import CSRF

FLASH = re.compile(r'<div class="flash (ok|error)" role="status">(.*?)</div>')


def request_session(home: Path, grant_id: str, session: str, contract: str = "exports") -> Grant:
    grant = Grant(
        grant_id=grant_id,
        kind="session",
        subject=session,
        scope=contract,
        status="pending",
        requested_at=utcnow(),
        detail={"contract": contract, "first_operation": "op-1", "first_purpose": "status_request", "after": None},
    )
    return _request(home, grant)


def request_call(
    home: Path, grant_id: str, session: str, operation: str = "op-7", job: str = "exp_7", at: datetime | None = None
) -> Grant:
    now = at or utcnow()
    grant = Grant(
        grant_id=grant_id,
        kind="call",
        subject=session,
        scope=operation,
        status="pending",
        requested_at=now,
        detail={
            "contract": "exports",
            "operation": operation,
            "job": job,
            "purpose": "status_request",
            "status_request": 3,
            "max_status_requests": 12,
            "expires_at": (now + timedelta(minutes=5)).isoformat(),
        },
    )
    return _request(home, grant)


def _request(home: Path, grant: Grant) -> Grant:
    store = open_store(home)
    try:
        store.request_grant(grant, agent_log_id(grant.subject))
    finally:
        store.close()
    return grant


def grant_of(home: Path, grant_id: str) -> Grant:
    store = open_store(home, keys="none")
    try:
        grant = store.get_grant(grant_id)
    finally:
        store.close()
    assert grant is not None
    return grant


def session_log(home: Path, session: str) -> list[tuple[str, dict[str, Any]]]:
    """The agent session's audit log, decrypted: (event kind, data) in order."""
    store = open_store(home, keys="read")
    try:
        return [(e.kind, dict(e.data)) for e in store.events(agent_log_id(session))]
    finally:
        store.close()


def csrf_of(http: httpx.Client) -> str:
    page = http.get("/approvals")
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found is not None
    return found.group(1)


def answer(http: httpx.Client, grant_id: str, fields: dict[str, str]) -> str:
    """Post one answer form and follow the 303 as a browser would: the flash message it left, unescaped."""
    response = http.post(f"/approvals/{grant_id}/answer", data=fields)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/approvals"
    page = http.get("/approvals")
    assert page.status_code == 200
    found = FLASH.search(page.text)
    assert found is not None, page.text
    return f"{found.group(1)}: {html.unescape(found.group(2))}"


def test_approve_refuse_and_revoke_are_recorded_in_the_session_log(home: Path, client: httpx.Client) -> None:
    request_session(home, "s-console1", "sess-a")
    request_call(home, "c-console1", "sess-b")
    page = client.get("/approvals").text
    assert "Approvals (2 pending)" in page and "Waiting for a person (2)" in page
    assert 'action="/approvals/s-console1/answer"' in page and 'action="/approvals/c-console1/answer"' in page
    assert "agent session sess-a may call the provider of contract exports" in page
    assert "one status request 3 of 12 for operation op-7 (job exp_7, contract exports), agent session sess-b" in page
    assert '<a class="mono" href="/operations/op-7">op-7</a>' in page
    assert 'name="answer" value="approve"' in page and 'name="answer" value="refuse"' in page
    assert 'value="revoke"' not in page  # nothing is approved yet
    # Every page's navigation says agents are waiting.
    assert "Approvals (2 pending)" in client.get("/").text
    token = csrf_of(client)

    approved = answer(client, "s-console1", {"answer": "approve", "by": "alice", "note": "known agent", "csrf": token})
    assert approved == "ok: approved s-console1: agent session sess-a may call the provider of contract exports"
    session_grant = grant_of(home, "s-console1")
    assert (session_grant.status, session_grant.decided_by) == ("approved", "alice")
    assert session_log(home, "sess-a")[1:] == [
        ("approval_approved", {"grant_id": "s-console1", "by": "alice", "note": "known agent"})
    ]
    assert grant_of(home, "c-console1").status == "pending"

    refused = answer(client, "c-console1", {"answer": "refuse", "by": "bob", "csrf": token})
    assert refused.startswith("ok: refused c-console1: one status request 3 of 12 for operation op-7")
    call_grant = grant_of(home, "c-console1")
    assert (call_grant.status, call_grant.decided_by) == ("refused", "bob")
    assert session_log(home, "sess-b")[1:] == [
        ("approval_refused", {"grant_id": "c-console1", "by": "bob", "note": None})
    ]

    page = client.get("/approvals").text
    assert "No pending approvals" in page and "Approvals (" not in page
    assert "<h2>Approved sessions</h2>" in page and "<h2>Recently answered</h2>" in page
    assert 'name="answer" value="revoke"' in page and 'action="/approvals/s-console1/answer"' in page
    assert 'action="/approvals/c-console1/answer"' not in page  # answered: listed, no longer answerable

    revoked = answer(client, "s-console1", {"answer": "revoke", "by": "alice", "csrf": token})
    assert revoked == "ok: revoked s-console1: agent session sess-a may call the provider of contract exports"
    assert grant_of(home, "s-console1").status == "revoked"
    assert [kind for kind, _ in session_log(home, "sess-a")] == [
        "session_approval_requested",
        "approval_approved",
        "approval_revoked",
    ]
    assert "<h2>Approved sessions</h2>" not in client.get("/approvals").text
    assert "intact" in client.get("/audit").text


def test_the_console_audits_exactly_as_the_cli_does(
    home: Path, client: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same answers, one set by the CLI and one by the console: the same messages and session-log events."""
    token = csrf_of(client)
    now = utcnow()
    for who in ("cli", "web"):
        request_session(home, f"s-{who}", f"sess-{who}")
        request_call(home, f"c-{who}", f"sess-{who}", at=now)
    cli_messages = []
    for argv in (
        ["approve-session", "s-cli", "--by", "alice"],
        ["approve-call", "c-cli", "--by", "alice", "--refuse", "--note", "not now"],
        ["revoke-session", "s-cli", "--by", "alice"],
    ):
        assert cli_main([*argv, "--home", str(home)]) == 0
        cli_messages.append(capsys.readouterr().out.strip())
    web_messages = [
        answer(client, "s-web", {"answer": "approve", "by": "alice", "csrf": token}),
        answer(client, "c-web", {"answer": "refuse", "by": "alice", "note": "not now", "csrf": token}),
        answer(client, "s-web", {"answer": "revoke", "by": "alice", "csrf": token}),
    ]
    assert [m.removeprefix("ok: ") for m in web_messages] == [m.replace("cli", "web") for m in cli_messages]

    def answers(session: str) -> list[tuple[str, dict[str, Any]]]:
        return [(kind, data) for kind, data in session_log(home, session) if kind.startswith("approval_")]

    assert answers("sess-web") == [
        (kind, {**data, "grant_id": data["grant_id"].replace("cli", "web")}) for kind, data in answers("sess-cli")
    ]
    kinds = [
        "session_approval_requested",
        "call_approval_requested",
        "approval_approved",
        "approval_refused",
        "approval_revoked",
    ]
    assert [kind for kind, _ in session_log(home, "sess-web")] == [kind for kind, _ in session_log(home, "sess-cli")]
    assert [kind for kind, _ in session_log(home, "sess-web")] == kinds
    assert answers("sess-web")[1] == ("approval_refused", {"grant_id": "c-web", "by": "alice", "note": "not now"})


def test_a_form_without_the_csrf_token_or_from_another_origin_changes_nothing(
    home: Path, client: httpx.Client, console: ConsoleServer
) -> None:
    request_session(home, "s-csrf", "sess-csrf")
    url = "/approvals/s-csrf/answer"
    for fields in (
        {"answer": "approve", "by": "mallory"},
        {"answer": "approve", "by": "mallory", "csrf": ""},
        {"answer": "approve", "by": "mallory", "csrf": "x" * 43},
    ):
        response = client.post(url, data=fields)
        assert response.status_code == 403
        assert "CSRF" in response.text and "nothing changed" in response.text
    token = csrf_of(client)
    refused = client.post(
        url, data={"answer": "approve", "by": "mallory", "csrf": token}, headers={"Origin": "http://evil.example"}
    )
    assert refused.status_code == 403 and "another site" in refused.text
    with httpx.Client(base_url=console.url) as stranger:  # no session at all: to the login page, nothing read
        assert stranger.post(url, data={"answer": "approve", "by": "mallory", "csrf": token}).status_code == 303
        assert stranger.get("/approvals").headers["location"] == "/login"
    assert grant_of(home, "s-csrf").status == "pending"
    assert [kind for kind, _ in session_log(home, "sess-csrf")] == ["session_approval_requested"]


def test_a_second_answer_and_bad_forms_are_refused_with_a_clear_message(home: Path, client: httpx.Client) -> None:
    request_session(home, "s-twice", "sess-twice")
    request_call(home, "c-twice", "sess-twice")
    token = csrf_of(client)

    nameless = answer(client, "s-twice", {"answer": "approve", "by": "  ", "csrf": token})
    assert nameless.startswith("error: Type your name in 'Decided by'") and "Nothing changed" in nameless
    no_answer = answer(client, "s-twice", {"answer": "maybe", "by": "alice", "csrf": token})
    assert no_answer == "error: Choose Approve, Refuse or Revoke. Nothing changed."
    unknown = answer(client, "s-nothing", {"answer": "approve", "by": "alice", "csrf": token})
    assert unknown == "error: no approval request 's-nothing'; `pollwarden approvals` lists the pending ones"
    wrong_kind = answer(client, "c-twice", {"answer": "revoke", "by": "alice", "csrf": token})
    assert wrong_kind == "error: c-twice is a call approval; answer it with `pollwarden approve-call`"
    assert grant_of(home, "s-twice").status == grant_of(home, "c-twice").status == "pending"

    first = answer(client, "s-twice", {"answer": "approve", "by": "alice", "csrf": token})
    assert first.startswith("ok: approved s-twice")
    before = grant_of(home, "s-twice")
    events = session_log(home, "sess-twice")
    second = answer(client, "s-twice", {"answer": "approve", "by": "bob", "csrf": token})
    assert before.decided_at is not None
    assert (
        second
        == f"error: s-twice is approved by alice at {before.decided_at.isoformat()}, not pending; nothing changed"
    )
    late_refusal = answer(client, "s-twice", {"answer": "refuse", "by": "bob", "csrf": token})
    assert late_refusal.startswith("error: s-twice is approved by alice") and late_refusal.endswith("nothing changed")
    assert grant_of(home, "s-twice") == before
    assert session_log(home, "sess-twice") == events
    # The flash is shown once, and the name last used is offered again in the forms.
    page = client.get("/approvals").text
    assert 'class="flash' not in page and 'name="by" required maxlength="100" value="bob"' in page


def test_revoking_a_session_never_approved_refuses_it_as_the_cli_does(home: Path, client: httpx.Client) -> None:
    request_session(home, "s-early", "sess-early")
    token = csrf_of(client)
    message = answer(client, "s-early", {"answer": "revoke", "by": "alice", "csrf": token})
    assert message == "ok: refused s-early: agent session sess-early may call the provider of contract exports"
    assert grant_of(home, "s-early").status == "refused"
    assert [kind for kind, _ in session_log(home, "sess-early")][-1] == "approval_refused"


def test_values_from_an_agent_are_escaped(home: Path, client: httpx.Client) -> None:
    markup = "<img src=x onerror=alert(1)>"
    request_session(home, "s-x", '<script>alert("s")</script>', contract=markup)
    request_call(home, "c-x", "sess-x", operation='op-"x"', job=markup)
    page = client.get("/approvals").text
    assert markup not in page and "<script" not in page.lower()
    assert "&lt;script&gt;alert(&quot;s&quot;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'href="/operations/op-%22x%22"' in page


def test_no_approvals_yet(client: httpx.Client) -> None:
    page = client.get("/approvals")
    assert page.status_code == 200
    assert "No pending approvals" in page.text and '<a href="/approvals" class="here">Approvals</a>' in page.text
