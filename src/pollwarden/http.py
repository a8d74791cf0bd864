"""One status request: credential injected, redirects refused, body capped, total time bounded.

The driver half of R1: it reports what happened on the wire as a `Response` or `TransportFailure` and
leaves every judgement to the core. No message it produces may contain the credential.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from urllib.parse import urlsplit

import httpx

from . import __version__
from .core.contract import Contract
from .core.observe import Exchange, FailureKind, Response, TransportFailure
from .errors import PollwardenError


class CredentialError(PollwardenError):
    """The credential is missing here, or a request would carry it somewhere the contract does not name."""


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def resolve_secret(contract: Contract, environ: Mapping[str, str] | None = None) -> str | None:
    if contract.auth is None:
        return None
    env = os.environ if environ is None else environ
    value = env.get(contract.auth.secret_env)
    if not value:
        raise CredentialError(
            f"contract {contract.name!r} needs the credential in environment variable"
            f" {contract.auth.secret_env}, which is not set; export it and run again"
        )
    return value


class StatusClient:
    """Holds the secret so callers never have to; it leaves this object only as a request header."""

    def __init__(self, contract: Contract, secret: str | None, *, clock: Callable[[], datetime]) -> None:
        self._contract = contract
        self._secret = secret
        self._clock = clock
        self._client = httpx.Client(
            follow_redirects=False,
            timeout=httpx.Timeout(contract.timeout.total_seconds()),
            trust_env=False,
            headers={"User-Agent": f"pollwarden/{__version__}", "Accept": "application/json"},
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> StatusClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        headers = dict(extra)
        auth = self._contract.auth
        if auth is not None and self._secret is not None:
            headers[auth.header] = f"{auth.scheme} {self._secret}" if auth.scheme else self._secret
        return headers

    def scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "[secret]")
        return text[:300]

    def fetch(
        self, job_id: str, extra_headers: Mapping[str, str] | None = None, *, location: str | None = None
    ) -> Exchange:
        """One status request; `location` is a status URL the provider returned (same origin only)."""
        url = self._contract.status_url_for(job_id) if location is None else location
        return self.send("GET", url, extra_headers=extra_headers)

    def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        extra_headers: Mapping[str, str] | None = None,
        credential: bool = True,
    ) -> Exchange:
        """One request under the same guards as a status poll: the credential only ever goes to the contract's
        origin, redirects are not followed, the body read is capped and the whole exchange time-bounded."""
        if credential and origin_of(url) != self._contract.origin:
            raise CredentialError(
                f"refusing to send the credential to {origin_of(url)}: contract {self._contract.name!r} binds it"
                f" to {self._contract.origin}"
            )
        cap = self._contract.max_body_bytes
        budget = self._contract.timeout.total_seconds()
        sent_at = self._clock()
        started = time.monotonic()
        try:
            headers = self._headers(extra_headers or {}) if credential else dict(extra_headers or {})
            with self._client.stream(method, url, headers=headers, content=body) as response:
                chunks: list[bytes] = []
                size = 0
                truncated = False
                for chunk in response.iter_raw():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        truncated = True
                        break
                    if time.monotonic() - started > budget:
                        return self._failure(FailureKind.TIMEOUT, "the body did not arrive within the timeout", sent_at)
                body = b"".join(chunks)[:cap]
                headers = {k.lower(): v for k, v in response.headers.items()}
                return Response(
                    status=response.status_code,
                    headers=headers,
                    body=body,
                    sent_at=sent_at,
                    received_at=self._clock(),
                    truncated=truncated,
                )
        except httpx.ConnectTimeout:
            return self._failure(FailureKind.CONNECT, "connect timed out", sent_at)
        except httpx.ConnectError as exc:
            return self._failure(FailureKind.CONNECT, f"connection failed: {exc}", sent_at)
        except httpx.TimeoutException:
            return self._failure(FailureKind.TIMEOUT, "no answer within the timeout", sent_at)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            return self._failure(FailureKind.RESET, f"connection dropped: {exc.__class__.__name__}", sent_at)
        except httpx.HTTPError as exc:
            return self._failure(FailureKind.PROTOCOL, f"{exc.__class__.__name__}: {exc}", sent_at)

    def _failure(self, kind: FailureKind, message: str, sent_at: datetime) -> TransportFailure:
        return TransportFailure(kind=kind, message=self.scrub(message), sent_at=sent_at, failed_at=self._clock())
