"""Certificates made for a test (a CA of its own and leaves it signs) and a loopback TLS server: the keep-alive
server of tests/transport/test_http_keepalive.py behind TLS, so every script it runs can be served over https too.

`trusting` makes the process's verifying context (`wire._default_tls`, what both paths use) trust the test's CA
and nothing else: the same `ssl.create_default_context` construction, with the CA file instead of the system's."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pollwarden.transport import wire
from tests.transport.test_http_keepalive import OK, KeepAliveServer, Script, always


@dataclass(frozen=True)
class Leaf:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    other_ca: Path
    """A CA nobody trusts, which signed `untrusted`."""
    good: Leaf
    """For 127.0.0.1 and localhost, signed by `ca`, valid now."""
    wrong_host: Leaf
    expired: Leaf
    untrusted: Leaf


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ca(directory: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key


def _leaf(
    directory: Path,
    name: str,
    ca: tuple[Path, ec.EllipticCurvePrivateKey],
    names: list[x509.GeneralName],
    *,
    days: tuple[int, int] = (-1, 1),
) -> Leaf:
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.load_pem_x509_certificate(ca[0].read_bytes()).subject
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + dt.timedelta(days=days[0]))
        .not_valid_after(now + dt.timedelta(days=days[1]))
        .add_extension(x509.SubjectAlternativeName(names), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        .sign(ca[1], hashes.SHA256())
    )
    leaf = Leaf(directory / f"{name}.pem", directory / f"{name}.key")
    leaf.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    leaf.key.write_bytes(_pem_key(key))
    return leaf


def make_certificates(directory: Path) -> Certificates:
    ca, other = _ca(directory, "test-ca"), _ca(directory, "other-ca")
    loopback: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    return Certificates(
        ca=ca[0],
        other_ca=other[0],
        good=_leaf(directory, "good", ca, loopback),
        wrong_host=_leaf(directory, "wrong-host", ca, [x509.DNSName("elsewhere.example")]),
        expired=_leaf(directory, "expired", ca, loopback, days=(-3, -1)),
        untrusted=_leaf(directory, "untrusted", other, loopback),
    )


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@contextmanager
def trusting(ca: Path) -> Iterator[None]:
    """Both paths verify against `ca` alone while this is open."""
    context = ssl.create_default_context(cafile=str(ca))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wire, "_default_tls", lambda: context)
        yield


class TlsServer(KeepAliveServer):
    """`KeepAliveServer` behind TLS with `leaf`'s certificate: the script answers each request as before."""

    def __init__(self, leaf: Leaf, script: Script) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(leaf.cert, leaf.key)
        self.handshakes = 0
        super().__init__(script)

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://")

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(30.0)  # a client that gave up mid-handshake must not hold this thread for ever
        try:
            tls = self._context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        tls.settimeout(None)
        with self._lock:
            self.handshakes += 1
        super()._one(tls)


@pytest.fixture
def tls_server(certificates: Certificates) -> Iterator[Callable[[Leaf], TlsServer]]:
    """Starts a `TlsServer` with a leaf's certificate that answers OK to every request; all closed at the end."""
    servers: list[TlsServer] = []

    def start(leaf: Leaf) -> TlsServer:
        servers.append(TlsServer(leaf, always(OK)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
