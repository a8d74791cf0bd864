"""A token command or a token file: the credential sources that are slow to read, read off the caller's thread.

A command may take seconds, hang, or print without end; a file may be a FIFO nobody writes to. So each source
(one argv, one path) has one slot in the process (`Slot`), and:

- one run at a time per source, in a thread of its own: every client of the contract (a worker holds many, in
  several lanes) waits for the same run, or goes on without it, instead of starting a run of its own;
- ahead of need: once a token is three quarters through its `token_ttl`, the next look at it (`Slot.look`, which
  a worker makes every batch) starts its refresh in the background, and requests go on with the current token;
  a request waits for a run only when there is no token to use at all (the first, one a 401 dropped, or one
  whose refresh has hung past its ttl), and a worker does not even claim such a contract's operations;
- bounded: a run ends by its timeout, the command's whole process group killed (a helper it left holding its
  output open included), and at most `MAX_TOKEN_BYTES` + 1 bytes of its output are ever read;
- a failed run's error is what a request meets, at once, for `RETRY_AFTER` seconds (recorded as that request's
  local failure, as a failing command always was); the source is run again after that.

A failure says which file or command (`argv[0]` and its exit status) failed, never what it printed: that output
may be the token.
"""

from __future__ import annotations

import atexit
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field

from ..core.bounded import TooLarge, read_bounded
from ..errors import PollwardenError

TOKEN_COMMAND_TIMEOUT = 30.0
MAX_TOKEN_BYTES = 64 * 1024
"""Far longer than any bearer token or JWT; a command that prints more is printing something else."""

REFRESH_AT = 0.75
"""The part of its ttl after which a token is fetched again in the background, ahead of need."""

RETRY_AFTER = 5.0
"""Seconds a failed run's error stands (each request meets it at once) before the source is run again."""

READY_MARGIN = 1.0
"""A token `ready` calls usable has at least this long left (a quarter of its ttl, if that is shorter): a batch
that looked at it applies it a few milliseconds later, never to find it expired and wait for a run."""


class CredentialError(PollwardenError):
    """The credential is missing or unusable here, or a request would carry it somewhere the contract does not name."""


def clean(value: str | None, where: str) -> str:
    """The credential as it will be sent, from `where` ("environment variable X", "the output of ...").

    Mounted secrets and command output usually end in a newline, so exactly one trailing "\\n" or "\\r\\n" is
    removed. Whatever is left must be printable ASCII (space to "~") with no space at either end: anything else
    cannot travel in a header unchanged (HTTP strips the spaces, latin-1 is the most a header holds and servers
    disagree even on that), and a value the server reads differently from what we hold is one our scrubber may
    miss."""
    if value is not None:
        value = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
    if not value:
        raise CredentialError(f"the credential in {where} is not set or empty; set it and run again")
    if any(not " " <= ch <= "~" for ch in value) or value != value.strip(" "):
        raise CredentialError(
            f"the credential in {where} holds a control character, a non-ASCII character,"
            " more than one trailing newline or a space at either end, and cannot be sent in a header unchanged;"
            " write it as printable ASCII (one trailing newline is fine) and run again"
        )
    return value


# -- one run ------------------------------------------------------------------------------------------------------

_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


def run_token_command(argv: tuple[str, ...], environ: Mapping[str, str], timeout: float) -> str:
    """The token a command prints: no shell, no stdin (it cannot prompt), stderr discarded (it may echo the token),
    its own process group (killed whole at the timeout), at most `MAX_TOKEN_BYTES` + 1 bytes of output read."""
    name = os.path.basename(argv[0])
    deadline = time.monotonic() + timeout
    try:
        proc = subprocess.Popen(  # an argv list from the contract, never a shell string
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(environ),
            start_new_session=True,
        )
    except (FileNotFoundError, NotADirectoryError):  # a path through a file is as missing as any
        raise CredentialError(f"[auth].token_command: {name!r} was not found; install it or fix the path") from None
    except PermissionError:
        raise CredentialError(f"[auth].token_command: {name!r} is not executable") from None
    except OSError as exc:
        raise CredentialError(f"[auth].token_command: {name!r} could not run ({exc.__class__.__name__})") from None
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    why: str | None = "timeout"
    try:
        assert proc.stdout is not None
        output, why = _read_capped(proc.stdout.fileno(), deadline, MAX_TOKEN_BYTES + 1)
        if why is None:  # its output ended: its exit status, within what is left of the time
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                why = "timeout"
    finally:
        if why is not None or proc.poll() is None:
            _kill(proc)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    if why == "timeout":
        raise CredentialError(f"[auth].token_command: {name!r} did not finish within {timeout:g} s")
    if why == "too much":
        raise CredentialError(f"[auth].token_command: {name!r} printed more than {MAX_TOKEN_BYTES} bytes")
    if proc.returncode != 0:
        raise CredentialError(
            f"[auth].token_command: {name!r} exited with status {proc.returncode}; run it yourself to see why"
        )
    try:
        text = output.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"  # refused by `clean` with its usual message
    return clean(text, f"the output of token_command {name!r}")


