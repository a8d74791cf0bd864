"""Fleet commands: `worker`, `enqueue` and `db upgrade`, on SQLite or PostgreSQL (`--db` / POLLWARDEN_DB)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..audit.crypto import AuditError
from ..core.admission import HeldSecret, Limits, WatchRequest, check_many
from ..core.contract.parse import Contract
from ..core.digits import whole_number
from ..core.durations import format_rfc3339
from ..engine import BatchAdmissionError, Engine
from ..engine.preamble import Credentials, Refused, admit, credential_of, ready
from ..fleet.defaults import DEFAULT_CONCURRENCY, POSTGRES_CONCURRENCY, POSTGRES_POOL, SUPERVISOR_ENV
from ..fleet.metrics import Metrics
from ..fleet.worker import JsonLog, Worker
from ..foreground import stop_signals, wait_for
from ..home.directory import database_path, ensure_home, resolve_home, trusted_checkpoint_path
from ..home.operating import configured_witness
from ..shown import shown
from ..store.base import Store, StoreError
from ..store.open import is_postgres_url, open_store
from ..store.owner import process_owner, this_host
from . import jobs_file
from .common import UsageError, _duration, _load_contract, vars_of
from .jobs_file import operation_ids, read_jobs_file
from .watch import FLAGS

if TYPE_CHECKING:
    from ..fleet.hooks import HooksServer


def db_target(args: argparse.Namespace) -> str | Path:
    """--db, else POLLWARDEN_DB, else the SQLite file in the home."""
    explicit = getattr(args, "db", None) or os.environ.get("POLLWARDEN_DB")
    return explicit if explicit else database_path(resolve_home(getattr(args, "home", None)))


def store_factory(args: argparse.Namespace, *, pool_size: int = 4) -> Callable[[], Store]:
    from ..audit.keys import load_or_create_keys  # the keys (and cryptography) load with the store they open

    home = resolve_home(getattr(args, "home", None))
    target = db_target(args)
    try:
        ensure_home(home)
        keys = load_or_create_keys(home)
    except (AuditError, OSError) as exc:
        raise UsageError(str(exc)) from None

    try:
        witness = configured_witness(home)
    except StoreError as exc:
        raise UsageError(str(exc)) from None

    def make() -> Store:
        return open_store(
            target,
            keys=keys,
            trusted_checkpoint_path=trusted_checkpoint_path(home),
            pool_size=pool_size,
            witness=witness,
        )

    try:
        make().close()  # fail early, in words a person can act on
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    return make


def cmd_worker(args: argparse.Namespace) -> int:
    if args.concurrency is None:
        args.concurrency = POSTGRES_CONCURRENCY if is_postgres_url(str(db_target(args))) else DEFAULT_CONCURRENCY
    supervisor = (os.environ.get(SUPERVISOR_ENV) or None) if args.processes == 1 else None
    if supervisor is not None:
        if not whole_number(supervisor, 10):  # None, or 0
            raise UsageError(
                f"{SUPERVISOR_ENV} is set to {shown(supervisor[:24])!r}, which is no process id: only"
                " `worker --processes N` sets it, for its children; unset it to run a worker"
            )
        from ..fleet.supervisor import follow_supervisor

        if not follow_supervisor(supervisor):  # it died before this process could follow it: start nothing
            JsonLog(worker=process_owner("worker"))("supervisor_gone", supervisor=supervisor)
            return 0
    rates = _provider_rates(args.provider_rate or [])
    if args.processes > 1:
        return _supervise(args)
    factory = store_factory(args, pool_size=POSTGRES_POOL)
    owner = process_owner("worker")
    metrics = Metrics()
    log = JsonLog(worker=owner)
    if args.metrics_port is not None:
        metrics.count_fleet(factory, log=log)
        _serve_metrics(args, log, metrics.serve)
    worker = Worker(
        factory,
        owner=owner,
        concurrency=args.concurrency,
        metrics=metrics,
        log=log,
        provider_rates=rates,
    )
    if supervisor is not None:
        from ..fleet.supervisor import watch_parent

        watch_parent(supervisor, worker.stop)
    hooks = None
    if args.hooks_port is not None:
        hooks = _serve_hooks(factory(), args.hooks_host, args.hooks_port, log, owner)
    try:
        with stop_signals(worker.stop, then_ignore=True):
            worker.run()
    finally:
        if hooks is not None:
            hooks.stop()
            hooks.receiver.store.close()
    return 0


def _serve_hooks(store: Store, host: str, port: int, log: JsonLog, owner: str) -> HooksServer:
    """The push receiver on a thread of this process (`fleet.hooks`), announced in the log."""
    from ..fleet.hooks import HooksServer, Receiver

    try:
        server = HooksServer(Receiver(store, owner=owner, log=log), host=host, port=port).start()
    except OSError as exc:
        store.close()
        raise UsageError(f"cannot receive pushes on {host}:{port}: {exc.strerror or exc}") from None
    log("hooks_serving", url=f"{server.url}/hooks/CONTRACT")
    return server


def cmd_hooks(args: argparse.Namespace) -> int:
    """`pollwarden hooks`: the push receiver alone, in the foreground until Ctrl-C or SIGTERM."""
    owner = process_owner("hooks")
    log = JsonLog(worker=owner)
    server = _serve_hooks(store_factory(args)(), args.host, args.port, log, owner)
    print(f"receiving provider pushes on {server.url}/hooks/CONTRACT; stop with Ctrl-C", flush=True)
    from ..home.outbox import delivering

    try:
        # What its wakes commit (the witness's heads) goes out from the outbox while it serves.
        with delivering(server.receiver.store, "hooks", say=log), stop_signals() as done:
            wait_for(done)
    finally:
        server.stop()
        server.receiver.store.close()
    print("hooks stopped", flush=True)
    return 0


def _provider_rates(specs: list[str]) -> dict[str, float]:
    rates: dict[str, float] = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = -1.0
        if not name or not 0 < rate <= 10_000:
            raise UsageError(
                f"--provider-rate {spec!r}: write it as CONTRACT_NAME=REQUESTS_PER_SECOND, a rate above 0 and at"
                " most 10000 a second, e.g. exports=5"
            )
        rates[name] = rate
    return rates


def _serve_metrics(args: argparse.Namespace, log: JsonLog, serve: Callable[[int, str], int]) -> None:
    try:
        port = serve(args.metrics_port, args.metrics_host)
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc.strerror}") from None
    log("metrics_serving", url=f"http://{args.metrics_host}:{port}/metrics")


def cmd_metrics(args: argparse.Namespace) -> int:
    """`pollwarden metrics`: the fleet gauges on /metrics with no worker running, read from the database at each
    scrape (at most once a second). A database that cannot be read is no reason to stop serving: the scrape
    says `pollwarden_fleet_scrape_ok 0` and the log says why, so an alert fires instead of going dark."""
    from ..fleet.gauges import fleet_registry, serve_metrics
    from ..home.operating import open_store as open_home_store

    home = resolve_home(args.home)
    log = JsonLog(worker=f"metrics/{this_host()}:{os.getpid()}")
    registry, gauges = fleet_registry(lambda: open_home_store(home, keys="none"), log=log)
    try:
        with stop_signals(then_ignore=True) as stop:
            _serve_metrics(args, log, lambda port, host: serve_metrics(registry, port, host))
            gauges.reading()  # a database that cannot be read is logged now, not at the first scrape
            wait_for(stop)  # in slices: a signal delivered to another thread is run at the next one
    finally:
        gauges.close()
    log("metrics_stopped")
    return 0


def _supervise(args: argparse.Namespace) -> int:
    """`--processes N` (N > 1): the configuration is checked here, once, before any child starts; then N
    children run the same command with `--processes 1` (`fleet_supervisor`)."""
    from ..fleet.supervisor import GroupMetrics, Supervisor, child_command

    factory = store_factory(args)  # bad --db or --home: exit 2, nothing started
    log = JsonLog(worker=process_owner("worker"))
    group: GroupMetrics | None = None
    hooks = None
    try:
        if args.metrics_port is not None:
            group = GroupMetrics(factory, log=log)
            _serve_metrics(args, log, group.serve)
        if args.hooks_port is not None:  # one receiver for the group: its children wake by the store's bell
            hooks = _serve_hooks(factory(), args.hooks_host, args.hooks_port, log, process_owner("hooks"))
        command = child_command(concurrency=args.concurrency, home=args.home, provider_rates=args.provider_rate or [])
        supervisor = Supervisor(command, args.processes, log=log, extra_env=group.env if group is not None else None)
        code = supervisor.run()
    finally:
        if group is not None:
            group.close()
        if hooks is not None:
            hooks.stop()
            hooks.receiver.store.close()
    if supervisor.refused is not None:
        pid, exit_code = supervisor.refused
        raise UsageError(
            f"worker process {pid} exited {exit_code}, refusing its configuration (its message is above); the"
            " other worker processes were stopped"
        )
    return code


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Create an operation for the fleet to watch: persisted before any poll, nothing sent from here."""
    if args.jobs_file is not None:
        together = [flag for flag, value in (("--job", args.job), ("--status-url", args.status_url),
                                             ("--operation", args.operation)) if value is not None]  # fmt: skip
        if together:
            raise UsageError(f"--jobs-file gives the job ids; {' and '.join(together)} cannot be given with it")
    elif args.operation_prefix is not None:
        raise UsageError("--operation-prefix names the operations of a --jobs-file; for one job give --operation")
    contract = _load_contract(args.contract, vars_of(args))
    # The worker holds the credential; when this shell has it too, a job id that contains it is refused.
    credential = _enqueuable(lambda: credential_of(WatchRequest(contract, None), Credentials.HELD))
    limits = Limits(
        deadline=_duration(args.deadline, "--deadline"),
        max_requests=args.max_requests,
        lag_target=_duration(args.lag_target, "--lag-target"),
    )
    if args.jobs_file is not None:
        return _enqueue_file(args, contract, limits, credential)
    if args.job is None and args.status_url is None:
        raise UsageError("enqueue needs --job JOB_ID, or --status-url URL for a contract with status_url_handles")
    request = WatchRequest(
        contract,
        args.job,
        args.operation,
        limits,
        by="enqueue",
        credential=credential,
        status_location=args.status_url,
    )
    prepared = _enqueuable(lambda: ready(request, Credentials.GIVEN))  # before the store: exit 2 creates nothing
    store = store_factory(args)()
    try:
        engine = Engine(store, owner=process_owner("enqueue"), clock=store.db_now)
        admitted = _enqueuable(lambda: admit(prepared, engine))
    finally:
        store.close()
    record = admitted.record
    job = shown(record.job_id)
    if admitted.created:
        print(f"enqueued {record.operation_id}: job {job}, deadline {format_rfc3339(record.deadline_at)}")
    else:  # the same job again: its operation, never a second budget
        print(
            f"already enqueued as {record.operation_id} ({record.phase.value}): job {job}, deadline"
            f" {format_rfc3339(record.deadline_at)}; nothing new was created"
        )
    return 0


