"""`fetch-result` against loopback servers: the provider's origin and a second origin (a file store).

The issue's bug: an OpenAI `output_file_id` was fetched relative to the status URL (a 404). Now the URL comes
from `[result].url` (the result quoted as one segment) or is the result itself when it is an absolute URL."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pollwarden.actions.provider import ActionError, ActionRefused, fetch_result
from pollwarden.core.contract.parse import Contract, parse_contract
from pollwarden.core.record import OperationRecord, new_record
from pollwarden.transport.http import StatusClient
from pollwarden.transport.resolve import AddrInfo
from pollwarden.transport.wire import SocketTransport
from tests.loopback import Answer, Loopback, serving

SECRET = "sk-loopback-secret-0123456789"
NOW = datetime(2025, 4, 18, 10, 0, tzinfo=UTC)


def contract(base: str, result: str = "", *, field: str = "output_file_id") -> Contract:
    text = f"""\
name = "batch"
status_url = "{base}/v1/batches/{{job_id}}"

[auth]
secret_env = "LOOPBACK_KEY"

[states]
pending = ["in_progress"]
success = ["completed"]
failure = ["failed"]

[fields]
state = "status"
result = "{field}"
{result}
"""
    return parse_contract(text, source="batch.toml")


def succeeded(c: Contract, result: Any) -> OperationRecord:
    return new_record(c, operation_id="op", job_id="batch_1", now=NOW).succeeded(result, "state 'completed'", NOW)


def client(c: Contract) -> StatusClient:
    return StatusClient(c, SECRET, clock=lambda: NOW)


@pytest.fixture
def provider() -> Iterator[Loopback]:
    with serving() as server:
        yield server


@pytest.fixture
def files() -> Iterator[Loopback]:
    with serving() as server:
        yield server


def test_a_file_id_is_fetched_through_the_template_with_the_credential(provider: Loopback, tmp_path: Path) -> None:
    body = b'{"custom_id": "r1"}\n' * 100
    provider.routes[("GET", "/v1/files/file-a%2Fb/content")] = Answer(200, body, {"Content-Type": "application/jsonl"})
    c = contract(provider.url, f'[result]\nurl = "{provider.url}/v1/files/{{result}}/content"\ncredential = true\n')
    out = tmp_path / "out.jsonl"
    with client(c) as cl:
        info = fetch_result(c, cl, succeeded(c, "file-a/b"), out)
    assert out.read_bytes() == body
    assert info["bytes"] == len(body) and info["sha256"] == hashlib.sha256(body).hexdigest()
    assert info["credential_sent"] is True and info["content_type"] == "application/jsonl"
    [seen] = provider.seen
    assert seen.path == "/v1/files/file-a%2Fb/content"  # one segment: the id cannot add a path
    assert seen.headers["authorization"] == f"Bearer {SECRET}"


def test_a_url_result_on_another_origin_is_fetched_without_the_credential(
    provider: Loopback, files: Loopback, tmp_path: Path
) -> None:
    files.routes[("GET", "/out/1.png?sig=abc")] = Answer(200, b"\x89PNG....")
    named = files.url.removeprefix("http://")  # another origin, named as one the results may come from
    c = contract(provider.url, f'[result]\ntype = "string"\ncredential = false\nhosts = ["{named}"]\n')
    out = tmp_path / "out.png"
    with client(c) as cl:
        info = fetch_result(c, cl, succeeded(c, f"{files.url}/out/1.png?sig=abc"), out)
    assert out.read_bytes() == b"\x89PNG...." and info["credential_sent"] is False
    assert info["url"] == f"{files.url}/out/1.png"  # the record keeps no query: presigned links carry keys there
    [seen] = files.seen
    assert "authorization" not in seen.headers
    assert provider.seen == []


def test_credential_true_for_another_origin_is_refused_and_nothing_is_sent(
    provider: Loopback, files: Loopback, tmp_path: Path
) -> None:
    named = files.url.removeprefix("http://")
    c = contract(provider.url, f'[result]\ncredential = true\nhosts = ["{named}"]\n')
    out = tmp_path / "out"
    with client(c) as cl, pytest.raises(ActionRefused) as caught:
        fetch_result(c, cl, succeeded(c, f"{files.url}/results"), out)
    assert "credential = true" in str(caught.value) and "nothing was sent" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert files.seen == [] and provider.seen == [] and not out.exists()


def test_over_the_cap_is_an_error_and_the_partial_file_is_removed(provider: Loopback, tmp_path: Path) -> None:
    provider.routes[("GET", "/big")] = Answer(200, b"x" * 200_000)
    c = contract(provider.url, "[result]\ncredential = true\nmax_bytes = 100000\n")
    out = tmp_path / "out"
    with client(c) as cl, pytest.raises(ActionError, match=r"larger than \[result\]\.max_bytes \(100000 bytes\)"):
        fetch_result(c, cl, succeeded(c, f"{provider.url}/big"), out)
    assert not out.exists()
    provider.routes[("GET", "/big")] = Answer(200, b"x" * 100_000)  # exactly the cap is fine
    with client(c) as cl:
        assert fetch_result(c, cl, succeeded(c, f"{provider.url}/big"), out)["bytes"] == 100_000


def test_a_404_names_the_status_and_writes_nothing(provider: Loopback, tmp_path: Path) -> None:
    c = contract(provider.url, f'[result]\nurl = "{provider.url}/v1/files/{{result}}/content"\ncredential = true\n')
    out = tmp_path / "out"
    with client(c) as cl, pytest.raises(ActionError) as caught:
        fetch_result(c, cl, succeeded(c, "file-gone"), out)
    assert "answered HTTP 404" in str(caught.value) and not out.exists()


def test_a_bare_id_without_a_template_is_refused_not_resolved_against_the_status_url(
    provider: Loopback, tmp_path: Path
) -> None:
    c = contract(provider.url)  # an old contract: no [result] table
    with client(c) as cl, pytest.raises(ActionRefused, match=r"not a URL .* no \[result\]\.url template"):
        fetch_result(c, cl, succeeded(c, "file-abc"), tmp_path / "out")
    assert provider.seen == []


def test_an_old_contract_still_fetches_a_path_on_its_origin_with_the_credential(
    provider: Loopback, tmp_path: Path
) -> None:
    provider.routes[("GET", "/results/1")] = Answer(200, b'{"data": 1}')
    c = contract(provider.url)
    with client(c) as cl:
        info = fetch_result(c, cl, succeeded(c, "/results/1"), tmp_path / "out")
    assert info["credential_sent"] is True
    assert provider.seen[0].headers["authorization"] == f"Bearer {SECRET}"


def test_an_object_result_without_a_url_is_written_as_json(provider: Loopback, tmp_path: Path) -> None:
    c = contract(provider.url, '[result]\ntype = "object"\n', field="response")
    value = {"@type": "type.googleapis.com/x", "name": "é", "n": [1, 2.5, None]}
    out = tmp_path / "out.json"
    with client(c) as cl:
        info = fetch_result(c, cl, succeeded(c, value), out)
    assert json.loads(out.read_text(encoding="utf-8")) == value
    assert info["url"] is None and info["credential_sent"] is False
    assert provider.seen == []


@pytest.mark.parametrize(
    "spelled",
    [
        SECRET.encode(),
        # Issue 23: the loose spellings (zero-width splits, HTML entities) are held back for across chunks too.
        "\u200b".join(SECRET[:10]).encode() + "".join(f"&#{ord(c)};" for c in SECRET[10:]).encode(),
    ],
    ids=["raw", "split-and-entities"],
)
def test_the_secret_echoed_in_the_file_is_removed(provider: Loopback, tmp_path: Path, spelled: bytes) -> None:
    # Split across the client's read chunks too: 64 KiB of padding puts the secret over a chunk boundary.
    body = b"a" * (64 * 1024 - 20) + spelled + b"tail"
    provider.routes[("GET", "/echo")] = Answer(200, body)
    c = contract(provider.url, "[result]\ncredential = true\n")
    out = tmp_path / "out"
    with client(c) as cl:
        fetch_result(c, cl, succeeded(c, f"{provider.url}/echo"), out)
    assert out.read_bytes() == b"a" * (64 * 1024 - 20) + b"[secret]tail"


def test_a_result_on_a_host_the_contract_does_not_name_is_refused_and_nothing_is_sent(
    provider: Loopback, files: Loopback, tmp_path: Path
) -> None:
    """Issue 23: a result URL from the provider's answer named another host (a metadata address) and was read."""
    c = contract(provider.url, '[result]\ntype = "string"\ncredential = false\n')
    out = tmp_path / "out"
    with client(c) as cl, pytest.raises(ActionRefused, match=r"neither the status URL's origin .* \[result\]\.hosts"):
        fetch_result(c, cl, succeeded(c, f"{files.url}/latest/meta-data/"), out)
    assert files.seen == [] and provider.seen == [] and not out.exists()


