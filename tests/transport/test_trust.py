"""`[tls] ca_file` (issue 24): a contract's own CA bundle verifies its origin over https, on both paths (the
selector and the blocking one), instead of the system's store, against a real loopback TLS server whose
certificate a CA made for the test signed. A bundle that cannot be used is a local failure that names the file,
before any connection; a rotated bundle is read again; an http origin never reads it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from pollwarden.core import FailureKind, Response, TransportFailure
from pollwarden.core.observe import Exchange
from pollwarden.transport.http import StatusClient
from pollwarden.transport.trust import MAX_CA_BYTES
from tests.tls import Certificates, Leaf, TlsServer
from tests.tls import certificates as certificates  # the fixture: a CA and leaves made once per session
from tests.tls import tls_server as tls_server  # the fixture: TLS servers with a leaf's certificate
from tests.transport.test_http_keepalive import BODY, OK, KeepAliveServer, always, clock, contract_for
from tests.transport.test_wire_select_hostile import PATHS


def polls(url: str, path: str, ca_file: str | None, count: int = 1) -> list[Exchange]:
    contract = replace(contract_for(url), ca_file=ca_file)
    with StatusClient(contract, None, clock=clock, transport=PATHS[path]()) as client:
        return [client.fetch(f"job-{n}") for n in range(count)]


@pytest.mark.parametrize("path", PATHS)
def test_the_contracts_bundle_verifies_its_origin(
    path: str, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    server = tls_server(certificates.good)
    results = polls(server.url, path, str(certificates.ca), 3)
    assert all(isinstance(r, Response) and r.body == BODY for r in results), results
    assert (len(server.requests), server.connections, server.handshakes) == (3, 1, 1)  # one verified connection
    # Every request to the origin is verified so, not only polls: a cancel, a result download.
    contract = replace(contract_for(server.url), ca_file=str(certificates.ca))
    with StatusClient(contract, None, clock=clock, transport=PATHS[path]()) as client:
        sent = client.send("DELETE", f"{server.url}/jobs/job-1", credential=False)
    assert isinstance(sent, Response) and sent.status == 200, sent


@pytest.mark.parametrize("path", PATHS)
def test_without_the_bundle_the_system_store_refuses_the_clusters_certificate(
    path: str, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    server = tls_server(certificates.good)
    for ca_file in (None, str(certificates.other_ca)):
        (result,) = polls(server.url, path, ca_file)
        assert isinstance(result, TransportFailure) and result.kind is FailureKind.CONNECT, result
        assert "certificate verify failed" in result.message, result.message
    assert server.requests == []


def _bundles(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """A bundle that cannot be used, and the words its failure says."""
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    binary = tmp_path / "binary.der"
    binary.write_bytes(bytes(range(256)))
    big = tmp_path / "big.pem"
    big.write_bytes(b"-" * (MAX_CA_BYTES + 1))
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)  # nobody writes to it: an open for reading would wait for ever
    return {
        "missing": (str(tmp_path / "nope.pem"), "does not exist"),
        "empty": (str(empty), "holds no PEM certificate"),
        "junk": (str(junk), "holds no PEM certificate that can be read"),
        "binary": (str(binary), "is not a PEM bundle (it holds bytes that are not ASCII)"),
        "too-big": (str(big), f"is larger than {MAX_CA_BYTES} bytes"),
        "directory": (str(tmp_path), "is not a regular file"),
        "fifo": (str(fifo), "is not a regular file"),
    }


@pytest.mark.parametrize("case", ["missing", "empty", "junk", "binary", "too-big", "directory", "fifo"])
def test_a_bundle_that_cannot_be_used_is_a_local_failure_before_any_connection(
    case: str, tmp_path: Path, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    server = tls_server(certificates.good)
    ca_file, words = _bundles(tmp_path)[case]
    for path in PATHS:
        (result,) = polls(server.url, path, ca_file)
        assert isinstance(result, TransportFailure) and result.kind is FailureKind.LOCAL, result
        assert result.message == f"[tls].ca_file {ca_file} {words}", result.message
        assert not result.delivery_unknown
    assert server.connections == 0  # nothing was sent, not even a handshake


def test_a_rotated_bundle_is_read_again_and_never_reuses_a_connection_the_old_one_verified(
    tmp_path: Path, certificates: Certificates, tls_server: Callable[[Leaf], TlsServer]
) -> None:
    """A cluster rotates its CA by swapping the mounted file: the next request is verified by the new bundle."""
    server = tls_server(certificates.good)
    bundle = tmp_path / "ca.crt"
    bundle.write_bytes(certificates.ca.read_bytes())
    contract = replace(contract_for(server.url), ca_file=str(bundle))
    with StatusClient(contract, None, clock=clock, transport=PATHS["selector"]()) as client:
        assert isinstance(client.fetch("a"), Response)
        swapped = tmp_path / "ca.crt.new"
        swapped.write_bytes(certificates.other_ca.read_bytes())
        os.replace(swapped, bundle)  # as kubelet swaps a projected volume's files: a new inode
        after = client.fetch("b")
    assert isinstance(after, TransportFailure) and "certificate verify failed" in after.message, after
    assert server.connections == 2  # the pooled connection the old bundle verified was not taken


def test_an_http_origin_never_reads_the_bundle(tmp_path: Path) -> None:
    server = KeepAliveServer(always(OK))
    try:
        (result,) = polls(server.url, "selector", str(tmp_path / "absent.pem"))
    finally:
        server.close()
    assert isinstance(result, Response) and result.body == BODY
