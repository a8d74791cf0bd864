"""Secrets never leave: one scrubber for every reply, error and log line of the MCP server."""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from ..core.contract import Contract


class Scrubber:
    """Removes every configured secret value (and its common encodings) from text and JSON-able values.

    Defence in depth: secrets never reach a reply by design; this is the net under that design.
    """

    MARK = "[secret]"

    def __init__(self, values: Iterable[str]) -> None:
        variants: set[str] = set()
        for value in values:
            if not value:
                continue
            variants.add(value)
            variants.add(quote(value, safe=""))
            variants.add(json.dumps(value)[1:-1])
            variants.add(base64.b64encode(value.encode()).decode().rstrip("="))
            variants.add(base64.urlsafe_b64encode(value.encode()).decode().rstrip("="))
        # Longest first, so a secret that contains another is removed whole.
        self._variants = sorted((v for v in variants if v), key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._variants)

    def text(self, text: str) -> str:
        for variant in self._variants:
            if variant in text:
                text = text.replace(variant, self.MARK)
        return text

    def found_in(self, text: str) -> bool:
        return any(variant in text for variant in self._variants)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


class ScrubLogs(logging.Filter):
    """Every log line the server writes to stderr goes through the scrubber, tracebacks included."""

    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__()
        self.scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not break logging
            message = str(record.msg)
        record.msg = self.scrubber.text(message)
        record.args = None
        if record.exc_info:
            record.exc_text = self.scrubber.text(logging.Formatter().formatException(record.exc_info))
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


def secret_values(contracts: Iterable[Contract], environ: Mapping[str, str]) -> list[str]:
    names: set[str] = set()
    for contract in contracts:
        if contract.auth is not None:
            names.add(contract.auth.secret_env)
        if contract.escalation.webhook_secret_env:
            names.add(contract.escalation.webhook_secret_env)
    return [environ[name] for name in sorted(names) if environ.get(name)]
