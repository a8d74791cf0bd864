"""The console over real HTTP on loopback: login, CSRF, Origin and Host checks, escaping, deciding once."""

from __future__ import annotations

import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pollwarden import events as ev
from pollwarden.clock import utcnow
from pollwarden.console import ConsoleServer, is_loopback
from pollwarden.core.contract.parse import load_contract
from pollwarden.core.reasons import Phase
from pollwarden.core.record import new_record
from pollwarden.home.directory import database_path
from pollwarden.home.operating import open_store
from pollwarden.simulator import Simulator
from tests.conftest import install, run_cli

from .conftest import TOKEN, decision, stop_operation

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(http: httpx.Client, page: str = "/decisions") -> str:
    response = http.get(page)
    assert response.status_code == 200, response.text
    found = CSRF.search(response.text)
    assert found is not None
    return found.group(1)


def flash_after(http: httpx.Client, response: httpx.Response) -> str:
    """Follow the 303 after a form, as a browser would, and return the page with its flash message."""
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/decisions"
    page = http.get("/decisions")
    assert page.status_code == 200
    found = re.search(r'<div class="flash (ok|error)" role="status">(.*?)</div>', page.text)
    assert found is not None, page.text
    return f"{found.group(1)}: {found.group(2)}"


def phase_of(home: Path, operation_id: str) -> Phase:
    store = open_store(home, keys="none")
    try:
        stored = store.get(operation_id)
    finally:
        store.close()
    assert stored is not None
    return stored.record.phase


def test_every_page_needs_a_login(console: ConsoleServer) -> None:
    with httpx.Client(base_url=console.url) as http:
        for path in ("/", "/decisions", "/approvals", "/audit", "/operations/anything"):
            response = http.get(path)
            assert response.status_code == 303 and response.headers["location"] == "/login", path
        login = http.get("/login")
        assert login.status_code == 200 and 'name="token"' in login.text
        assert TOKEN not in login.text


def test_a_wrong_token_opens_nothing(console: ConsoleServer) -> None:
    with httpx.Client(base_url=console.url) as http:
        for response in (
            http.get("/login", params={"token": "not-the-token"}),
            http.post("/login", data={"token": TOKEN[:-1]}),
            http.post("/login", data={"token": ""}),
        ):
            assert response.status_code == 403
            assert "set-cookie" not in response.headers
            assert "not this console" in response.text
        assert http.get("/").status_code == 303


