"""Every form a credential can take in text a provider sends back, replaced by one mark.

Pure standard library, so the core, the HTTP client and any interface can share one definition of "the
secret in any form". A provider that echoes the credential (in an error body, a state, a request id, a
Retry-After) must not get it stored or printed: the client runs every answer through a `Scrubber` before
anything downstream sees it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

MARK = "[secret]"

MIN_SECRET_LENGTH = 4
"""Values (and forms) shorter than this are not searched for: a two-letter "secret" would turn every answer into
marks, and a credential that short protects nothing anyway."""


def _forms(value: str, scheme: str | None) -> set[str]:
    """The raw value and every encoding of it an echo is likely to use."""
    forms: set[str] = set()
    for text in {value, value.strip()}:
        raw = text.encode("utf-8", "surrogatepass")
        percent = quote(text, safe="", errors="surrogatepass")
        forms.update(
            (
                text,
                percent,
                _PERCENT.sub(lambda m: m.group().lower(), percent),
                percent.replace("%", "%25"),  # percent-encoded twice, as a URL inside a query
                json.dumps(text)[1:-1],
                base64.b64encode(raw).decode("ascii").rstrip("="),
                base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="),
                # HTTP headers arrive decoded as latin-1: a UTF-8 secret echoed in one reads like this.
                raw.decode("latin-1"),
            )
        )
        if scheme:
            forms.add(f"{scheme} {text}")
        if scheme and scheme.lower() == "basic":
            # Basic carries base64("user:password"): a provider may echo the decoded pair or its password.
            decoded = _from_base64(text)
            if decoded is not None:
                forms.add(decoded)
                forms.add(decoded.partition(":")[2])
    return forms


_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _from_base64(text: str) -> str | None:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


class Scrubber:
    """Removes every configured secret value, in every form `_forms` knows, from text, bytes and JSON values.

    Same methods as the MCP server's scrubber (`text`, `value`, `found_in`, truthiness)
    plus `binary` for bodies, so it can replace it.
    """

    MARK = MARK

    def __init__(self, values: Iterable[str | None], *, scheme: str | None = None) -> None:
        forms: set[str] = set()
        for value in values:
            if value and len(value.strip()) >= MIN_SECRET_LENGTH:
                forms.update(_forms(value, scheme))
        # Longest first, so a form that contains another (with the scheme, say) is removed whole.
        self._forms = sorted((f for f in forms if len(f) >= MIN_SECRET_LENGTH), key=len, reverse=True)
        self._byte_forms = [f.encode("utf-8", "surrogatepass") for f in self._forms]

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, MARK)
        return text

    def binary(self, data: bytes) -> bytes:
        mark = MARK.encode("ascii")
        for form in self._byte_forms:
            if form in data:
                data = data.replace(form, mark)
        return data

    def found_in(self, text: str) -> bool:
        return any(form in text for form in self._forms)

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys included) scrubbed; other leaves are kept as they are."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
