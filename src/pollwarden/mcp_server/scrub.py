"""Secrets never leave: the project's one `Scrubber` over every reply, error and log line of the MCP server."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.contract.parse import Contract
from ..core.scrub import Scrubber
from ..transport.http import CredentialError, resolve_secret


class ScrubLogs(logging.Filter):
    """Every log line the server writes to stderr goes through the scrubber, tracebacks included.

    A source may be a callable, asked at each line (a broker's scrubber grows as tokens are read), returning None
    once its broker is gone; a broker process serves one session after another, each `add`ing its own, so a token
    one session read is scrubbed from every line while that session lives."""

    def __init__(self, scrubber: Scrubber | Callable[[], Scrubber | None]) -> None:
        super().__init__()
        self._sources: list[Callable[[], Scrubber | None]] = []
        self._lock = threading.Lock()
        self.add(scrubber)

    def add(self, scrubber: Scrubber | Callable[[], Scrubber | None]) -> None:
        with self._lock:
            self._sources.append((lambda: scrubber) if isinstance(scrubber, Scrubber) else scrubber)

    def _text(self, text: str) -> str:
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            scrubber = source()
            if scrubber is None:
                with self._lock, contextlib.suppress(ValueError):
                    self._sources.remove(source)
                continue
            text = scrubber.text(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not break logging
            message = str(record.msg)
        record.msg = self._text(message)
        record.args = None
        if record.exc_info:
            record.exc_text = self._text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def wire_safe(value: Any) -> Any:
    """Strings that UTF-8 can carry: the SDK cannot serialize a lone surrogate, and one such reply would end the
    stdio writer and so the whole server, not just that call."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, Mapping):
        return {wire_safe(str(k)): wire_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_safe(v) for v in value]
    return value


def secret_values(contracts: Iterable[Contract], environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Every credential the served contracts name, with the scheme it is sent with, as `resolve_secret` reads it
    (one trailing newline removed); a value it refuses is never sent but is still a secret, so kept as it is.
    A token a command prints is not run for here: it joins the broker's scrubber once a call has read it."""
    found: set[tuple[str, str | None]] = set()
    for contract in contracts:
        if contract.auth is not None and contract.auth.token_command is None:
            try:
                credential = resolve_secret(contract, environ)
            except CredentialError:
                credential = None
            if credential is not None:
                found.update(credential.secret_pairs())
            else:  # a value refused for sending is still a secret: every variable the contract names, as it is
                found.update(
                    (environ[name], contract.auth.scheme or None)
                    for name in contract.auth.env_names
                    if environ.get(name)
                )
        webhook = contract.escalation.webhook_secret_env
        if webhook and environ.get(webhook):
            found.add((environ[webhook], None))  # an HMAC key, used exactly as the environment holds it
    return sorted(found, key=lambda pair: (pair[0], pair[1] or ""))
