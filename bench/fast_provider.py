"""A fast loopback provider for throughput benchmarks: every status request answers `{"state": "running"}`.

The scripted `Simulator` is a thread per connection in the benchmark's own process and tops out far below what
a worker can poll, so measuring a worker against it measures the simulator. This one is a single asyncio
`Protocol` in a process of its own: it reads each request head and answers it at once, keeping the connection
open for the next request unless the request asked for `Connection: close` (pollwarden's status polls keep
their connections alive; its other requests ask for a close). It still checks what a provider can check: it
counts requests, and it counts a (job, reservation number) pair seen twice, which would be a double poll (the
benchmark's contract asks pollwarden for the number in `X-Pollwarden-Reservation`; nothing is sent unasked).
`GET /_stats` answers the counters and this process's CPU time, so the benchmark can say what the provider
cost and what its ceiling is. `GET /_first` answers when each job's first status request arrived
(`{"job": time.time(), ...}`: the wall clock, which the benchmark reads in its own process on the same machine).

    python -m bench.fast_provider [--port 0]     # prints "listening http://127.0.0.1:PORT", then serves
    python -m bench.fast_provider --tls DIR      # https, with a self-signed certificate for 127.0.0.1 it writes
                                                 # to DIR/cert.pem (a client trusts it: SSL_CERT_FILE=DIR/cert.pem)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import os
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BODY = b'{"state": "running"}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
RESERVATION = b"\r\nx-pollwarden-reservation:"


@dataclass
class Counters:
    requests: int = 0
    duplicates: int = 0
    seen: set[tuple[bytes, bytes]] = field(default_factory=set)
    first: dict[bytes, float] = field(default_factory=dict)
    """Each job's first status request, time.time() as it was read (the embedded benchmark's measure)."""
    started: float = field(default_factory=time.monotonic)

    def stats(self) -> bytes:
        cpu = os.times()
        body = json.dumps(
            {
                "requests": self.requests,
                "duplicates": self.duplicates,
                "cpu_seconds": cpu.user + cpu.system,
                "uptime": time.monotonic() - self.started,
            }
        ).encode()
        return _closing(body)

    def firsts(self) -> bytes:
        return _closing(json.dumps({job.decode(): at for job, at in self.first.items()}).encode())


def _closing(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class _Connection(asyncio.Protocol):
    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        assert self.transport is not None
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    self.transport.close()
                return
            head, self.buffer = self.buffer[: end + 2], self.buffer[end + 4 :]
            answer = self._answer(head)
            self.transport.write(answer)
            if answer is not ANSWER or b"\r\nconnection: close\r\n" in head.lower():
                self.transport.close()
                return

    def _answer(self, head: bytes) -> bytes:
        line, _, _ = head.partition(b"\r\n")
        parts = line.split(b" ")
        path = parts[1] if len(parts) == 3 else b""
        if path == b"/_stats":
            return self.counters.stats()
        if path == b"/_first":
            return self.counters.firsts()
        if not path.startswith(b"/jobs/"):
            return NOT_FOUND
        counters = self.counters
        counters.requests += 1
        job = path[6:].partition(b"?")[0].rstrip(b"/")
        if job not in counters.first:
            counters.first[job] = time.time()
        lowered = head.lower()
        at = lowered.find(RESERVATION)
        if at >= 0:
            value = lowered[at + len(RESERVATION) : lowered.find(b"\r\n", at + 2)].strip()
            key = (path, value)
            if key in counters.seen:
                counters.duplicates += 1
            else:
                counters.seen.add(key)
        return ANSWER


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, its own CA, and its key, written to `directory` (cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fast-provider")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    plain = serialization.NoEncryption()
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, plain))
    return cert_path, key_path


async def _serve(port: int, tls: Path | None) -> None:
    counters = Counters()
    loop = asyncio.get_running_loop()
    context = None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed(tls))
    server = await loop.create_server(lambda: _Connection(counters), "127.0.0.1", port, backlog=4096, ssl=context)
    sockname = server.sockets[0].getsockname()
    print(f"listening {'https' if tls else 'http'}://127.0.0.1:{sockname[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", type=Path, metavar="DIR", help="serve https; the certificate is written to DIR")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