_T = TypeVar("_T")


def _enqueuable(step: Callable[[], _T]) -> _T:
    """A step of the preamble (`engine.preamble`), its refusal in this command's words (exit 2)."""
    try:
        return step()
    except Refused as exc:
        raise UsageError(exc.said(FLAGS, "enqueue")) from None


def _enqueue_file(
    args: argparse.Namespace, contract: Contract, limits: Limits, credential: str | HeldSecret | None
) -> int:
    """`--jobs-file`: every line parsed and checked before the store is opened, every job admitted against it
    before the first batch is written (`Engine.admit_many`); a bad line is exit 2 with nothing enqueued."""
    file = read_jobs_file(args.jobs_file)
    ids = operation_ids(args.operation_prefix, len(file.jobs))
    requests = [
        WatchRequest(contract, job.job_id, operation_id, limits, by="enqueue", credential=credential)
        for job, operation_id in zip(file.jobs, ids, strict=True)
    ]

    def where(index: int) -> str:
        return f"line {file.jobs[index].number}"

    problems = file.problems + jobs_file.line_problems(file, check_many(requests, where))
    if problems:  # before the store is opened: a bad file creates nothing, not even a home
        raise jobs_file.refused(file, problems)
    if not requests:
        raise UsageError(
            f"--jobs-file {file.name} holds no job ids (blank lines and # comments are skipped); nothing to enqueue"
        )
    store = store_factory(args)()
    try:
        engine = Engine(store, owner=process_owner("enqueue"), clock=store.db_now)
        try:
            admitted = engine.admit_many(requests, where=where)
        except BatchAdmissionError as exc:
            raise jobs_file.refused(
                file, jobs_file.line_problems(file, exc.refusals), admitted=len(exc.admitted)
            ) from None
    finally:
        store.close()
    print(jobs_file.summary(file, admitted))
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    target = db_target(args)
    if not is_postgres_url(target):
        print(f"{target}: SQLite files are upgraded in place when opened; nothing to do")
        return 0
    from ..store.postgres import upgrade_database  # psycopg, only for a PostgreSQL target

    try:
        applied = upgrade_database(str(target))
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    print(f"applied migrations {applied}" if applied else "the database is up to date")
    return 0
