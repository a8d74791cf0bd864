"""Issue 23: a client that goes away mid-request or mid-answer costs one log line, never a traceback.

At the socket level: each client connects, sends its request (a form whose body never all arrives, or a page it
never reads) and closes with a reset (SO_LINGER 0), so the console's next read or write on it fails."""

from __future__ import annotations

import io
import socket
import struct
import threading
from pathlib import Path

from pollwarden.console import ConsoleServer

from .conftest import TOKEN


class Log(io.StringIO):
    """The console's log stream; a test waits on its lines, not on a clock."""

    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            self.text += text
            self._changed.notify_all()
        return len(text)

    def lines(self) -> list[str]:
        return self.text.splitlines()

    def wait_for(self, count: int) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.lines()) >= count, timeout=60), self.text
            return self.lines()


def _reset_after(port: int, request: bytes) -> None:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends a reset
    conn.sendall(request)
    conn.close()


def test_a_client_that_disconnects_is_one_log_line_not_a_traceback(home: Path) -> None:
    log = Log()
    with ConsoleServer(home, token=TOKEN, log=log) as console:
        host = f"127.0.0.1:{console.port}"
        partial_form = (
            f"POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken=abc"
        ).encode()
        for count in range(1, 4):  # the body never all arrives: the console is reading it when the reset comes
            _reset_after(console.port, partial_form)
            log.wait_for(count)
        for count in range(4, 7):  # a page never read: the console is writing it when (or after) the reset comes
            _reset_after(console.port, f"GET /login HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            log.wait_for(count)
        lines = log.wait_for(6)
    assert "Traceback" not in log.text and "internal error" not in log.text, log.text
    assert len(lines) == 6, lines
    for line in lines[:3]:
        assert line == (
            'console: 127.0.0.1 "POST /login" - the client disconnected before the answer was sent'
            " (ConnectionResetError)"
        )
    for line in lines[3:]:  # one line each, whether the reset came before the answer was written or after
        assert line.startswith('console: 127.0.0.1 "GET /login" 200'), line


def test_a_form_length_that_is_not_ascii_digits_is_411(home: Path) -> None:
    """'+5', '1_0' and ' 9 ' are numbers to int(): a Content-Length is ASCII digits only (RFC 9110 §8.6)."""
    with ConsoleServer(home, token=TOKEN, log=Log()) as console:
        host = f"127.0.0.1:{console.port}"
        for length in ("\uff11\uff12", "+5", "1_0", " 9 "):
            head = (
                f"POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nConnection: close\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", console.port), timeout=30) as conn:
                conn.sendall(head.encode() + b"token=abcdef")
                conn.shutdown(socket.SHUT_WR)
                answer = b"".join(iter(lambda: conn.recv(65536), b""))
            assert answer.split(b" ", 2)[1] == b"411", (length, answer[:200])
