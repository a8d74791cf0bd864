"""`pollwarden worker --processes N`: N worker processes on one store, started, watched and stopped as one.

One worker process is bound by one core of Python; on one SQLite file two processes poll 1.3-1.5x what one
does when the cores are the limit (docs/performance.md). The supervisor polls nothing and holds no lease: the
command it was given has already been checked (store, home, flags: exit 2 with nothing started), and it runs N
children that are the same command with `--processes 1`, each its own owner with its own lanes. The leases keep
one owner per operation across processes, as they do across machines, so nothing here coordinates polls.

What it adds: SIGTERM/SIGINT are passed to every child and waited for (in-flight requests finish, leases are
given back); a child that dies unexpectedly is restarted with backoff and a log line; a child that exits 2
(a configuration it refuses) stops them all with exit 2; and with --metrics-port one /metrics for the group,
through prometheus_client's multiprocess mode. A child dies with the supervisor (`follow_supervisor`): a kill -9 of
the command is a kill -9 of every process in it, so no worker outlives the command an operator started and
would kill again, and what a kill -9 leaves (held leases, reservations already durable) is what one process
leaves: the next claimer takes a dead holder's lease at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from types import FrameType

from ..errors import EXIT_USAGE
from ..foreground import SignalRelay
from ..store.base import Store
from .defaults import SUPERVISOR_ENV
from .gauges import count_fleet, serve_metrics
from .worker import JsonLog

RESTART_FIRST = 0.1
RESTART_MAX = 5.0
HEALTHY_AFTER = 30.0
"""A child that ran this long before it died is restarted after RESTART_FIRST again, not the grown backoff."""

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

_kernel_follows = False
"""True once PR_SET_PDEATHSIG is set in this process: the kernel stops it when its supervisor dies."""


def child_command(*, concurrency: int, home: str | None, provider_rates: Sequence[str]) -> list[str]:
    """The worker command each child runs: this interpreter, the same flags, one process. The database is
    not among them: it travels in POLLWARDEN_DB (`main` puts --db there), since a URL may hold a password and
    a command line is readable by every user of the machine."""
    command = [sys.executable, "-m", "pollwarden", "worker", "--processes", "1", "--concurrency", str(concurrency)]
    if home is not None:
        command += ["--home", home]
    for spec in provider_rates:
        command += ["--provider-rate", spec]
    return command


def ended_how(returncode: int) -> str:
    """`exit 1` or `killed by SIGKILL`, for the log line of a child that ended."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


@dataclass
class _Slot:
    """One of the N places a child runs in; a restart fills the same place with a new process."""

    number: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = RESTART_FIRST
    restart_at: float | None = None
    told: bool = False
    """The stop signal was passed to this process: once is enough, and a second one could reach it after its
    interpreter put the default handler back on its way out (it would then end "killed by SIGTERM")."""