def _resolving(names: dict[str, str]) -> SocketTransport:
    """A transport whose lookups answer from `names` (the resolver seam): what a DNS answer would say."""

    def resolver(host: str, port: int) -> list[AddrInfo]:
        address = names[host]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    return SocketTransport(resolver=resolver)


@pytest.mark.parametrize(
    ("status_host", "files_host", "refused"),
    [
        ("93.184.216.34", "127.0.0.1", "127.0.0.1 is a loopback address"),
        ("93.184.216.34", "::ffff:127.0.0.1", "::ffff:127.0.0.1 is a loopback address"),
        ("93.184.216.34", "10.1.2.3", "10.1.2.3 is a private address"),
        ("10.0.0.9", "169.254.169.254", "169.254.169.254 is a metadata address"),
        ("127.0.0.1", "169.254.10.10", "169.254.10.10 is a link-local address"),
        ("127.0.0.1", "0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("127.0.0.1", "127.0.0.1", None),  # the status origin is loopback too: the provider is on this machine
    ],
)
def test_a_named_host_is_fetched_only_from_an_address_the_status_origin_allows(
    files: Loopback, tmp_path: Path, status_host: str, files_host: str, refused: str | None
) -> None:
    """The host rule lets a name through; the address connected to decides, whatever the name's DNS answers."""
    files.routes[("GET", "/out")] = Answer(200, b"output")
    port = files.url.rpartition(":")[2]
    c = parse_contract(
        f'name = "batch"\nstatus_url = "http://api.example/v1/batches/{{job_id}}"\n[states]\npending = ["r"]\n'
        'success = ["completed"]\nfailure = ["failed"]\n[fields]\nstate = "status"\nresult = "out"\n'
        f'[result]\ncredential = false\nhosts = ["files.example:{port}"]\n',
        source="batch.toml",
    )
    names = {"api.example": status_host, "files.example": files_host}
    out = tmp_path / "out"
    with StatusClient(c, None, clock=lambda: NOW, transport=_resolving(names)) as cl:
        if refused is None:
            assert fetch_result(c, cl, succeeded(c, f"http://files.example:{port}/out"), out)["bytes"] == 6
            return
        with pytest.raises(ActionError, match=f"refusing to connect: {re.escape(refused)}") as caught:
            fetch_result(c, cl, succeeded(c, f"http://files.example:{port}/out"), out)
    assert "nothing was sent" in str(caught.value) and files.seen == [] and not out.exists()
