"""HTTP/1.1 as both paths read and write it: the request line and headers checked before anything is sent and
written (`request_head`); the answer's status line, head (`parse_head`, the selector's strict parser), framing,
chunk sizes and trailers read under the caps of `messages`, every refusal a `WireError` of kind PROTOCOL (or
LOCAL for a request that cannot be sent). No sockets here: `wire` (blocking) and `wire_select` (the selector)
move the bytes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult

from ..core.digits import whole_number
from ..core.observe import FailureKind
from .messages import MAX_HEADER_BYTES, MAX_HEADERS, MAX_LINE, Request, WireError

# Regular expressions rather than a loop over characters: this runs twice per request, on every header.
_URL_CHARS = re.compile("[!-~]*")
_HEADER_NAME = re.compile("[A-Za-z0-9_-]+")
_HEADER_VALUE = re.compile("[\t\x20-\x7e\xa0-\xff]*")


def check_request(method: str, url: str, parts: SplitResult, headers: Mapping[str, str]) -> None:
    """Local integration errors: nothing has left the machine when these are raised."""
    _check_target(method, url, parts)
    check_headers(headers)


def _check_target(method: str, url: str, parts: SplitResult) -> None:
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise WireError(FailureKind.LOCAL, "the URL is not an absolute http(s) URL")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError:
        raise WireError(FailureKind.LOCAL, "the URL's port is not a number from 1 to 65535") from None
    if parts.username is not None or parts.password is not None:
        raise WireError(FailureKind.LOCAL, "the URL carries userinfo; credentials travel only in [auth]")
    if not method.isascii() or not method.isalpha():
        raise WireError(FailureKind.LOCAL, "the method is not an HTTP token")
    if not _URL_CHARS.fullmatch(url):
        raise WireError(FailureKind.LOCAL, "the URL holds a space, a control or a non-ASCII character")


def check_headers(headers: Mapping[str, str]) -> None:
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise WireError(FailureKind.LOCAL, f"header name {name[:40]!r} is not a token of letters, digits, - and _")
        # The value is never quoted back: it may be the credential.
        if not _HEADER_VALUE.fullmatch(value):
            raise WireError(FailureKind.LOCAL, f"header {name} holds a control or non-latin-1 character")


_HEX = re.compile(rb"[0-9A-Fa-f]+")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
FOLD = re.compile(r"[ \t]*\r?\n[ \t]*")

NOT_A_HEADER = "broken answer head: a header line is not a name, a colon and a value"
NOT_STATUS = "the answer does not start with an HTTP status line"
NO_CHUNK_CRLF = "broken chunked body (no CRLF after a chunk)"


def server_closes(http10: bool, headers: Sequence[tuple[str, str]]) -> bool:
    """The server closes the connection after this answer: "close" in any Connection header (http.client reads the
    first one only), or HTTP/1.0 without keep-alive."""
    connection = ",".join(v for k, v in headers if k.lower() == "connection").lower()
    return "close" in connection or (http10 and "keep-alive" not in connection)


def parse_status_line(line: str) -> tuple[str, int, str]:
    """The version, code and reason of a status line as both paths read it (its line end dropped, or not), or a
    PROTOCOL `WireError`: "HTTP/1.x" from its first byte, three ASCII digits not starting with 0, a reason that
    may be empty. http.client alone would take a leading space, "2_00" (int() reads it as 200) and HTTP/0.9."""
    parts = line.split(None, 2)
    if len(parts) < 2 or not line.startswith("HTTP/"):
        raise WireError(FailureKind.PROTOCOL, NOT_STATUS)
    version, code = parts[0], parts[1]
    if not (len(code) == 3 and code.isascii() and code.isdigit() and code[0] != "0"):
        raise WireError(FailureKind.PROTOCOL, NOT_STATUS)
    if not version.startswith("HTTP/1."):
        raise WireError(FailureKind.PROTOCOL, f"broken answer head: unknown protocol {version[:20]!r}")
    return version, int(code), parts[2].rstrip("\r\n") if len(parts) > 2 else ""


def chunk_size(line: bytes) -> int | None:
    """A chunk-size line's size (its extensions and line end dropped), or None when it is not 1*HEXDIG: int(size,
    16) alone also takes "0x2", "+2", "-2" and "0_2". Either path reads None as a body cut short (`reset`), as
    http.client reads a size int() refuses."""
    size = line.split(b";", 1)[0].strip(b" \t\r\n")
    return int(size, 16) if _HEX.fullmatch(size) else None


class Trailers:
    """The trailer lines of a chunked body, counted as header lines are and refused past `MAX_HEADER_BYTES`."""

    def __init__(self) -> None:
        self._size = 0

    def ended(self, line: bytes) -> bool:
        """True at the blank line that ends them; `line` is one trailer line, its line end included or not."""
        bare = line.rstrip(b"\r\n")
        self._size += len(bare) + 2
        if self._size > MAX_HEADER_BYTES:
            raise WireError(FailureKind.PROTOCOL, f"broken chunked body (trailers over {MAX_HEADER_BYTES} bytes)")
        return not bare


@dataclass(frozen=True)
class Head:
    status: int
    headers: tuple[tuple[str, str], ...]
    closes: bool
    """The server says it closes the connection after this answer (or is HTTP/1.0 without keep-alive)."""
    length: int | None
    """Its Content-Length (`check_framing`: one value, at most 19 digits), or None."""
    chunked: bool
    """Its body is chunked (`check_framing`: the only transfer coding read)."""


def protocol_error(message: str) -> WireError:
    return WireError(FailureKind.PROTOCOL, message)


_TOO_LONG = "a status or header line is longer than 64 KiB"


def parse_head(data: bytes) -> Head:
    """A complete answer head (status line, headers, the blank line) or a PROTOCOL `WireError`."""
    lines = data.decode("latin-1").split("\n")
    if len(data) > MAX_LINE and any(len(line) > MAX_LINE for line in lines):
        raise protocol_error(_TOO_LONG)
    version, code, _ = parse_status_line(lines[0])
    headers: list[tuple[str, str]] = []
    for raw in lines[1:]:
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line:
            break
        if "\r" in line:  # a lone CR ends a line for the email package (the blocking path), which refuses it
            raise protocol_error(NOT_A_HEADER)
        if line[0] in " \t":  # obs-fold: RFC 9112 section 5.2 lets a recipient replace it with a space
            if not headers:
                raise protocol_error("broken answer head: a continuation line before any header")
            name, value = headers[-1]
            headers[-1] = (name, value + " " + line.strip(" \t"))
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise protocol_error(NOT_A_HEADER)  # and a name that is not a token, by `check_framing`
        headers.append((name, value.strip(" \t")))
        if len(headers) >= MAX_HEADERS:  # with the blank line, a 101st line: what http.client refuses
            raise protocol_error(f"broken answer head: got more than {MAX_HEADERS} headers")
    # Each header's k + v + 4 is at most one more than its line's bytes: only a long head can be over.
    if len(data) + len(headers) > MAX_HEADER_BYTES and sum(len(k) + len(v) + 4 for k, v in headers) > MAX_HEADER_BYTES:
        raise protocol_error(f"the answer's headers exceed {MAX_HEADER_BYTES} bytes")
    length, chunked = check_framing(headers)
    return Head(code, tuple(headers), server_closes(version == "HTTP/1.0", headers), length, chunked)


def head_end(buffer: bytearray, start: int) -> int:
    """Where the blank line that ends the head ends, or -1 (lines may end in CRLF or, leniently, LF alone);
    `start` is where the search may begin (bytes before it were searched already)."""
    crlf = buffer.find(b"\n\r\n", start)
    # A bare-LF end comes first only if it starts at or before the CRLF one: searching past that would read the
    # whole rest of the buffer for each head of a 1xx flood (quadratic in a read's 2,600 heads).
    lf = buffer.find(b"\n\n", start, len(buffer) if crlf < 0 else crlf + 2)
    return lf + 2 if lf >= 0 else crlf + 3 if crlf >= 0 else -1


def check_partial_head(buffer: bytearray, first: int, lines: int, line_start: int) -> None:
    """Refuse an unfinished head as soon as it breaks a cap, rather than at its end or the deadline: `first` is
    where its first line ends (-1: not yet), `lines` how many line ends it holds, `line_start` where its last,
    unfinished line starts. Counted as bytes arrive (`wire_select.Exchanging._scan`), so a head dripped a byte at a time
    costs time in proportion to its length, not to its square."""
    start = bytes(buffer[:5])
    if start != b"HTTP/"[: len(start)]:
        raise protocol_error(NOT_STATUS)
    if len(buffer) - line_start > MAX_LINE:
        raise protocol_error(_TOO_LONG)
    if first >= 0 and len(buffer) - first - 1 > MAX_HEADER_BYTES + 4 * MAX_HEADERS:  # `parse_head` counts exactly
        raise protocol_error(f"the answer's headers exceed {MAX_HEADER_BYTES} bytes")
    if lines - 1 >= MAX_HEADERS:  # 100 header lines: the next line, even the blank one, is one too many
        raise protocol_error(f"broken answer head: got more than {MAX_HEADERS} headers")


def check_framing(headers: Sequence[tuple[str, str]]) -> tuple[int | None, bool]:
    """What both paths check of a parsed head: every header name a token (the email package takes "X(A)"), and,
    RFC 9112 section 6.3, the framing: an answer whose length is ambiguous is not read at all (one reader's body end is
    another's next answer): Content-Length given twice with different values, or not a number (1*DIGIT: int()
    would take "+2" and "1_0", and http.client reads what int() refuses as no length at all, to the close), or
    beside Transfer-Encoding, or a transfer coding other than chunked. Returns the framing it found: the
    Content-Length (None without one) and whether the body is chunked."""
    lengths: set[str] = set()
    codings: list[str] = []
    for name, value in headers:  # one pass: this runs on every answer
        if not _TOKEN.fullmatch(name):
            raise WireError(FailureKind.PROTOCOL, NOT_A_HEADER)
        key = name.lower()
        if key == "content-length":
            lengths.add(value.strip())
        elif key == "transfer-encoding":
            codings += [c.strip().lower() for c in value.split(",")]
    if len(lengths) > 1:
        raise WireError(FailureKind.PROTOCOL, "the answer gives two different Content-Length values")
    numbers = {whole_number(length, 19) for length in lengths}  # 19 digits is past any body
    if None in numbers:
        raise WireError(FailureKind.PROTOCOL, "the answer's Content-Length is not a number")
    if codings and lengths:
        raise WireError(FailureKind.PROTOCOL, "the answer gives both Transfer-Encoding and Content-Length")
    if codings and codings != ["chunked"]:
        raise WireError(FailureKind.PROTOCOL, f"unsupported Transfer-Encoding {', '.join(codings)!r}")
    return (next(iter(numbers)) if numbers else None), bool(codings)


def request_head(request: Request, parts: SplitResult) -> bytes:
    """The request line and headers as bytes, refused here (nothing sent) when they cannot be sent as they are."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name}: {value}" for name, value in request.headers]
    if request.body is not None or request.method in {"POST", "PUT", "PATCH"}:
        lines.append(f"Content-Length: {len(request.body or b'')}")
    if not request.reuse:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
