"""Every form a credential can take in text a provider sends back, replaced by one mark.

Pure standard library, so the core, the HTTP client and any interface can share one definition of "the
secret in any form". A provider that echoes the credential (in an error body, a state, a request id, a
Retry-After) must not get it stored or printed: the client runs every answer through a `Scrubber` before
anything downstream sees it.

Two kinds of form. Fixed spellings (`_forms`): the value, with its scheme, percent-, JSON-, hex- and
base64-encoded, the last at each of the three alignments a secret can have inside a longer base64 blob. And
loose spellings (`_Loose`), which no list can hold: any character written as an HTML entity (`&#115;`, `&#x73`,
mixed, `&amp;`) and the characters split by zero-width characters or soft hyphens; those are found by decoding
the text and searching the result, which runs only on text that holds an entity or a splitter at all, so an
answer without them costs a few one-character searches more.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, AnyStr
from urllib.parse import quote

MARK = "[secret]"

MIN_SECRET_LENGTH = 4
"""Values (and forms) shorter than this are not searched for: a two-letter "secret" would turn every answer into
marks, and a credential that short protects nothing anyway."""

SPLITTERS = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
"""Zero-width space, non-joiner, joiner, word joiner, BOM, soft hyphen: invisible, so an echo can hide in them."""

MAX_ZEROS = 8
MAX_SPLIT = 8
"""A stream scrubbed in pieces (`Scrubber.raw` on a download) holds back enough to see a credential spelled with
entities of up to `MAX_ZEROS` leading zeros and up to `MAX_SPLIT` splitters between two characters; a text or
body scrubbed whole has no such bound."""


def _plains(value: str, scheme: str | None) -> tuple[set[str], set[str]]:
    """What the credential reads as once decoded: (the values, the values with their scheme)."""
    values = {value, value.strip()}
    if scheme and scheme.lower() == "basic":
        # Basic carries base64("user:password"): a provider may echo the decoded pair or its password.
        decoded = _from_base64(value.strip())
        if decoded is not None:
            values.update((decoded, decoded.partition(":")[2]))
    schemed = {f"{scheme} {text}" for text in (value, value.strip())} if scheme else set()
    return {v for v in values if len(v) >= MIN_SECRET_LENGTH}, schemed


def _forms(value: str, scheme: str | None) -> set[str]:
    """The fixed spellings: the raw value and every encoding of it an echo is likely to use."""
    values, schemed = _plains(value, scheme)
    forms: set[str] = set(schemed)
    for text in values:
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
                raw.hex(),
                raw.hex().upper(),
                # HTTP headers arrive decoded as latin-1: a UTF-8 secret echoed in one reads like this.
                raw.decode("latin-1"),
            )
        )
        forms.update(_aligned(raw))
    for text in schemed:  # "Bearer <token>" base64-encoded whole, as a logged Authorization header may be
        forms.update(_aligned(text.encode("utf-8", "surrogatepass")))
    return forms


def _aligned(raw: bytes) -> set[str]:
    """The base64 characters `raw` alone decides when it sits at offset 0, 1 or 2 (mod 3) of a longer text: the
    characters that share bits with the bytes around it differ from blob to blob, these never do."""
    found: set[str] = set()
    for offset in range(3):
        first = -(-8 * offset // 6)  # the first character whose 6 bits all come from `raw`
        end = 8 * (offset + len(raw)) // 6  # one past the last such character
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            found.add(encode(b"\0" * offset + raw).decode("ascii")[first:end])
    return found


_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _from_base64(text: str) -> str | None:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


_SPLIT_TEXT = (
    "(?:[\u200b-\u200d\u2060\ufeff\u00ad]|\u00e2\x80[\x8b-\x8d]|\u00e2\x81\xa0|\u00ef\u00bb\u00bf|\u00c2\xad)+"
)
"""A run of splitters, and (since a header arrives decoded as latin-1) of their UTF-8 bytes read as latin-1."""
_SPLIT_BYTES = b"(?:\xe2\x80[\x8b-\x8d]|\xe2\x81\xa0|\xef\xbb\xbf|\xc2\xad)+"
_SPLIT_CODES = frozenset(map(ord, SPLITTERS))
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_SPLIT_LEADS_TEXT = (*SPLITTERS, "\u00e2", "\u00ef", "\u00c2")
_SPLIT_LEADS_BYTES = (b"\xe2", b"\xef", b"\xc2")

_LONGEST_SPELLING = len(f"&#x{'0' * MAX_ZEROS}10ffff;")
"""Bytes of the longest spelling of one character a stream holds back for: an entity with `MAX_ZEROS` zeros."""


def _entities(codes: Iterable[int], named: Iterable[str]) -> str:
    """HTML character references of exactly these code points (group 1: hex digits, 2: decimal, 3: a name), so a
    body full of other references is skipped by the regular expression, never walked one by one. The digits run as
    far as HTML reads them: `&#1151` is one character, never `&#115` and a `1`."""
    decimal = "|".join(sorted({str(c) for c in codes}, key=len, reverse=True))
    hexadecimal = "|".join(sorted({f"{c:x}" for c in codes}, key=len, reverse=True))
    names = "|".join(sorted(named)) or "(?!)"
    return f"&#(?:[xX]0*((?i:{hexadecimal}))(?:;|(?![0-9a-fA-F]))|0*({decimal})(?:;|(?![0-9])))|&({names});"


def _decoded(match: re.Match[str] | re.Match[bytes]) -> str:
    """The character a token stands for; "" for a run of splitters (or a splitter spelled as an entity)."""
    hexadecimal, decimal, named = match.groups()
    if named is not None:
        return _NAMED[named if isinstance(named, str) else named.decode("ascii")]
    if hexadecimal is None and decimal is None:
        return ""
    code = int(hexadecimal, 16) if hexadecimal is not None else int(decimal or "0")  # int() reads bytes digits too
    return "" if code in _SPLIT_CODES else chr(code)


class _Loose:
    """Every value found through HTML entities and splitters: the text decoded (each reference to its character,
    each run of splitters to nothing) is searched, and a hit is mapped back to the span of the text that spelled
    it. Only references to the values' own characters are decoded: no other can be part of a hit."""

    def __init__(self, values: Iterable[str]) -> None:
        self.values = sorted(set(values), key=len, reverse=True)
        self.byte_values = [v.encode("utf-8", "surrogatepass") for v in self.values]
        named = {name for name, c in _NAMED.items() if any(c in v for v in self.values)}
        self.named = bool(named)
        entities = _entities({ord(c) for v in self.values for c in v} | _SPLIT_CODES, named)
        self._text_pattern = f"{entities}|{_SPLIT_TEXT}"
        self._bytes_pattern = entities.encode("ascii") + b"|" + _SPLIT_BYTES

    # Cheap first: one-character searches (a `memchr` each), the two-character one only when `&` is there at all;
    # the patterns are compiled (and cached by `re`) only for a text that may hold a loose spelling.

    def text(self, text: str) -> str:
        if not self.values:
            return text
        if ("&" in text and (self.named or "&#" in text)) or (
            not text.isascii() and any(lead in text for lead in _SPLIT_LEADS_TEXT)  # isascii: O(1) on a str
        ):
            return _replaced(text, self.values, re.compile(self._text_pattern), MARK)
        return text

    def binary(self, data: bytes) -> bytes:
        if not self.values:
            return data
        if (b"&" in data and (self.named or b"&#" in data)) or (
            not data.isascii() and any(lead in data for lead in _SPLIT_LEADS_BYTES)
        ):
            return _replaced(data, self.byte_values, re.compile(self._bytes_pattern), MARK.encode("ascii"))
        return data

    @property
    def longest(self) -> int:
        return max(((len(v) + (len(v) - 1) * MAX_SPLIT) * _LONGEST_SPELLING for v in self.values), default=0)


