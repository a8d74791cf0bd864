"""Items 11 and 19 in the console: provider text shown escaped, raw request paths neutralised in the log,
control characters refused in the operator's name, and a decision that cannot be applied named in the flash."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import httpx

from pollwarden.console import ConsoleServer
from pollwarden.simulator import Simulator
from tests.conftest import write_contract
from tests.console.conftest import TOKEN, decision, stop_operation
from tests.console.test_console_http import csrf_of, flash_after

BIDI = "done \u202egnp.exe\x1b[31m"


def test_bidi_and_controls_from_the_provider_are_escaped_on_pages(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-bidi", "exp_bidi", state=BIDI)
    for page in ("/", f"/operations/{stopped.operation_id}", "/decisions"):
        text = client.get(page).text
        assert "\u202e" not in text and "\x1b" not in text, page
        assert "done \\u202egnp.exe\\x1b[31m" in text, page


def test_the_request_log_neutralises_raw_paths(home: Path) -> None:
    log = io.StringIO()
    with (
        ConsoleServer(home, token=TOKEN, log=log) as console,
        socket.create_connection(("127.0.0.1", console.port)) as s,
    ):
        s.sendall(b"GET /\x1b[2J\x07evil HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % console.port)
        while s.recv(65536):
            pass
    written = log.getvalue()
    assert "\x1b" not in written and "\x07" not in written
    assert "/\\x1b[2J\\x07evil" in written


def test_a_name_with_a_bidi_override_is_refused(
    home: Path, sim: Simulator, contract_path: Path, client: httpx.Client
) -> None:
    stopped = stop_operation(home, sim, contract_path, "op-name", "exp_name")
    url = f"/decisions/{stopped.decision_id}/decide"
    refused = client.post(url, data={"option": "1", "by": "alice\u202e", "csrf": csrf_of(client)})
    assert flash_after(client, refused).startswith("error: &#x27;Decided by&#x27; must be")
    assert decision(home, stopped.decision_id).status == "open"


CANCEL_NEEDS_TOKEN = (
    '\n[auth]\nsecret_env = "PW_CONSOLE_UNSET_TOKEN"\n\n[cancel]\nurl = "{base}/jobs/{{job_id}}/cancel"\n'
)


def test_only_an_option_that_calls_the_provider_needs_the_credential(
    home: Path, sim: Simulator, tmp_path: Path, client: httpx.Client
) -> None:
    contract = write_contract(tmp_path / "c.toml", sim.url, extra=CANCEL_NEEDS_TOKEN.format(base=sim.url))
    first = stop_operation(home, sim, contract, "op-cancel", "exp_cancel")
    options = {o.kind.value: o.number for o in decision(home, first.decision_id).request.options}
    url = f"/decisions/{first.decision_id}/decide"
    failed = client.post(
        url, data={"option": str(options["cancel"]), "by": "alice", "csrf": csrf_of(client), "confirm": "yes"}
    )
    message = flash_after(client, failed)
    assert message.startswith(f"error: Decision {first.decision_id} was not applied:"), message
    assert "PW_CONSOLE_UNSET_TOKEN" in message
    assert decision(home, first.decision_id).status == "open"
    extended = client.post(url, data={"option": str(options["extend"]), "by": "alice", "csrf": csrf_of(client)})
    message = flash_after(client, extended)
    assert message.startswith("ok: extended operation op-cancel"), message
    assert "pollwarden watch --operation op-cancel --home" in message
