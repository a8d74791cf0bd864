"""Reading a file a person named (a flag, a setting) without trusting its size.

`path.read_bytes()` of `/dev/zero`, of a FIFO whose writer never stops or of a runaway file reads until memory
runs out; a file named from outside is read up to a limit, and one past it is refused, never read whole.
The one read the core does (`load_contract`) uses it, so it lives here, where every interface can import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from ..errors import PollwardenError

__all__ = ["TooLarge", "read_bounded", "read_stream_bounded"]


class TooLarge(PollwardenError):
    """The file holds more than the limit; `limit` says how much was allowed. Bad input (exit 2), though every
    reader turns it into its own error naming the flag or the file's role."""

    def __init__(self, path: Path | str, limit: int) -> None:
        super().__init__(f"{path} is larger than {limit} bytes")
        self.limit = limit


def read_bounded(path: Path | str, limit: int) -> bytes:
    """The whole file, if it holds at most `limit` bytes; else TooLarge (after reading `limit` + 1 bytes).
    OSError as opening or reading raises it (a missing file, a directory, an I/O error)."""
    with open(path, "rb") as handle:
        return read_stream_bounded(handle, limit, path)


def read_stream_bounded(stream: BinaryIO, limit: int, name: Path | str) -> bytes:
    """`read_bounded` of an open stream (standard input for `-`); `name` is what TooLarge calls it."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(name, limit)
    return data
