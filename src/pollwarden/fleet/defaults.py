"""The worker's defaults, in a module of their own so the CLI's grammar can show them without loading the worker."""

from __future__ import annotations

import os

LANES = 2
"""Batches in progress at once per worker process; `concurrency` (requests in flight) is split between them."""

DEFAULT_CONCURRENCY = 128
"""Status requests in flight at once per worker process on SQLite: two batches of 64 that each commit together
(a batch holds the file's one write lock while it commits, so fewer, larger batches share it better between
processes): the default command polled 2,233 a second against 1,849 with 32, one process 1,606 against 1,425
(docs/performance.md). Lateness at half of capacity did not move."""

POSTGRES_CONCURRENCY = 64
"""The same on PostgreSQL, where a batch's transactions are round trips to the server that more requests in
flight hide: one process polled 1,065 a second with 64 against 850 with 32 (docs/performance.md)."""

POSTGRES_POOL = 8
"""The most connections one worker process holds to PostgreSQL, whatever its `concurrency`: a connection is held
for a transaction, never across a request, so a few serve any number in flight (its two lanes hold one each while
they claim or write; the rest serve operations stepped one by one), and one more for the fleet gauges with
`--metrics-port`. The pool once grew with `concurrency`, to 66, and the default `worker --processes 2` could
take 132 of the server's default `max_connections` of 100."""

MAX_PROCESSES = 64
"""The most worker processes one `pollwarden worker --processes N` starts."""

AUTO_PROCESSES_CAP = 4
"""`--processes auto` starts one process per usable core, at most this many: on one SQLite file every process
shares its one write lock, and a third process gained little over two (docs/performance.md)."""


def auto_processes() -> int:
    """The usable cores (this process's CPU affinity, which a container or `taskset` narrows), capped."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        cores = os.cpu_count() or 1
    return max(1, min(AUTO_PROCESSES_CAP, cores))


SUPERVISOR_ENV = "POLLWARDEN_SUPERVISOR_PID"
"""Set by `worker --processes N` for each of its children: the supervisor's pid, which the child checks is still
its parent (a child must not outlive it)."""