def test_login_sets_a_strict_httponly_cookie_and_the_token_never_shows_again(
    home: Path, sim: Simulator, contract_path: Path
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-login", "exp_login")
    log = io.StringIO()
    with ConsoleServer(home, token=TOKEN, log=log) as server, httpx.Client(base_url=server.url) as http:
        response = http.post("/login", data={"token": TOKEN}, headers={"Origin": server.url})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        for path in ("/", "/decisions", "/approvals", "/audit", f"/operations/{stopped.operation_id}", "/login"):
            page = http.get(path, follow_redirects=True)
            assert page.status_code == 200, path
            assert TOKEN not in page.text, path
        # The login URL a person pastes carries the token; the log line of that request does not.
        with httpx.Client(base_url=server.url) as other:
            assert other.get("/login", params={"token": TOKEN}).status_code == 303
    assert "logged in" in log.getvalue()
    assert TOKEN not in log.getvalue()


def test_a_form_without_the_right_csrf_token_is_refused_and_changes_nothing(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-csrf", "exp_csrf")
    url = f"/decisions/{stopped.decision_id}/decide"
    for fields in (
        {"option": "1", "by": "mallory"},
        {"option": "1", "by": "mallory", "csrf": ""},
        {"option": "1", "by": "mallory", "csrf": "x" * 43},
    ):
        response = client.post(url, data=fields)
        assert response.status_code == 403
        assert "CSRF" in response.text and "nothing changed" in response.text
    assert decision(home, stopped.decision_id).status == "open"
    assert phase_of(home, stopped.operation_id) is Phase.STOPPED


def test_a_form_from_another_origin_is_refused_even_with_the_csrf_token(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client, console: ConsoleServer
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-origin", "exp_origin")
    token = csrf_of(client)
    url = f"/decisions/{stopped.decision_id}/decide"
    fields = {"option": "1", "by": "mallory", "csrf": token}
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{console.port + 1}"):
        response = client.post(url, data=fields, headers={"Origin": origin})
        assert response.status_code == 403, origin
        assert "another site" in response.text
    assert decision(home, stopped.decision_id).status == "open"
    # The console's own origin is accepted (as is a form with no Origin header, checked by CSRF alone).
    accepted = client.post(url, data={**fields, "by": "alice"}, headers={"Origin": console.url})
    assert flash_after(client, accepted).startswith("ok: extended operation op-origin")


def test_another_host_name_is_refused(console: ConsoleServer, client: httpx.Client) -> None:
    """A page that rebinds its DNS name to 127.0.0.1 reaches the port, but not the console."""
    response = client.get("/", headers={"Host": f"evil.example:{console.port}"})
    assert response.status_code == 400
    assert client.get("/", headers={"Host": f"localhost:{console.port}"}).status_code == 200


def test_values_from_the_store_and_the_provider_are_escaped(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    contract = load_contract(contract_path)
    script = '<script>alert("job")</script>'
    store = open_store(home)
    try:
        record = new_record(contract, operation_id="op-xss", job_id=script, now=utcnow())
        install(store, contract)
        store.create(record, contract.source_text, ev.Created.prepared(record.summary()))
    finally:
        store.close()
    # A provider that answers with markup as its state: the stop, its decision and the story all carry it.
    markup = "<img src=x onerror=alert(1)>"
    stopped = stop_operation(home, sim, contract_path, "op-state", "exp_state", state=markup)
    pages = [client.get(p).text for p in ("/", "/operations/op-xss", f"/operations/{stopped.operation_id}")]
    pages.append(client.get("/decisions").text)
    for text in pages:
        assert script not in text and markup not in text
        assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(&quot;job&quot;)&lt;/script&gt;" in pages[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[3]
    # The operation id in a link is quoted too.
    assert 'href="/operations/op-xss"' in pages[0]


def test_deciding_by_the_console_extends_once_and_a_second_decide_is_refused(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-decide", "exp_decide")
    page = client.get("/decisions").text
    assert 'Checks used:</span> <span class="v">2 of 2 checks</span>' in page
    assert "request_budget_exhausted" in page
    assert f'action="/decisions/{stopped.decision_id}/decide"' in page
    assert (
        'name="option" value="1">[1] extend by' in page and 'value="3">[3] close' in page and 'value="refuse"' in page
    )
    # inspect is a link to the provider's console that records nothing, not a button
    assert 'href="https://provider.example/jobs/exp_decide" target="_blank" rel="noopener noreferrer"' in page
    token = csrf_of(client)
    url = f"/decisions/{stopped.decision_id}/decide"

    missing_name = client.post(url, data={"option": "1", "by": "  ", "csrf": token})
    assert flash_after(client, missing_name).startswith("error: Type your name")
    assert decision(home, stopped.decision_id).status == "open"

    first = client.post(url, data={"option": "1", "by": "alice", "note": "the export is big", "csrf": token})
    assert flash_after(client, first).startswith("ok: extended operation op-decide: deadline")
    stored = decision(home, stopped.decision_id)
    assert (stored.status, stored.decided_by, stored.option, stored.note) == (
        "decided",
        "alice",
        1,
        "the export is big",
    )
    assert phase_of(home, stopped.operation_id) is Phase.ACTIVE

    second = client.post(url, data={"option": "2", "by": "bob", "csrf": token})
    message = flash_after(client, second)
    assert message.startswith(
        f"error: Decision {stopped.decision_id} was not applied: decision {stopped.decision_id} was already decided"
        " by alice"
    )
    assert "nothing changed" in message
    assert decision(home, stopped.decision_id).decided_by == "alice"
    # The flash is shown once; the decided request moves to "recently decided" and the name is offered again.
    again = client.get("/decisions").text
    assert 'class="flash' not in again
    assert "No open decisions" in again and "alice" in again
    story = client.get("/operations/op-decide").text
    assert "alice chose [1] extend by" in story and "extended: deadline" in story


def test_refusing_and_unknown_decisions(home: Path, sim: Simulator, contract_path: Path, client: httpx.Client) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-refuse", "exp_refuse")
    token = csrf_of(client)
    unknown = client.post("/decisions/dnothing/decide", data={"option": "1", "by": "alice", "csrf": token})
    assert (
        flash_after(client, unknown)
        == "error: Decision dnothing was not applied: no decision &#x27;dnothing&#x27;; `pollwarden decisions` lists"
        " the open ones"
    )
    no_option = client.post(f"/decisions/{stopped.decision_id}/decide", data={"by": "alice", "csrf": token})
    assert flash_after(client, no_option).startswith("error: Choose one of the options")
    bad_option = client.post(
        f"/decisions/{stopped.decision_id}/decide", data={"option": "9", "by": "alice", "csrf": token}
    )
    assert "has no option 9" in flash_after(client, bad_option)
    assert decision(home, stopped.decision_id).status == "open"
    refused = client.post(
        f"/decisions/{stopped.decision_id}/decide", data={"option": "refuse", "by": "carol", "csrf": token}
    )
    assert flash_after(client, refused).startswith(f"ok: refused decision {stopped.decision_id}")
    assert decision(home, stopped.decision_id).status == "refused"
    assert phase_of(home, stopped.operation_id) is Phase.STOPPED


def test_operations_table_and_audit_page(home: Path, sim: Simulator, contract_path: Path, client: httpx.Client) -> None:
    stop_operation(home, sim, contract_path, "op-table", "exp_table")
    table = client.get("/").text
    assert '<a class="mono trunc" href="/operations/op-table" title="op-table">op-table</a>' in table
    assert '<progress value="2" max="2" aria-label="checks"></progress><span class="mono">2/2</span>' in table
    assert "transport 0/3" in table  # the second budget, in words under the first, so the table fits
    assert "request_budget_exhausted" in table and "Decisions (1 open)" in table
    assert "intact" in client.get("/audit").text
    # Change one sealed record behind the store's back: the console reports what `audit verify` reports.
    with sqlite3.connect(database_path(home)) as db:
        db.execute("UPDATE audit_records SET ciphertext = zeroblob(length(ciphertext)) WHERE seq = 2")
    audit = client.get("/audit").text
    assert "TAMPERED" in audit and "<h2>Problems</h2>" in audit


def test_logout_ends_the_session(client: httpx.Client) -> None:
    token = csrf_of(client, "/")
    response = client.post("/logout", data={"csrf": token})
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert "Max-Age=0" in response.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/").status_code == 303


def test_only_loopback_names_count_as_loopback() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.org"))


def test_the_console_command_serves_until_sigterm(home: Path) -> None:
    env = {**os.environ, "POLLWARDEN_HOME": str(home), "CONSOLE_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "console", "--port", "0", "--token-env", "CONSOLE_TOKEN"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.match(r"pollwarden console on (http://127\.0\.0\.1:\d+)/ for ", first)
        assert found is not None, first
        assert proc.stdout.readline().strip() == "log in with the token in $CONSOLE_TOKEN"
        with httpx.Client(base_url=found.group(1)) as http:
            assert http.get("/login", params={"token": TOKEN}).status_code == 303
            assert http.get("/").status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "console stopped" in out
    assert TOKEN not in out + err
    assert "warning" not in err


def test_the_console_command_warns_off_loopback_and_stops_on_ctrl_c(home: Path) -> None:
    env = {**os.environ, "POLLWARDEN_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pollwarden", "console", "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        found = re.match(r"pollwarden console on http://0\.0\.0\.0:(\d+)/ ", proc.stdout.readline())
        assert found is not None
        login = proc.stdout.readline()
        assert login.startswith("log in: http://0.0.0.0:") and "/login?token=" in login
        with httpx.Client(base_url=f"http://127.0.0.1:{found.group(1)}") as http:
            token = login.strip().partition("token=")[2]
            assert http.get("/login", params={"token": token}).status_code == 303
            assert http.get("/").status_code == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "warning: binding to 0.0.0.0, not loopback" in err
    assert "console stopped" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token-env", "NO_SUCH_VARIABLE_SET"], "that environment variable is not set"),
        (["--token-env", "SHORT_TOKEN"], "at least 16 characters"),
        (["--port", "70000"], "must be a whole number from 0 to 65535"),
    ],
)
def test_the_console_command_refuses_bad_input(home: Path, args: list[str], message: str) -> None:
    assert "NO_SUCH_VARIABLE_SET" not in os.environ
    ran = run_cli("console", *args, home=home, env={"SHORT_TOKEN": "short"}, timeout=30)
    assert ran.code == 2
    assert message in ran.stderr


def test_an_unreadable_row_is_listed_apart_and_its_page_says_why(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stop_operation(home, sim, contract_path, "op-good", "exp_good")
    stop_operation(home, sim, contract_path, "op-<b>bad</b>", "exp_bad")
    with sqlite3.connect(database_path(home)) as db:
        db.execute("UPDATE operations SET record = '<script>' WHERE operation_id = 'op-<b>bad</b>'")
    table = client.get("/")
    assert table.status_code == 200 and 'href="/operations/op-good"' in table.text
    assert (
        "<h2>Unreadable</h2>" in table.text
        and "<code>op-&lt;b&gt;bad&lt;/b&gt;</code>: the record is not JSON" in table.text
    )
    assert "<script>" not in table.text
    page = client.get("/operations/op-good")
    assert page.status_code == 200
    bad = client.get("/operations/op-%3Cb%3Ebad%3C%2Fb%3E")
    assert bad.status_code == 409 and "cannot be read (the record is not JSON)" in bad.text, bad.text