class Supervisor:
    """Runs `processes` copies of `command` until a signal, restarting those that die on their own.

    Every child is started from the thread that calls `run` (the main thread): Linux's PR_SET_PDEATHSIG fires
    when the thread that forked the child ends, not only when the process does, so a restart from a helper
    thread would stop the child it started as soon as that thread finished."""

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        *,
        log: JsonLog,
        extra_env: Mapping[str, str] | None = None,
        check_every: float = 0.05,
    ) -> None:
        self.command = list(command)
        self.slots = [_Slot(n) for n in range(processes)]
        self.log = log
        self.env = {**os.environ, **(extra_env or {}), SUPERVISOR_ENV: str(os.getpid())}
        self.check_every = check_every
        self.refused: tuple[int, int] | None = None
        """(pid, exit code) of the child whose exit 2 stopped the group."""
        self._stop_signal: int | None = None
        self._wake = threading.Event()
        self._relay: SignalRelay

    def run(self) -> int:
        """0 once stopped by SIGTERM/SIGINT and every child has ended; 2 when a child refused its configuration."""
        self._relay = SignalRelay(self._wake)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.log("supervisor_started", processes=len(self.slots))
            for slot in self.slots:
                self._start(slot)
            while self._stop_signal is None and self.refused is None:
                self._look()
                self._wake.wait(self.check_every)
            self._stop_all()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._relay.close()
        if self.refused is not None:
            pid, code = self.refused
            self.log("supervisor_stopped", why=f"worker process {pid} exited {code}")
            return EXIT_USAGE
        self.log("supervisor_stopped", why=signal.Signals(self._stop_signal or signal.SIGTERM).name)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum
        self._forward(signum)  # at once: a child need not wait for the loop's next look to start stopping
        self._relay.handler(signum, frame)  # not self._wake.set(): a handler must take no lock (SignalRelay)

    def _forward(self, signum: int, *, untold_only: bool = False) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.returncode is None and not (untold_only and slot.told):
                slot.told = True
                with suppress(ProcessLookupError):  # it ended on its own meanwhile; the next poll() sees it
                    slot.proc.send_signal(signum)

    def _start(self, slot: _Slot) -> None:
        slot.proc = subprocess.Popen(self.command, env=self.env, stdin=subprocess.DEVNULL)
        slot.started = time.monotonic()
        slot.restart_at = None
        slot.told = False
        self.log("worker_process_started", pid=slot.proc.pid, slot=slot.number)

    def _look(self) -> None:
        """Note the children that ended on their own, and start again those whose backoff is over. A child keeps
        its slot until its successor starts, so `_stop_all` still finds it if a stop comes in between."""
        now = time.monotonic()
        for slot in self.slots:
            if self._stop_signal is not None:  # what ends from now on was asked to; nothing starts again
                return
            proc = slot.proc
            if proc is None:
                continue
            if slot.restart_at is None:
                code = proc.poll()
                if code is None:
                    continue
                if code == EXIT_USAGE:  # it already said why on stderr, which it shares with us
                    self._ended(slot, proc, code, restart_in=None)
                    self.refused = (proc.pid, code)
                    return
                if now - slot.started >= HEALTHY_AFTER:
                    slot.backoff = RESTART_FIRST
                slot.restart_at = now + slot.backoff
                self._ended(slot, proc, code, restart_in=slot.backoff)
                slot.backoff = min(RESTART_MAX, slot.backoff * 2)
            if now >= slot.restart_at:
                self._start(slot)

    def _ended(self, slot: _Slot, proc: subprocess.Popen[bytes], code: int, *, restart_in: float | None) -> None:
        self.log("worker_process_ended", pid=proc.pid, slot=slot.number, ended=ended_how(code),
                 ran_seconds=round(time.monotonic() - slot.started, 3), restart_in=restart_in)  # fmt: skip

    def _stop_all(self) -> None:
        """Pass the stop on to a child started while the handler ran (it was not in its slot yet) and wait; a
        child finishes its in-flight requests first, which their contracts' timeouts bound."""
        self._forward(self._stop_signal or signal.SIGTERM, untold_only=True)
        for slot in self.slots:
            proc = slot.proc
            if proc is None or slot.restart_at is not None or (self.refused and self.refused[0] == proc.pid):
                continue  # never started, or its end was logged already
            code = proc.wait()  # a second SIGTERM or SIGINT meanwhile is passed on by the handler
            if code not in (0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT):
                self._ended(slot, proc, code, restart_in=None)


class GroupMetrics:
    """One /metrics for the supervisor's children: prometheus_client's multiprocess mode. Each child writes its
    counters and histograms to files of its own in a private directory (`env`); the supervisor's collector sums
    every file there on each scrape, a dead or restarted child's too, so a counter never goes back. The fleet
    gauges are the database's, counted here once rather than once per child."""

    def __init__(self, store_factory: Callable[[], Store], *, log: JsonLog | None = None) -> None:
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        self.directory = tempfile.mkdtemp(prefix="pollwarden-metrics-")  # 0700, whatever the umask
        self.registry = CollectorRegistry()
        MultiProcessCollector(self.registry, path=self.directory)  # type: ignore[no-untyped-call]
        count_fleet(self.registry, store_factory, log=log)

    @property
    def env(self) -> dict[str, str]:
        return {"PROMETHEUS_MULTIPROC_DIR": self.directory}

    def serve(self, port: int, host: str) -> int:
        return serve_metrics(self.registry, port, host)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def follow_supervisor(expected: str) -> bool:
    """In a child: die with the supervisor (pid `expected`). On Linux the kernel sends SIGKILL when the parent
    dies (PR_SET_PDEATHSIG), not SIGTERM: a supervisor that was killed (or crashed) was not asked to stop
    gracefully, so neither are its children; a SIGTERM to the supervisor is passed on and waited for instead.
    The parent may have died before that was set, so whether it is still the parent is checked after. False:
    it is already gone, and the child should not start. Elsewhere the caller watches `os.getppid()`
    (`watch_parent`)."""
    if sys.platform.startswith("linux"):
        import ctypes

        global _kernel_follows
        libc = ctypes.CDLL(None, use_errno=True)
        _kernel_follows = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    return str(os.getppid()) == expected


def watch_parent(expected: str, stop: threading.Event, *, every: float = 1.0) -> threading.Thread | None:
    """Where PR_SET_PDEATHSIG does not exist (or failed): a thread that sets `stop` once the parent is no longer
    `expected` (an orphan's parent becomes init or a subreaper). None where the kernel does it."""
    if _kernel_follows:
        return None
    return start_parent_watch(expected, stop, every=every)


def start_parent_watch(expected: str, stop: threading.Event, *, every: float = 1.0) -> threading.Thread:
    def watch() -> None:
        while not stop.wait(every):
            if str(os.getppid()) != expected:
                stop.set()

    thread = threading.Thread(target=watch, name="pollwarden-parent-watch", daemon=True)
    thread.start()
    return thread


__all__ = [
    "GroupMetrics",
    "Supervisor",
    "child_command",
    "ended_how",
    "follow_supervisor",
    "watch_parent",
]
