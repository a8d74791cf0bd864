"""An answer's body as the reader takes it: Content-Encoding gzip or deflate undone in bounded steps (a bomb is
cut at the caller's room), the raw body read in pieces under the exchange's deadline."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Mapping

from ..core.observe import FailureKind
from .messages import READ_CHUNK, Answer, WireError

__all__ = ["ACCEPT_ENCODING", "Decoder", "body_pieces", "decoder_for"]

ACCEPT_ENCODING = "gzip, deflate"
"""Only what `decoder_for` decodes: advertising more would turn every compressing gateway into invalid_response."""


class Decoder:
    """Content-Encoding gzip or deflate, undone in bounded steps so a bomb never grows past the cap."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_deflate_tried = encoding != "deflate"
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        self._fed = False

    def feed(self, data: bytes, limit: int) -> bytes:
        """At most `limit` bytes out (limit >= 1); more pending output shows as a full `limit`."""
        try:
            out = self._zlib.decompress(data, limit)
        except zlib.error:
            if self._fed or self._raw_deflate_tried:
                raise WireError(FailureKind.PROTOCOL, f"the {self.encoding} body is corrupt") from None
            # "deflate" is sent both zlib-wrapped (the standard) and raw (some servers): try the other.
            self._raw_deflate_tried = True
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.feed(data, limit)
        self._fed = True
        return out

    def finish(self) -> None:
        if not self._zlib.eof:
            raise WireError(FailureKind.PROTOCOL, f"the {self.encoding} body ended before its compressed stream did")


def decoder_for(headers: Mapping[str, str]) -> Decoder | None:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in {"gzip", "x-gzip"}:
        return Decoder("gzip")
    if encoding == "deflate":
        return Decoder("deflate")
    return None  # identity; anything else is passed on still encoded, and the parser refuses it by its header


def body_pieces(
    answer: Answer, decoder: Decoder | None, deadline: float, room: Callable[[], int]
) -> Iterator[tuple[bytes, int]]:
    """The body as decoded pieces, each with the raw bytes read so far; `room` is how much more decoded output
    the caller will take (a decompression bomb is cut there), and the whole read ends at `deadline`."""
    raw_size = 0
    while True:
        if time.monotonic() > deadline:
            raise WireError(FailureKind.TIMEOUT, "the body did not arrive within the timeout")
        raw = answer.read(READ_CHUNK)
        if not raw:
            if decoder is not None:
                decoder.finish()
            return
        raw_size += len(raw)
        yield (raw if decoder is None else decoder.feed(raw, room())), raw_size