def _read_capped(fd: int, deadline: float, limit: int) -> tuple[bytes, str | None]:
    """What the pipe gives until its end (None), the deadline ("timeout") or `limit` bytes ("too much")."""
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b"".join(chunks), "timeout"
            if not selector.select(left):
                continue
            data = os.read(fd, min(65536, limit - size))
            if not data:
                return b"".join(chunks), None
            chunks.append(data)
            size += len(data)
            if size >= limit:
                return b"".join(chunks), "too much"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The command and everything it started (its own session: its process group has its pid)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with suppress(OSError):
            proc.kill()


@atexit.register
def _kill_running() -> None:
    """A process that leaves while a command runs (its thread is a daemon) takes the command with it."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        _kill(proc)


def read_token_file(path: str) -> str:
    try:
        data = read_bounded(path, MAX_TOKEN_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise CredentialError(f"[auth].token_file: {path} does not exist") from None
    except OSError as exc:
        raise CredentialError(f"[auth].token_file: cannot read {path} ({exc.__class__.__name__})") from None
    except TooLarge:
        raise CredentialError(f"[auth].token_file: {path} is longer than {MAX_TOKEN_BYTES} bytes") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"
    return clean(text, f"token_file {path}")


# -- one source's slot -------------------------------------------------------------------------------------------

Fetch = Callable[[], str]
"""One run of a source: the token, or CredentialError."""


@dataclass
class Slot:
    """What this process holds of one source: its token and until when, a run under way, the last failure."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    value: str | None = None
    expires: float = float("-inf")
    refresh_at: float = float("-inf")
    failure: CredentialError | None = None
    failed_at: float = float("-inf")
    running: threading.Event | None = None

    def look(self, fetch: Fetch, monotonic: Callable[[], float], ttl: float, margin: float) -> str | Exception | None:
        """What a request gets now without waiting: the token (with `margin` seconds of it left), the failure it
        meets, or None: a run is under way, started here if none was. A token due for its refresh is returned,
        and the refresh started."""
        now = monotonic()
        with self.lock:
            if self.value is not None and now + margin < self.expires:
                if now >= self.refresh_at and self.running is None and now >= self.failed_at + RETRY_AFTER:
                    self._start(fetch, monotonic, ttl)
                return self.value
            if self.running is None:
                if self.failure is not None and now < self.failed_at + RETRY_AFTER:
                    return CredentialError(str(self.failure))
                self._start(fetch, monotonic, ttl)
            return None

    def wait(self, fetch: Fetch, monotonic: Callable[[], float], ttl: float) -> str:
        """The token, once the run under way (or one started here) has ended if there is none to use now; raises
        the failure a request meets."""
        while True:
            got = self.look(fetch, monotonic, ttl, 0.0)
            if isinstance(got, str):
                return got
            if isinstance(got, Exception):
                raise got
            with self.lock:
                running = self.running
            if running is not None:
                running.wait()

    def drop(self) -> None:
        """A 401: the token is not used again; the next look runs the source (a run under way still lands)."""
        with self.lock:
            self.value, self.expires = None, float("-inf")
            self.failure, self.failed_at = None, float("-inf")

    def _start(self, fetch: Fetch, monotonic: Callable[[], float], ttl: float) -> None:
        done = self.running = threading.Event()
        try:
            threading.Thread(
                target=self._run, args=(fetch, monotonic, ttl, done), name="pollwarden-token", daemon=True
            ).start()
        except RuntimeError as exc:  # no thread left in the process: this run fails, as a command that cannot start
            self.running = None
            self.failure, self.failed_at = CredentialError(f"the credential could not be read ({exc})"), monotonic()
            done.set()

    def _run(self, fetch: Fetch, monotonic: Callable[[], float], ttl: float, done: threading.Event) -> None:
        value: str | None = None
        failure: CredentialError | None = None
        try:
            value = fetch()
        except CredentialError as exc:
            failure = exc
        except Exception as exc:  # a defect of a source must end its run, never leave its waiters waiting
            failure = CredentialError(f"the credential could not be read ({type(exc).__name__})")
        finished = monotonic()
        with self.lock:
            if value is not None:
                self.value, self.expires, self.refresh_at = value, finished + ttl, finished + ttl * REFRESH_AT
                self.failure, self.failed_at = None, float("-inf")
            else:
                self.failure, self.failed_at = failure, finished
            self.running = None
        done.set()


_SLOTS: dict[tuple[str, ...], Slot] = {}
_SLOTS_LOCK = threading.Lock()


def slot_of(key: tuple[str, ...]) -> Slot:
    """The process's one slot of a source (`("command", *argv)`, `("file", path)`): every client of every contract
    naming it shares its token, its runs and a 401 seen by any of them."""
    with _SLOTS_LOCK:
        slot = _SLOTS.get(key)
        if slot is None:
            slot = _SLOTS[key] = Slot()
        return slot


def ready_margin(ttl: float) -> float:
    return min(READY_MARGIN, ttl / 4)