def _spelled_text(match: re.Match[str]) -> str:
    return _decoded(match)


def _spelled_bytes(match: re.Match[bytes]) -> bytes:
    return _decoded(match).encode("utf-8", "surrogatepass")


def _replaced(data: AnyStr, values: Sequence[AnyStr], tokens: re.Pattern[AnyStr], mark: AnyStr) -> AnyStr:
    """`data` with every span that decodes to one of `values` replaced by `mark`; `data` itself when none does.

    Decoded first in one `sub` (an answer without a secret, nearly every one, ends there), and walked token by
    token, to map a hit back to where it was spelled, only when the decoded text holds a value."""
    empty = data[:0]
    spell: Any = _spelled_text if isinstance(empty, str) else _spelled_bytes
    if not any(value in tokens.sub(spell, data) for value in values):
        return data
    parts: list[AnyStr] = []
    segments: list[tuple[int, int, int, int, bool]] = []  # (decoded start, length, data start, length, literal)
    decoded = done = 0
    for match in tokens.finditer(data):
        piece = _decoded(match)
        start, end = match.span()
        if start > done:
            segments.append((decoded, start - done, done, start - done, True))
            parts.append(data[done:start])
            decoded += start - done
        spelled = piece if isinstance(empty, str) else piece.encode("utf-8", "surrogatepass")
        if spelled:
            segments.append((decoded, len(spelled), start, end - start, False))
            parts.append(spelled)
            decoded += len(spelled)
        done = end
    if not segments:
        return data
    segments.append((decoded, len(data) - done, done, len(data) - done, True))
    parts.append(data[done:])
    plain = empty.join(parts)
    spans = [(at, at + len(v)) for v in values for at in _occurrences(plain, v)]
    if not spans:
        return data
    firsts = [segment[0] for segment in segments]

    def source(position: int, end: bool) -> int:
        """Where in `data` the decoded character at `position` was spelled: its first byte, or one past its last."""
        d0, _, s0, length, literal = segments[bisect.bisect_right(firsts, position) - 1]
        if literal:
            return s0 + position - d0 + (1 if end else 0)
        return s0 + length if end else s0

    cut: list[tuple[int, int]] = []
    for a, b in sorted((source(a, False), source(b - 1, True)) for a, b in spans):
        if cut and a <= cut[-1][1]:
            cut[-1] = (cut[-1][0], max(cut[-1][1], b))
        else:
            cut.append((a, b))
    out: list[AnyStr] = []
    done = 0
    for a, b in cut:
        out += [data[done:a], mark]
        done = b
    out.append(data[done:])
    return empty.join(out)


