"""`pollwarden` run on a pseudo-terminal, for what it prints only on a terminal (redrawn lines, cut lines)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time


def run_on_pty(
    args: list[str], env: dict[str, str], *, columns: int | None = None, timeout: float = 30
) -> tuple[int, str]:
    """The command's exit code and everything it drew; `columns` sets the terminal's width."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        if columns is not None:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        os.execvpe(sys.executable, [sys.executable, "-m", "pollwarden", *args], env)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace")
