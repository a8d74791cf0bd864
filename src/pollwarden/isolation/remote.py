"""A person's command carried out by the broker: `pollwarden decide D --option 1 --connect SOCKET`.

The words go to the broker as they were typed; it runs them on its own home as the user the kernel names for this
connection, and sends back what the command printed and its exit code, which this process prints and returns.
"""

from __future__ import annotations

import contextlib
import sys

from ..errors import PollwardenError
from .protocol import VERSION, ProtocolError, connect, encode, read_message, unreachable

COMMAND_SECONDS = 600.0
"""A command may send a request to a provider (a decided cancel): the broker's own bound is the contract's."""


class BrokerUnavailable(PollwardenError):
    exit_code = 2


def ask_broker(path: str, message: dict[str, object]) -> dict[str, object]:
    try:
        conn = connect(path, COMMAND_SECONDS)
    except OSError as exc:
        raise BrokerUnavailable(unreachable(path, exc)) from None
    with conn, conn.makefile("rb") as source:
        try:
            conn.sendall(encode({"pollwarden": VERSION, **message}))
            return read_message(source)
        except (OSError, ProtocolError) as exc:
            raise BrokerUnavailable(f"the broker at {path} did not answer ({exc})") from None


def run_remote(path: str, words: list[str], *, home: str | None, db: str | None) -> int:
    if home or db:
        raise BrokerUnavailable(
            "--home and --db do not go with --connect: the broker uses its own home; give --connect alone"
        )
    answer = ask_broker(path, {"mode": "command", "argv": words})
    for stream, key in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
        text = answer.get(key)
        if isinstance(text, str) and text:
            with contextlib.suppress(OSError, ValueError):
                stream.write(text)
                stream.flush()
    code = answer.get("exit")
    return code if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < 256 else 1