def _occurrences(text: AnyStr, value: AnyStr) -> Iterator[int]:
    at = text.find(value)
    while at >= 0:
        yield at
        at = text.find(value, at + 1)


_ONE_PASS_BELOW = 1024
"""Bytes below which one regular expression finds any of a dozen forms faster than a dozen `in` (measured with
`bench.scrub_bench`: about 3 us against 8 us at 340 bytes; 1 ms against 0.3 ms at 90 KiB)."""


class Scrubber:
    """Removes every configured secret value, in every form `_forms` and `_Loose` know, from text, bytes and JSON
    values.

    `text`, `value`, `found_in` and truthiness for replies and logs, `binary` for bodies, `headers` for an answer's
    headers; `joined` for an interface (the MCP server) that holds the credentials of several contracts at once.
    """

    MARK = MARK

    def __init__(self, values: Iterable[str | None], *, scheme: str | None = None) -> None:
        self._build({(value, scheme) for value in values if value})

    @classmethod
    def joined(cls, credentials: Iterable[tuple[str | None, str | None]]) -> Scrubber:
        """One scrubber for (value, scheme) pairs sent with different schemes, as a server of many contracts holds."""
        joined = cls(())
        joined._build({(value, scheme) for value, scheme in credentials if value})
        return joined

    def _build(self, pairs: set[tuple[str, str | None]]) -> None:
        pairs = {(value, scheme) for value, scheme in pairs if len(value.strip()) >= MIN_SECRET_LENGTH}
        forms = {f for value, scheme in pairs for f in _forms(value, scheme)}
        # Longest first, so a form that contains another (with the scheme, say) is removed whole.
        self._forms = sorted((f for f in forms if len(f) >= MIN_SECRET_LENGTH), key=len, reverse=True)
        self._byte_forms = [f.encode("utf-8", "surrogatepass") for f in self._forms]
        # A text holds a form only if it holds one that contains no other: only those are searched in a clean one.
        cores = [f for f in self._forms if not any(other != f and other in f for other in self._forms)]
        self._cores = cores
        self._byte_cores = [f.encode("utf-8", "surrogatepass") for f in cores]
        self._core_text = re.compile("|".join(map(re.escape, cores))) if cores else None
        self._core_bytes = re.compile(b"|".join(map(re.escape, self._byte_cores))) if cores else None
        self._loose = _Loose(v for value, scheme in pairs for v in _plains(value, scheme)[0])

    def __bool__(self) -> bool:
        return bool(self._forms)

    @property
    def longest(self) -> int:
        """Bytes of the longest form: a stream scrubbed in pieces holds back one byte fewer, so no form is split."""
        return max(max((len(f) for f in self._byte_forms), default=0), self._loose.longest)

    def _holds_form(self, data: str | bytes) -> bool:
        """Whether `data` holds any fixed form. A short text (a header, a status answer) is searched for all of them
        in one pass of a regular expression; a long one with one `in` each, which is faster per byte."""
        if len(data) < _ONE_PASS_BELOW:
            pattern = self._core_text if isinstance(data, str) else self._core_bytes
            return pattern is not None and pattern.search(data) is not None  # type: ignore[arg-type]
        cores: Sequence[str | bytes] = self._cores if isinstance(data, str) else self._byte_cores
        return any(core in data for core in cores)  # type: ignore[operator]

    def raw(self, data: bytes) -> bytes:
        """Every form removed from bytes that are not a JSON document (a downloaded file): no re-encoding."""
        if self._holds_form(data):
            mark = MARK.encode("ascii")
            for form in self._byte_forms:
                if form in data:
                    data = data.replace(form, mark)
        return self._loose.binary(data)

    def text(self, text: str) -> str:
        if self._holds_form(text):
            for form in self._forms:
                if form in text:
                    text = text.replace(form, MARK)
        return self._loose.text(text)

    def headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """Names and values scrubbed, searched first as one text: an answer almost never holds a secret, and one
        search of the whole costs a fraction of one per name and value."""
        if not self.found_in("\n".join(f"{k}\n{v}" for k, v in headers.items())):
            return dict(headers)
        return {self.text(k): self.text(v) for k, v in headers.items()}

    def binary(self, data: bytes) -> bytes:
        data = self.raw(data)
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
        return self._holds_form(text) or self._loose.text(text) is not text

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
