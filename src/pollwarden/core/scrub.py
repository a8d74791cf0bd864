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

    `text`, `value`, `found_in` and truthiness for replies and logs, `binary` for bodies; `joined` for an
    interface (the MCP server) that holds the credentials of several contracts at once.
    """

    MARK = MARK

    def __init__(self, values: Iterable[str | None], *, scheme: str | None = None) -> None:
        forms: set[str] = set()
        for value in values:
            if value and len(value.strip()) >= MIN_SECRET_LENGTH:
                forms.update(_forms(value, scheme))
        self._keep(forms)

    @classmethod
    def joined(cls, credentials: Iterable[tuple[str | None, str | None]]) -> Scrubber:
        """One scrubber for (value, scheme) pairs sent with different schemes, as a server of many contracts holds."""
        joined = cls(())
        joined._keep({f for value, scheme in credentials for f in cls([value], scheme=scheme)._forms})
        return joined

    def _keep(self, forms: set[str]) -> None:
        # Longest first, so a form that contains another (with the scheme, say) is removed whole.
        self._forms = sorted((f for f in forms if len(f) >= MIN_SECRET_LENGTH), key=len, reverse=True)
        self._byte_forms = [f.encode("utf-8", "surrogatepass") for f in self._forms]

    def __bool__(self) -> bool:
        return bool(self._forms)

    @property
    def longest(self) -> int:
        """Bytes of the longest form: a stream scrubbed in pieces holds back one byte fewer, so no form is split."""
        return max((len(f) for f in self._byte_forms), default=0)

    def raw(self, data: bytes) -> bytes:
        """Every form removed from bytes that are not a JSON document (a downloaded file): no re-encoding."""
        mark = MARK.encode("ascii")
        for form in self._byte_forms:
            if form in data:
                data = data.replace(form, mark)
        return data

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
        if self._forms and b"\\" in data:
            data = self._unescaped(data)
        return data

    def _unescaped(self, data: bytes) -> bytes:
        """A JSON body can spell the credential with escapes (`\\u0073k-...`) that no byte search sees: read it
        (keeping repeated keys, which the strict parser refuses later) and, only if a decoded string holds a form,
        write it back scrubbed. A body that is not JSON is left for the parser to refuse."""
        try:
            pairs = json.loads(data, object_pairs_hook=_Pairs)
            if not self._holds(pairs):
                return data
            return _dump(self._scrubbed(pairs)).encode("ascii")
        except (ValueError, RecursionError):  # not JSON, or nested past reading: the parser refuses it whole
            return data

    def _holds(self, value: Any) -> bool:
        if isinstance(value, str):
            return self.found_in(value)
        if isinstance(value, _Pairs):
            return any(self._holds(k) or self._holds(v) for k, v in value)
        if isinstance(value, list):
            return any(self._holds(v) for v in value)
        return False

    def _scrubbed(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, _Pairs):
            return _Pairs((self.text(k), self._scrubbed(v)) for k, v in value)
        if isinstance(value, list):
            return [self._scrubbed(v) for v in value]
        return value

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


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order, repeated keys kept, written back as an object."""


def _dump(value: Any) -> str:
    if isinstance(value, _Pairs):
        return "{" + ",".join(json.dumps(k) + ":" + _dump(v) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value)
